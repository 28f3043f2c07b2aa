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
4. reads ``pooled.json`` and ``pooled.token`` and submits them with the inputs to the registry,
   which verifies the token, refuses a release that omits, adds or changes an input, and debits
   every included dataset once.

Nothing here sees a site's exact figure: the aggregator reads the sealed statistics inside the
TEE and writes only the pooled, differentially private release.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from sealbench.client.errors import ClientError, ConfigError
from sealbench.contract.pool import (
    POOL_INPUTS_OBJECT,
    POOLED_RELEASE_OBJECT,
    POOLED_TOKEN_OBJECT,
    PUBLIC_RECIPIENT_DIGEST,
    AggregateSpec,
    PooledRelease,
    PoolInputs,
)
from sealbench.contract.result import MAX_DOCUMENT_BYTES, MAX_TOKEN_BYTES
from sealbench.contract.spec import ServiceEndpoints
from sealbench.crypto.files import write_private
from sealbench.platforms.launcher import OutputFn, RunningWorkload

__all__ = [
    "AggregatorLauncher",
    "PoolError",
    "PoolOutcome",
    "PoolRegistry",
    "PoolSkipped",
    "pool_benchmark",
    "pool_on_mock",
]

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

    def submit_pooled_release(self, benchmark_id: int, *, release: bytes, token: str,
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


def _file_uri(path: Path) -> str:
    return "file://" + str(path.resolve())


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    try:
        with path.open("rb") as src:
            data = src.read(limit + 1)
    except FileNotFoundError:
        raise PoolError(f"the aggregator left no {what} ({path.name})") from None
    if len(data) > limit:
        raise PoolError(f"the aggregator's {what} is larger than {limit} bytes")
    return data


def aggregate_spec(inputs: PoolInputs, folder: Path,
                   endpoints: ServiceEndpoints | None) -> AggregateSpec:
    """The spec of one aggregator run over ``inputs``, its objects in ``folder`` (``file://``:
    the local backends)."""
    return AggregateSpec(
        run_id=inputs.pool_id,
        benchmark_id=inputs.benchmark_id,
        metrics_version=inputs.metrics_version,
        model_digest=inputs.model_digest,
        recipient_digest=PUBLIC_RECIPIENT_DIGEST,
        inputs_uri=_file_uri(folder / POOL_INPUTS_OBJECT),
        inputs_digest=inputs.digest(),
        result_uri=_file_uri(folder),
        **({} if endpoints is None else {
            "sts_url": endpoints.sts_url,
            "kms_endpoint": endpoints.kms_endpoint,
            "storage_endpoint": endpoints.storage_endpoint,
        }),
    )


def pool_benchmark(
    registry: PoolRegistry,
    benchmark_id: int,
    aggregator_digest: str | None,
    model_ids: Sequence[int],
    launcher: AggregatorLauncher,
    *,
    workdir: Path,
    endpoints: ServiceEndpoints | None,
    on_output: OutputFn | None = None,
    on_model: Callable[[int, int, int], None] | None = None,
    timeout: float = AGGREGATOR_TIMEOUT_S,
) -> list[PoolOutcome | PoolSkipped]:
    """Pool every model in ``model_ids`` that has accepted results not yet pooled (module
    docstring). ``aggregator_digest`` is the benchmark's approved aggregator image;
    ``on_model(model_id, index, total)`` is called as each model starts. Raises
    :class:`ConfigError` when the benchmark does not pool in the TEE or the launcher's
    aggregator is not the benchmark's, :class:`PoolError` when a pool fails (the models
    pooled before it stay pooled)."""
    if aggregator_digest is None:
        raise ConfigError(
            f"benchmark {benchmark_id} does not pool in the TEE (it names no aggregator image)",
            hint="the authority sets one with 'sealbench benchmark create --aggregator-digest'")
    if launcher.aggregator_image_digest != aggregator_digest:
        raise ConfigError(
            f"this backend's aggregator image is {launcher.aggregator_image_digest}, not "
            f"benchmark {benchmark_id}'s {aggregator_digest}: no site would release its key",
            hint="run the aggregator image the benchmark names")
    outcomes: list[PoolOutcome | PoolSkipped] = []
    for index, model_id in enumerate(model_ids):
        if on_model is not None:
            on_model(model_id, index, len(model_ids))
        outcomes.append(_pool_model(registry, benchmark_id, model_id, launcher, workdir,
                                    endpoints, on_output, timeout))
    return outcomes


def _pool_model(registry: PoolRegistry, benchmark_id: int, model_id: int,
                launcher: AggregatorLauncher, workdir: Path, endpoints: ServiceEndpoints | None,
                on_output: OutputFn | None, timeout: float) -> PoolOutcome | PoolSkipped:
    candidates = registry.pool_candidates(benchmark_id, model_id)
    left_out = tuple(candidates.left_out)
    if candidates.inputs is None:
        return PoolSkipped(model_id, "no accepted result left to pool", left_out)
    inputs: PoolInputs = candidates.inputs
    folder = workdir / inputs.pool_id
    folder.mkdir(parents=True, exist_ok=False, mode=0o700)
    write_private(folder / POOL_INPUTS_OBJECT, inputs.to_bytes())
    spec = aggregate_spec(inputs, folder, endpoints)
    workload = launcher.start_aggregator(spec, on_output=on_output)
    try:
        workload.wait(timeout)
    except BaseException:
        workload.kill()  # an interrupt or a timeout leaves no aggregator behind
        raise
    release = _read_bounded(folder / POOLED_RELEASE_OBJECT, MAX_DOCUMENT_BYTES, "release")
    token = _read_bounded(folder / POOLED_TOKEN_OBJECT, MAX_TOKEN_BYTES, "release token")
    document = PooledRelease.from_bytes(release)
    accepted = registry.submit_pooled_release(
        benchmark_id, release=release, token=token.decode("ascii"), inputs=inputs)
    return PoolOutcome(model_id, inputs.pool_id, int(accepted.id), len(document.inputs),
                       document.n_cases, dict(document.aggregates), left_out)


def pool_on_mock(
    profile: Any,
    client: Any,
    benchmark_id: int,
    *,
    model_ids: Sequence[int] | None = None,
    workdir: Path | None = None,
    mock_tee: Path | None = None,
    on_output: OutputFn | None = None,
    on_model: Callable[[int, int, int], None] | None = None,
) -> list[PoolOutcome | PoolSkipped]:
    """:func:`pool_benchmark` on the profile's mock TEE (the one backend that runs the
    aggregator image so far), over ``model_ids`` (default: every approved model), each pool's
    objects under ``workdir`` (default: ``<data dir>/pools``). ``profile`` is a resolved
    profile, ``client`` its registry client; what ``sealbench benchmark pool`` and the demo
    call."""
    from sealbench.client.registry.profiles import data_dir
    from sealbench.client.runs.launch import mock_endpoints
    from sealbench.client.runs.launchers.selection import mock_process_launcher

    benchmark = client.get_benchmark(benchmark_id)
    models = list(model_ids or sorted({a.asset_id for a in client.list_associations(
        "model", benchmark_id, "approved")}))
    endpoints = mock_endpoints(profile, mock_tee)
    launcher: Any = mock_process_launcher(endpoints.control)  # runs the aggregator too
    return pool_benchmark(
        client, benchmark_id, benchmark.aggregator_image_digest, models, launcher,
        workdir=workdir or data_dir() / "pools", endpoints=endpoints.service_endpoints(),
        on_output=on_output, on_model=on_model)
