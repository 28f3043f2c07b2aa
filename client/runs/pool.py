"""The authority's side of pooling inside the TEE (issues 27 and 40): ``sealbench benchmark pool``.

For each model of the benchmark, :func:`pool_benchmark`:

1. asks the registry to **authorize** a pool of the model (it chooses the inputs: every
   current, approved site's latest accepted result; debits every ledger on its transparency
   log; signs the inputs); when the model's previous authorization covers exactly those
   results and never produced a release (an aggregator that failed or was interrupted), the
   registry answers that one again and it runs again: the same authorization yields the very
   same release and costs nothing more;
2. fetches the authorization with its evidence (a checkpoint, cosigned by the benchmark's
   witnesses when it names any, and the inclusion proofs of its events), writes it as
   ``pool-authorization.json`` in a folder of its own, and builds the
   :class:`~sealbench.contract.pool.AggregateSpec` naming it by location and inputs digest,
   and the aggregator uid's fields (benchmark, pin, model digest, the pool anchor);
3. launches the benchmark's **aggregator image** on the TEE backend (the launcher's aggregator
   digest must be the benchmark's: no site's key is released to any other), streaming its
   progress; the aggregator verifies the authorization before it reads any site's statistics;
4. reads ``pooled.sealed`` and ``pooled.token`` and submits them to the registry, which
   verifies the token, refuses a release of anything it did not authorize, and only then opens
   and publishes it; what is shown here is the registry's answer.

Nothing here sees a site's exact figure, nor even the pooled one before the registry accepts
it: the aggregator seals its release to the registry's pool-release key. A pool run again gives
the same release (its noise is derived from the sites' keys and the authorization), and a new
one needs a new authorization, debited on the log before anything is drawn.
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from sealbench.client.errors import ClientError, ConfigError, ConflictError
from sealbench.contract.pool import (
    POOL_INPUTS_OBJECT,
    POOLED_RELEASE_OBJECT,
    POOLED_TOKEN_OBJECT,
    AggregateSpec,
    PoolAnchor,
)
from sealbench.contract.pool_authorization import PoolAuthorization
from sealbench.contract.result import MAX_DOCUMENT_BYTES, MAX_TOKEN_BYTES
from sealbench.contract.spec import ServiceEndpoints
from sealbench.platforms.errors import ObjectNotFound, StorageError
from sealbench.platforms.launcher import OutputFn, RunningWorkload
from sealbench.platforms.storage import BlobStore, join_name, open_storage_uri

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "AggregatorLauncher",
    "PoolError",
    "PoolFolder",
    "PoolOutcome",
    "PoolRegistry",
    "PoolSkipped",
    "PoolTarget",
    "aggregate_spec",
    "pool_benchmark",
    "pool_on_tee",
    "require_aggregator",
]

#: The most bytes of a sealed release read back: the release's own cap plus the envelope's.
MAX_SEALED_RELEASE_BYTES: Final = MAX_DOCUMENT_BYTES + 4096
#: Seconds one aggregator run may take (41 models x 32 sites pool in about 16 s in all:
#: tests/perf/tee_pooling_bench.py; the rest is attestation and 32 key releases).
AGGREGATOR_TIMEOUT_S: Final = 1800


class PoolError(ClientError):
    """A pool could not be made or was refused (the registry's or the aggregator's reason)."""


class AggregatorLauncher(Protocol):
    """A TEE backend that can run the benchmark's aggregator image."""

    @property
    def aggregator_image_digest(self) -> str: ...

    def start_aggregator(self, spec: AggregateSpec, *,
                         on_output: OutputFn | None = None) -> RunningWorkload: ...


class PoolRegistry(Protocol):
    """What pooling asks of the registry
    (:class:`~sealbench.client.registry.api.RegistryClient`)."""

    def authorize_pool(self, benchmark_id: int, model_id: int) -> Any: ...

    def pool_authorization(self, benchmark_id: int, pool_id: str) -> PoolAuthorization: ...

    def submit_pooled_release(self, benchmark_id: int, *, sealed: bytes, token: str,
                              inputs: Any) -> Any: ...


