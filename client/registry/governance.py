"""What a benchmark's authority and the registry's admin decide, as library functions the
``sealbench benchmark ...`` and ``sealbench association ...`` commands and ``sealbench demo``
both call: publish a benchmark from its definition, approve it, and approve or reject a link
between a benchmark and a dataset or model. Printing is the caller's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sealbench.benchmarks.interface import EXACT_SUFFIX, POOLED_ONLY_SUFFIX
from sealbench.client.errors import ConfigError
from sealbench.client.images import pinned
from sealbench.client.registry import definitions
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.contract.pin import BenchmarkPin
from sealbench.server.schemas import AssociationPublic, BenchmarkCreate, BenchmarkPublic

__all__ = ["Decision", "approve_benchmark", "create_benchmark", "decide_association",
           "with_site_releases"]

#: Called before an owner's consent to a benchmark, with the client, the benchmark and the
#: dataset id whose owner consents (None otherwise): prints what is consented to, raises to
#: refuse (:data:`sealbench.client.assets.lifecycle.ConsentCheck`).
ConsentCheck = Callable[[RegistryClient, BenchmarkPublic, "int | None"], None]


def create_benchmark(
    client: RegistryClient, definition: str, *, tee: str = "mock",
    image_reference: str | None = None, image_digest: str | None = None,
    reference_model: int | None = None, name: str | None = None, version: str | None = None,
    publish_leaderboard: bool = False, accept_experimental: bool = False,
    aggregator_digest: str | None = None, pool_in_tee: bool = False,
    witnesses: tuple[str, ...] = (), witness_quorum: int | None = None,
    site_releases: bool | None = None,
) -> BenchmarkPublic:
    """Publish ``definition`` (a shipped definition's name or a definition JSON file, renamed
    by ``name``/``version``) pinned to the ``tee`` backend's evaluation image (or the one named
    explicitly), naming ``reference_model`` and, for a benchmark that pools in the TEE (issue
    27), its aggregator image: ``aggregator_digest``, or with ``pool_in_tee`` the ``tee``
    backend's (:func:`~sealbench.client.images.pinned.aggregator_image`); an admin
    approves it before anyone can join.

    **Per-site releases** (issue 41): a benchmark that pools in the TEE publishes its pooled
    release only (its pin gets :data:`~sealbench.benchmarks.interface.POOLED_ONLY_SUFFIX`,
    which the owners' key-release conditions bind) unless ``site_releases`` asks for each
    site's own release too; a benchmark of exact releases keeps them (they spend no budget).
    ``site_releases`` False without pooling in the TEE, or True on a ``-pool`` pin, is refused
    (:class:`ConfigError`) before anything is sent."""
    if pool_in_tee and aggregator_digest is not None:
        raise ConfigError("pass --pool-in-tee or --aggregator-digest, not both",
                          hint="--pool-in-tee takes the --tee backend's aggregator image")
    if pool_in_tee:
        aggregator_digest = pinned.aggregator_image(tee)
    body = definitions.benchmark_body(
        definitions.load_benchmark_definition(definition, name=name, version=version),
        image=pinned.evaluation_image(tee, image_reference, image_digest),
        reference_model_id=reference_model,
        leaderboard_published=publish_leaderboard, accept_experimental=accept_experimental,
        aggregator_digest=aggregator_digest, witnesses=witnesses,
        witness_quorum=len(witnesses) if witness_quorum is None else witness_quorum,
    )
    return client.create_benchmark(with_site_releases(body, site_releases))


def with_site_releases(body: BenchmarkCreate, site_releases: bool | None) -> BenchmarkCreate:
    """``body`` pinned for the authority's choice of per-site releases (see
    :func:`create_benchmark`): ``None`` is the default (none when pooling in the TEE, except
    for exact releases)."""
    pin = body.metrics_version
    pooled_only = pin.version.endswith(POOLED_ONLY_SUFFIX)
    in_tee = body.aggregator_image_digest is not None
    if site_releases is False and not in_tee:
        raise ConfigError(
            "--no-site-releases needs a benchmark that pools in the TEE: without an aggregator "
            "its sites' releases are its only figures",
            hint="add --pool-in-tee (or --aggregator-digest), or drop --no-site-releases")
    if site_releases is True and pooled_only:
        raise ConfigError(
            f"the definition pins {pin}, which publishes no per-site release",
            hint=f"pin {str(pin).removesuffix(POOLED_ONLY_SUFFIX)} in the definition, or drop "
            "--site-releases")
    if site_releases is None and pin.version.endswith(EXACT_SUFFIX):
        return body  # exact releases cost no budget: kept per site unless asked otherwise
    if not in_tee or site_releases is True or pooled_only:
        return body
    try:
        pinned = BenchmarkPin(pin.name, pin.version + POOLED_ONLY_SUFFIX)
    except ValueError:
        raise ConfigError(
            f"{pin} has no pooled-only pin ({pin.version}{POOLED_ONLY_SUFFIX} is longer than a "
            "pin's version may be)", hint="pass --site-releases") from None
    return body.model_copy(update={"metrics_version": pinned})


def approve_benchmark(client: RegistryClient, benchmark_id: int) -> BenchmarkPublic:
    """Approve a pending benchmark (registry admins only)."""
    return client.approve_benchmark(benchmark_id)


@dataclass(frozen=True)
class Decision:
    """``row``: the link as decided; ``already``: it was so before (nothing changed)."""

    row: AssociationPublic
    already: bool


def decide_association(
    client: RegistryClient, kind: AssetKind, benchmark: int, asset: int, *, approve: bool,
    consent_exact: bool = False, consent: ConsentCheck | None = None,
) -> Decision:
    """Approve (or reject) the link of asset ``asset`` to ``benchmark`` (only the side that did
    not initiate it may). A link already so decided (with the exact-release consent asked for)
    changes nothing. Before an approval ``consent`` runs (its dataset id set when the approver
    is the dataset's owner: it consents to what each run publishes)."""
    links = [a for a in client.list_associations(kind, benchmark) if a.asset_id == asset]
    latest = max(links, key=lambda a: a.revision, default=None)
    wanted = "approved" if approve else "rejected"
    if latest is not None and latest.status == wanted and (
            not consent_exact or latest.exact_release_consent):
        return Decision(latest, already=True)
    consents = False
    if approve:
        bench = client.get_benchmark(benchmark)
        owner_consents = kind == "dataset" and bench.owner_id != client.me().id
        if consent is not None:
            consent(client, bench, asset if owner_consents else None)
        consents = owner_consents and consent_exact
    row = client.decide_association(kind, benchmark, asset, approve=approve,
                                    exact_release_consent=consents)
    return Decision(row, already=False)
