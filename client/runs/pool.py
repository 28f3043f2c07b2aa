"""The authority's side of pooling inside the TEE (issue 27): ``sealbench benchmark pool``.

For each model of the benchmark with accepted results not yet pooled, :func:`pool_benchmark`:

1. asks the registry for the model's pool inputs (:class:`~sealbench.contract.pool.PoolInputs`:
   each accepted, unpooled result with a sealed-statistics commitment, its dataset's
   coordinates, its statistics location; results whose dataset's budget cannot pay the release
   are left out by the registry and reported);
2. writes them as ``pool-inputs.json`` in the pool's own folder and builds the
   :class:`~sealbench.contract.pool.AggregateSpec` naming them by location and digest, and the
   aggregator uid's fields (benchmark, pin, model digest, the public-release marker);
3. launches the benchmark's **aggregator image** on the TEE backend (the launcher's aggregator
   digest must be the benchmark's: no site's key is released to any other), streaming its
   progress;
4. reads ``pooled.sealed`` and ``pooled.token`` and submits them with the inputs to the
   registry, which verifies the token, refuses a release that omits, adds or changes an input,
   and only then opens the release, debits every included dataset once and publishes it; what
   is shown here is the registry's answer.

Nothing here sees a site's exact figure, nor even the pooled one before the registry accepts
it: the aggregator reads the sealed statistics inside the TEE and seals its differentially
private release to the registry's pool-release key (the benchmark's ``pool_recipient_key``,
whose digest the sites' grants bind). A pool run again, or over a chosen subset, gives the
authority nothing to read, and every release the registry opens it debits.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from sealbench.client.errors import ClientError, ConfigError
from sealbench.contract.pool import (
    POOL_INPUTS_OBJECT,
    POOLED_RELEASE_OBJECT,
    POOLED_TOKEN_OBJECT,
    AggregateSpec,
    PoolInputs,
    pool_recipient_digest,
)
from sealbench.contract.result import MAX_DOCUMENT_BYTES, MAX_TOKEN_BYTES
from sealbench.contract.spec import ServiceEndpoints
from sealbench.platforms.errors import ObjectNotFound, StorageError
from sealbench.platforms.launcher import OutputFn, RunningWorkload
from sealbench.platforms.storage import BlobStore, join_name, open_storage_uri

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

    def pool_candidates(self, benchmark_id: int, model_id: int) -> Any: ...

    def submit_pooled_release(self, benchmark_id: int, *, sealed: bytes, token: str,
                              inputs: PoolInputs) -> Any: ...


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


@dataclass(frozen=True)
class PoolSkipped:
    """A model with nothing to pool (every result pooled already, or none pools)."""

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


def aggregate_spec(inputs: PoolInputs, recipient_key: str, uri: str,
                   endpoints: ServiceEndpoints | None, provider: str | None = None
                   ) -> AggregateSpec:
    """The spec of one aggregator run over ``inputs``, its release sealed to ``recipient_key``
    (the benchmark's pool recipient, base64 X25519), its objects under ``uri`` (the pool's own
    location) written through ``provider`` (cloud storage only)."""
    return AggregateSpec(
        run_id=inputs.pool_id,
        benchmark_id=inputs.benchmark_id,
        metrics_version=inputs.metrics_version,
        model_digest=inputs.model_digest,
        recipient_public_key=recipient_key,
        recipient_digest=pool_recipient_digest(recipient_key),
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
    """What a benchmark that pools in the TEE fixes: its aggregator image and the registry's
    pool-release key (base64 X25519) the aggregator seals its releases to."""

    aggregator_digest: str
    recipient_key: str


def require_aggregator(benchmark: Any) -> PoolTarget:
    """``benchmark``'s :class:`PoolTarget`, or :class:`ConfigError` when it names no
    aggregator image (it does not pool in the TEE)."""
    digest: str | None = benchmark.aggregator_image_digest
    key: str | None = benchmark.pool_recipient_key
    if digest is None or key is None:
        raise ConfigError(
            f"benchmark {benchmark.id} does not pool in the TEE (it names no aggregator image)",
            hint="the authority sets one with 'sealbench benchmark create --aggregator-digest'")
    return PoolTarget(digest, key)


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


def _pool_model(registry: PoolRegistry, benchmark_id: int, model_id: int,
                launcher: AggregatorLauncher, target: PoolTarget, folder: PoolFolder,
                endpoints: ServiceEndpoints | None, on_output: OutputFn | None,
                timeout: float) -> PoolOutcome | PoolSkipped:
    candidates = registry.pool_candidates(benchmark_id, model_id)
    left_out = tuple(candidates.left_out)
    if candidates.inputs is None:
        return PoolSkipped(model_id, "no accepted result left to pool", left_out)
    inputs: PoolInputs = candidates.inputs
    uri, store, prefix = folder.create(inputs.pool_id)
    store.put_bytes(join_name(prefix, POOL_INPUTS_OBJECT), inputs.to_bytes())
    spec = aggregate_spec(inputs, target.recipient_key, uri, endpoints, folder.provider)
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
        benchmark_id, sealed=sealed, token=token.decode("ascii"), inputs=inputs)
    return PoolOutcome(model_id, inputs.pool_id, int(accepted.id), int(accepted.n_sites),
                       int(accepted.n_cases), dict(accepted.aggregates), left_out)


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
    cs: Any = None,
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
    (default: the benchmark's aggregator digest), ``cs`` the Confidential Space options
    (:class:`~sealbench.client.runs.launchers.for_profile.CsOptions`); what ``sealbench
    benchmark pool`` and the demo call."""
    from sealbench.client.registry.profiles import data_dir
    from sealbench.client.runs.launch import mock_endpoints
    from sealbench.client.runs.launchers.for_profile import (
        CsOptions,
        make_aggregator_launcher,
        owner_store_opener,
    )
    from sealbench.client.runs.launchers.selection import LOCAL_MOCK_BACKENDS

    benchmark = client.get_benchmark(benchmark_id)
    target = require_aggregator(benchmark)
    # as for runs: only a VM outside the mock (Google's) cannot write this machine's folders
    production = tee not in LOCAL_MOCK_BACKENDS and not (mock_tee or profile.profile.mock_tee)
    endpoints = None if production else mock_endpoints(profile, mock_tee)
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
        mock_tee=mock_tee, image=image, cs=cs or CsOptions())
    return pool_benchmark(
        client, benchmark_id, target, models, launcher, folder=folder,
        endpoints=None if endpoints is None else endpoints.service_endpoints(),
        on_output=on_output, on_model=on_model)