@dataclass(frozen=True)
class PoolOutcome:
    """One model's pooled release as the registry accepted it."""

    model_id: int
    pool_id: str
    release_id: int
    n_sites: int
    n_cases: int
    aggregates: dict[str, object]
    left_out: tuple[str, ...] = ()
    #: The authorization's debits (ledger, its datasets, log sequence number), or None when an
    #: earlier authorization was run again (it was debited when first authorized).
    debits: tuple[str, ...] | None = ()


@dataclass(frozen=True)
class PoolSkipped:
    """A model with nothing to pool (nothing new since its last release, or too few sites)."""

    model_id: int
    reason: str
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolFolder:
    """Where the pools' objects go: under ``uri`` (``file://``: a folder of this machine, for
    the backends that run here; ``gs://bucket/prefix``: cloud storage, for a VM in the cloud,
    which cannot write this machine's folders), each pool in its own ``<uri>/<pool id>/``.
    ``open`` gives the ``(store, prefix)`` of a location (the authority's own storage access);
    ``provider`` is the authority's pool provider, through which the aggregator reads the
    inputs document and writes its release on cloud storage (None for ``file://``)."""

    uri: str
    open: Callable[[str], tuple[BlobStore, str]] = open_storage_uri
    provider: str | None = None

    def __post_init__(self) -> None:
        if not self.uri.startswith(("file://", "gs://")):
            raise ConfigError(f"pool folder {self.uri!r} is neither file:// nor gs://",
                              hint="name a local folder or gs://bucket/prefix")
        if self.uri.startswith("gs://") and self.provider is None:
            raise ConfigError(
                f"the aggregator cannot write {self.uri} without the authority's pool provider",
                hint="pass --pool-provider projects/N/locations/global/"
                "workloadIdentityPools/POOL/providers/PROVIDER (docs/aggregator.md)")

    def create(self, pool_id: str) -> tuple[str, BlobStore, str]:
        """``(uri, store, prefix)`` of a new pool's own location; a local one is made 0700 and
        must not exist yet (a pool id is never reused)."""
        uri = f"{self.uri.rstrip('/')}/{pool_id}"
        if uri.startswith("file://"):
            path = Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                raise PoolError(f"{path} exists already; pool ids are never reused") from None
        store, prefix = self.open(uri)
        if store.exists(join_name(prefix, POOL_INPUTS_OBJECT)):
            raise PoolError(f"{uri} already holds a pool's inputs; pool ids are never reused")
        return uri, store, prefix


def _read_bounded(store: BlobStore, prefix: str, name: str, limit: int, what: str) -> bytes:
    try:
        return store.get_bytes(join_name(prefix, name), limit)
    except ObjectNotFound:
        raise PoolError(f"the aggregator left no {what} ({name})") from None
    except StorageError as exc:
        raise PoolError(f"cannot read the aggregator's {what} ({name}): {exc}") from exc


def aggregate_spec(authorization: PoolAuthorization, anchor: PoolAnchor, run_id: str, uri: str,
                   endpoints: ServiceEndpoints | None, provider: str | None = None
                   ) -> AggregateSpec:
    """The spec of one aggregator run over ``authorization``, its release sealed to the
    ``anchor``'s recipient key (the uid names the anchor's digest), its objects under ``uri``
    (the run's own location) written through ``provider`` (cloud storage only)."""
    inputs = authorization.inputs
    return AggregateSpec.for_anchor(
        anchor,
        run_id=run_id,
        benchmark_id=inputs.benchmark_id,
        metrics_version=str(inputs.metrics_version),
        model_digest=inputs.model_digest,
        inputs_uri=f"{uri}/{POOL_INPUTS_OBJECT}",
        inputs_digest=inputs.digest(),
        result_uri=uri,
        result_pool_provider=provider,
        **({} if endpoints is None else {
            "sts_url": endpoints.sts_url,
            "kms_endpoint": endpoints.kms_endpoint,
            "storage_endpoint": endpoints.storage_endpoint,
        }),
    )


@dataclass(frozen=True)
class PoolTarget:
    """What a benchmark that pools in the TEE fixes: its aggregator image and its pool anchor
    (the registry's pool-release key, log key and witnesses), whose digest the sites' grants
    name."""

    aggregator_digest: str
    anchor: PoolAnchor


