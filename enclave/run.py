"""One confidential evaluation from start to end: :func:`run_enclave` chains the steps and is the
enclave's one error boundary. On failure it writes a :class:`~sealbench.contract.result.
FailureRecord` to the result destination (when one can be reached) and raises the
:class:`~sealbench.contract.errors.EnclaveError`, whose message is safe to print.

A run that fails after it attested also attests its failure record: it asks the platform's
attester for a token of audience ``sealbench-failure`` whose ``eat_nonce`` is
:func:`~sealbench.crypto.attestation.failure_nonce` of the record's exact bytes, and writes it
as ``failure.token`` before ``failure.json``. The registry verifies it as it verifies a result
token, so a model owner can tell the enclave's own account of a failure from a hospital's
claim. A failure before attestation (no spec, no token) stays unsigned; so does one whose
token the attester refuses (logged)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sealbench.benchmarks.interface import (
    ExecutionProvider,
    execution_provider_of,
    run_limits_of,
)
from sealbench.contract.errors import AttestationUnavailable, CpuFallbackRefused, EnclaveError
from sealbench.contract.result import FAILURE_OBJECT, FAILURE_TOKEN_OBJECT, FailureRecord
from sealbench.crypto.attestation import FAILURE_AUDIENCE, failure_nonce
from sealbench.enclave.bounds import MemoryLimit, ProcessMemoryLimit
from sealbench.enclave.evaluation import evaluate, open_dataset
from sealbench.enclave.grant_wait import GrantWait
from sealbench.enclave.network import EgressGuard
from sealbench.enclave.platforms import EvidenceSource
from sealbench.enclave.progress import model_loaded, run_done, step_started
from sealbench.enclave.publish import PublishedResult, publish, seal_results
from sealbench.enclave.steps import (
    AttestedRun,
    RunnerFactory,
    attest,
    claims_of,
    load_model,
    open_destination,
    release_keys,
    result_store,
)
from sealbench.enclave.timing import StepTimer
from sealbench.platforms import BlobStore, CloudError, join_name
from sealbench.platforms.access import AssetAccess
from sealbench.platforms.attester import Attester
from sealbench.platforms.errors import AttesterError

__all__ = ["AccessFactory", "RunProgress", "RunReport", "record_failure", "run_enclave",
           "timings_line"]

_log = logging.getLogger("sealbench.enclave")

#: Builds the asset access of an attested run (whose token destinations were checked).
AccessFactory = Callable[[AttestedRun], AssetAccess]


@dataclass(frozen=True)
class RunReport:
    """A successful run: what was published, the seconds spent per step and the ONNX Runtime
    execution provider the model ran on (``None`` when the plug-in's runner does not say)."""

    published: PublishedResult
    timings: dict[str, float]
    execution_provider: ExecutionProvider | None = None


def timings_line(timings: Mapping[str, float], provider: ExecutionProvider | None) -> str:
    """The run's last log line, for people (the client reads the ``done`` event written next to
    it, :mod:`sealbench.contract.events`)::

        done: step timings in seconds {"attest": 0.1, ...}; execution provider CPUExecutionProvider

    The provider part is absent when the runner reports none; the provider is always one of
    :class:`ExecutionProvider`, never a plug-in's free text."""
    line = f"done: step timings in seconds {json.dumps(dict(timings), sort_keys=True)}"
    return line if provider is None else f"{line}; execution provider {provider.value}"


class RunProgress:
    """Which step a workload is in, and what it has reached, for the failure record (the
    evaluation's and the aggregator's)."""

    def __init__(self) -> None:
        self.step = "read the run specification"
        self.run_id: str | None = None
        self.destination: tuple[BlobStore, str] | None = None
        #: The platform's attester, once the run attested: it signs the failure record.
        self.attester: Attester | None = None


def _failure_token(attester: Attester, record: bytes) -> str | None:
    """A token of audience ``sealbench-failure`` binding ``record`` (its nonce checked in the
    token's claims), or None when the attester gives none (the record then goes unsigned)."""
    nonce = failure_nonce(record)
    try:
        token = attester.token(audience=FAILURE_AUDIENCE, nonces=[nonce])
        claims = claims_of(token)
    except (AttesterError, AttestationUnavailable) as exc:
        _log.warning("the failure record goes unsigned: no failure token (%s)",
                     type(exc).__name__)
        return None
    if nonce not in claims.eat_nonce or claims.aud != FAILURE_AUDIENCE:
        _log.warning("the failure record goes unsigned: the token does not carry the requested "
                     "audience and nonce")
        return None
    return token


def record_failure(progress: RunProgress, error: EnclaveError) -> None:
    """Write ``error``'s failure record where ``progress`` reached a destination, signed by a
    failure token when the workload attested (module docstring); a write that fails is logged."""
    if progress.destination is None:
        return
    store, prefix = progress.destination
    record = FailureRecord(
        run_id=progress.run_id,
        step=progress.step,
        error=type(error).__name__,
        reason=str(error)[:2000],
        exit_code=error.exit_code,
    ).to_bytes()
    token = None if progress.attester is None else _failure_token(progress.attester, record)
    try:
        if token is not None:  # first, so that the record's presence means its token is there
            store.put_bytes(join_name(prefix, FAILURE_TOKEN_OBJECT), token.encode("ascii"))
        store.put_bytes(join_name(prefix, FAILURE_OBJECT), record)
    except CloudError as exc:
        _log.warning("the failure record could not be written (%s)", type(exc).__name__)


def platform_access(run: AttestedRun) -> AssetAccess:
    """The asset access the platform that attested ``run`` hands out
    (:meth:`~sealbench.platforms.platform.Platform.asset_access`), against the run's checked
    token destinations."""
    if run.platform is None:
        raise EnclaveError("the run names no attesting platform to reach its assets through")
    return run.platform.asset_access(run.destinations, run.attester)


def run_enclave(
    environ: Mapping[str, str],
    attester: Attester | EvidenceSource,
    *,
    access: AccessFactory | None = None,
    make_runner: RunnerFactory | None = None,
    timer: StepTimer | None = None,
    memory: MemoryLimit | None = None,
    egress: EgressGuard | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> RunReport:
    """Run every step; raise :class:`EnclaveError` (after recording it) on any failure.
    ``attester`` is where the evidence comes from: the platforms' own sources
    (:class:`~sealbench.enclave.platforms.EvidenceSource`, what the image's entry point passes)
    or a caller's attester (its platform found by the issuer of its first token). The
    benchmark's memory limit holds from loading the model to the end of the evaluation
    (``memory``: the process's, :class:`~sealbench.enclave.bounds.ProcessMemoryLimit`, unless a
    caller bounds it otherwise). With ``egress`` (the process's guard, which the image's entry
    point installs), the process connects only to the run's checked endpoints once the run is
    attested. A permission refusal after a successful token exchange waits for IAM to apply
    the grant (:mod:`~sealbench.enclave.grant_wait`, ``sleep`` between tries) for at most the
    run spec's window."""
    timer = timer or StepTimer()
    progress = RunProgress()
    try:
        return _run(environ, attester, access, make_runner, timer, progress,
                    memory or ProcessMemoryLimit(), egress, sleep)
    except EnclaveError as exc:
        record_failure(progress, exc)
        raise
    except Exception as exc:  # the enclave's one error boundary
        error = EnclaveError(
            f"internal error ({type(exc).__name__}) while trying to {progress.step}"
        )
        record_failure(progress, error)
        raise error from exc


def _available_providers() -> list[str]:
    """ONNX Runtime's available providers (what the image's build offers on this machine)."""
    try:
        import onnxruntime  # type: ignore[import-untyped]
    except ImportError:
        return []
    return [str(p) for p in onnxruntime.get_available_providers()]


def _check_accelerator(run: AttestedRun, provider: ExecutionProvider | None) -> None:
    """A run whose evidence attests a GPU fails when its model runs on ONNX Runtime's CPU
    provider (the image did not find the driver, or the GPU is not usable), unless its spec
    allows the fallback; the provider is reported either way."""
    if not run.gpu_attested or provider is not ExecutionProvider.CPU:
        return
    if run.spec.cpu_fallback_allowed:
        _log.warning("this VM has a GPU, yet the model runs on the CPU (allowed by the run)")
        return
    available = ", ".join(_available_providers()) or "none reported"
    raise CpuFallbackRefused(
        "asked for a GPU, ONNX Runtime is running on the CPU: providers available "
        f"{available} (the image did not find the GPU driver or the GPU is not usable; "
        "run again with --allow-cpu-fallback to accept the CPU)"
    )


def _run(
    environ: Mapping[str, str],
    attester: Attester | EvidenceSource,
    access_factory: AccessFactory | None,
    make_runner: RunnerFactory | None,
    timer: StepTimer,
    progress: RunProgress,
    memory: MemoryLimit,
    egress: EgressGuard | None,
    sleep: Callable[[float], None],
) -> RunReport:
    step_started(
        0, progress.step, "reading the run specification and the first attestation token")
    run = attest(environ, attester, timer)
    if egress is not None:
        egress.pin(run.destinations)
    progress.run_id = run.spec.run_id
    progress.attester = run.attester
    access = (access_factory or platform_access)(run)
    wait = GrantWait(run.spec.iam_wait_seconds, sleep)
    progress.step = "check the recipient key and the result destination"
    step_started(1, progress.step)
    with contextlib.suppress(EnclaveError):
        progress.destination = result_store(run, access)
    destination = open_destination(run, access, wait)
    progress.step = "obtain credentials and unwrap the keys"
    step_started(2, progress.step)
    keys = release_keys(destination, access, wait)
    with memory.applied(run_limits_of(run.benchmark).memory_bytes):
        progress.step = "download, verify and load the model"
        step_started(3, progress.step)
        model = load_model(keys) if make_runner is None else load_model(keys, make_runner)
        provider = execution_provider_of(model.runner)
        if provider is not None:
            model_loaded(provider.value)
        _check_accelerator(run, provider)
        progress.step = "verify the dataset manifest"
        step_started(4, progress.step)
        dataset = open_dataset(model)
        progress.step = "segment and score the cases"
        step_started(5, progress.step)
        evaluation = evaluate(dataset)
    progress.step = "seal the per-case results"
    step_started(6, progress.step)
    sealed = seal_results(evaluation)
    progress.step = "attest and upload the result"
    step_started(7, progress.step)
    published = publish(sealed)
    timings = timer.totals()
    run_done(timings, None if provider is None else provider.value,
             timings_line(timings, provider))
    return RunReport(published, timings, provider)