def require_aggregator(benchmark: Any) -> PoolTarget:
    """``benchmark``'s :class:`PoolTarget`, or :class:`ConfigError` when it names no
    aggregator image (it does not pool in the TEE)."""
    digest: str | None = benchmark.aggregator_image_digest
    anchor = PoolAnchor.of(benchmark)
    if digest is None or anchor is None:
        raise ConfigError(
            f"benchmark {benchmark.id} does not pool in the TEE (it names no aggregator image "
            "and pool anchor)",
            hint="the authority sets one with 'sealbench benchmark create --pool-in-tee'")
    return PoolTarget(digest, anchor)


def pool_benchmark(
    registry: PoolRegistry,
    benchmark_id: int,
    target: PoolTarget,
    model_ids: Sequence[int],
    launcher: AggregatorLauncher,
    *,
    folder: PoolFolder,
    endpoints: ServiceEndpoints | None,
    on_output: OutputFn | None = None,
    on_model: Callable[[int, int, int], None] | None = None,
    timeout: float = AGGREGATOR_TIMEOUT_S,
) -> list[PoolOutcome | PoolSkipped]:
    """Pool every model in ``model_ids`` that has accepted results not yet pooled (module
    docstring), each pool's objects under ``folder``. ``target`` is the benchmark's approved
    aggregator image and pool recipient (:func:`require_aggregator`); ``on_model(model_id, index,
    total)`` is called as each model starts. Raises :class:`ConfigError` when the launcher's
    aggregator is not the benchmark's, :class:`PoolError` when a pool fails (the models pooled
    before it stay pooled)."""
    if launcher.aggregator_image_digest != target.aggregator_digest:
        raise ConfigError(
            f"this backend's aggregator image is {launcher.aggregator_image_digest}, not "
            f"benchmark {benchmark_id}'s {target.aggregator_digest}: no site would release its "
            "key",
            hint="run the aggregator image the benchmark names")
    outcomes: list[PoolOutcome | PoolSkipped] = []
    for index, model_id in enumerate(model_ids):
        if on_model is not None:
            on_model(model_id, index, len(model_ids))
        outcomes.append(_pool_model(registry, benchmark_id, model_id, launcher, target, folder,
                                    endpoints, on_output, timeout))
    return outcomes


def _authorization(registry: PoolRegistry, benchmark_id: int, model_id: int
                   ) -> tuple[str, tuple[str, ...], tuple[str, ...] | None] | PoolSkipped:
    """The pool id to run, the results left out and the debits (None when the registry
    answered the model's previous authorization again: it covers exactly these results and
    never produced a release, so it runs again at no cost), or why nothing is pooled."""
    try:
        authorized = registry.authorize_pool(benchmark_id, model_id)
    except ConflictError as exc:  # nothing new, or too few sites: the registry says which
        return PoolSkipped(model_id, str(exc))
    left_out = tuple(f"result {lo.result_id} (dataset {lo.dataset_id}, run "
                     f"{lo.run_id or '?'}): {lo.reason}" for lo in authorized.left_out)
    if authorized.reused:
        return authorized.pool_id, left_out, None
    debits = tuple(f"{d.ledger} (dataset{'s' if len(d.datasets) > 1 else ''} "
                   f"{', '.join(str(x) for x in d.datasets)}): log event {d.seq}"
                   for d in authorized.debits)
    return authorized.pool_id, left_out, debits


def _pool_model(registry: PoolRegistry, benchmark_id: int, model_id: int,
                launcher: AggregatorLauncher, target: PoolTarget, folder: PoolFolder,
                endpoints: ServiceEndpoints | None, on_output: OutputFn | None,
                timeout: float) -> PoolOutcome | PoolSkipped:
    chosen = _authorization(registry, benchmark_id, model_id)
    if isinstance(chosen, PoolSkipped):
        return chosen
    pool_id, left_out, debits = chosen
    authorization = registry.pool_authorization(benchmark_id, pool_id)
    run_id = pool_id if debits is not None else f"{pool_id[:50]}-r{secrets.token_hex(3)}"
    uri, store, prefix = folder.create(run_id)
    store.put_bytes(join_name(prefix, POOL_INPUTS_OBJECT), authorization.to_bytes())
    spec = aggregate_spec(authorization, target.anchor, run_id, uri, endpoints, folder.provider)
    workload = launcher.start_aggregator(spec, on_output=on_output)
    try:
        workload.wait(timeout)
    except BaseException:
        workload.kill()  # an interrupt or a timeout leaves no aggregator behind
        raise
    sealed = _read_bounded(store, prefix, POOLED_RELEASE_OBJECT, MAX_SEALED_RELEASE_BYTES,
                           "sealed release")
    token = _read_bounded(store, prefix, POOLED_TOKEN_OBJECT, MAX_TOKEN_BYTES, "release token")
    accepted = registry.submit_pooled_release(
        benchmark_id, sealed=sealed, token=token.decode("ascii"), inputs=authorization.inputs)
    return PoolOutcome(model_id, pool_id, int(accepted.id), int(accepted.n_sites),
                       int(accepted.n_cases), dict(accepted.aggregates), left_out, debits)


def pool_on_tee(
    profile: Any,
    client: Any,
    benchmark_id: int,
    *,
    tee: str = "mock",
    model_ids: Sequence[int] | None = None,
    pool_uri: str | None = None,
    pool_provider: str | None = None,
    mock_tee: Path | None = None,
    image: str | None = None,
    cs: BaseModel | None = None,
    on_output: OutputFn | None = None,
    on_model: Callable[[int, int, int], None] | None = None,
) -> list[PoolOutcome | PoolSkipped]:
    """:func:`pool_benchmark` on the ``tee`` backend (``mock``, ``docker`` or
    ``confidential-space``: :func:`~sealbench.client.runs.launchers.for_profile.
    make_aggregator_launcher`), over ``model_ids`` (default: every approved model). Each pool's
    objects go under ``pool_uri`` (default: ``<data dir>/pools``, a folder of this machine;
    a Confidential Space VM outside the mock needs ``gs://bucket/prefix`` and the authority's
    ``pool_provider``, read and written with the profile's cloud account). ``profile`` is a
    resolved profile, ``client`` its registry client, ``image`` the Docker image to run
    (default: the benchmark's aggregator digest), ``cs`` the backend platform's launch options
    (:func:`~sealbench.client.runs.launchers.for_profile.launch_options`: Confidential
    Space's; None: its defaults); what ``sealbench benchmark pool`` and the demo call."""
    from sealbench.client.assets.accounts import profile_account
    from sealbench.client.backends import LOCAL_MOCK_BACKENDS
    from sealbench.client.registry.profiles import data_dir
    from sealbench.client.runs.launch import local_routes
    from sealbench.client.runs.launchers.for_profile import (
        make_aggregator_launcher,
        owner_store_opener,
    )

    benchmark = client.get_benchmark(benchmark_id)
    target = require_aggregator(benchmark)
    # as for runs: only a VM outside the mock (Google's) cannot write this machine's folders
    account = profile_account(profile, mock_tee)
    production = tee not in LOCAL_MOCK_BACKENDS and not (
        account is not None and account.routes().results_here)
    endpoints = None if production else local_routes(profile, mock_tee)
    uri = pool_uri or (data_dir() / "pools").resolve().as_uri()
    if production and not uri.startswith("gs://"):
        raise ConfigError(
            f"a pool on --tee {tee} writes to cloud storage: a Confidential Space VM cannot "
            "write this machine's folders",
            hint="pass --pool-uri gs://bucket/prefix and --pool-provider (docs/aggregator.md)")
    folder = PoolFolder(uri, owner_store_opener(profile, client, mock_tee), pool_provider)
    models = list(model_ids or sorted({a.asset_id for a in client.list_associations(
        "model", benchmark_id, "approved")}))
    launcher = make_aggregator_launcher(
        tee, profile=profile, client=client, benchmark=benchmark, endpoints=endpoints,
        mock_tee=mock_tee, image=image, cs=cs)
    return pool_benchmark(
        client, benchmark_id, target, models, launcher, folder=folder,
        endpoints=None if endpoints is None else endpoints.token_destinations,
        on_output=on_output, on_model=on_model)
