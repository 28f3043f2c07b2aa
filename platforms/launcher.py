"""The :class:`Launcher` interface, what a finished run reports, and the errors a failed run
maps to (one per enclave exit code, see :mod:`sealbench.contract.errors`).

Every :class:`LaunchError` names its ``failure_class`` (what the registry's run status reports,
:data:`sealbench.server.schemas.runs.FailureClass`) and whether a new launch may succeed
(``retryable``: a quota or capacity refusal, a transient API error; never a workload that ran
and failed, so never an attestation or integrity failure)::

    LaunchError                 launch      (not retryable unless a subclass says so)
    ├── EnclaveRunFailed        by exit code: key_release_denied, integrity, ... or killed
    ├── LaunchTimeoutError           timeout     a stage took longer than allowed
    └── TransientLaunchError    launch      retryable: the backend may accept a new try
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Protocol

from sealbench.contract.errors import (
    AssetIntegrityError,
    AssetRejected,
    AttestationUnavailable,
    AuthorizationRefused,
    DestinationError,
    EnclaveError,
    KeyReleaseDenied,
    ResultUploadError,
    SpecError,
    StorageFailure,
)
from sealbench.contract.events import RunFailed, parse_event
from sealbench.contract.inputs import Rule
from sealbench.contract.pool import AggregateSpec
from sealbench.contract.spec import RunSpec
from sealbench.platforms.platform import (
    LaunchPlatform,
    Platform,
    installed_launcher_backends,
    load_platform,
    platforms_for_backend,
)

__all__ = [
    "EnclaveRunFailed",
    "FailureWatch",
    "LaunchError",
    "LaunchResult",
    "LaunchSettingsError",
    "LaunchTimeoutError",
    "Launcher",
    "OutputFn",
    "RunningWorkload",
    "TransientLaunchError",
    "check_backend",
    "error_for_exit_code",
    "failure_from_exit",
    "launch_environment",
    "platform_for_backend",
]

#: Called with each line of the workload's progress output (no trailing newline).
OutputFn = Callable[[str], None]

_BY_EXIT_CODE: dict[int, type[EnclaveError]] = {
    cls.exit_code: cls
    for cls in (
        EnclaveError,
        SpecError,
        AttestationUnavailable,
        DestinationError,
        KeyReleaseDenied,
        AssetIntegrityError,
        AssetRejected,
        StorageFailure,
        ResultUploadError,
        AuthorizationRefused,
    )
}


def error_for_exit_code(code: int) -> type[EnclaveError] | None:
    """The enclave error class an exit code stands for (None for codes the enclave never uses,
    such as a signal)."""
    return _BY_EXIT_CODE.get(code)


class LaunchError(Exception):
    """The workload could not be started, or did not finish."""

    #: What failed, as the registry's run status names it.
    failure_class: ClassVar[str] = "launch"
    #: Whether launching again may succeed (the runner retries these, with backoff).
    retryable: ClassVar[bool] = False


class LaunchSettingsError(LaunchError):
    """The launcher's settings are refused before anything starts; ``hint`` says what to do."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class LaunchTimeoutError(LaunchError):
    """A stage of the run (start, or the workload itself) took longer than allowed."""

    failure_class = "timeout"


class TransientLaunchError(LaunchError):
    """The backend refused or failed to start the workload for a reason that may pass."""

    retryable = True


#: The registry's failure class of each enclave error (by exit code).
_ENCLAVE_FAILURE: Final = {
    EnclaveError: "enclave",
    SpecError: "spec",
    AttestationUnavailable: "attestation_unavailable",
    DestinationError: "destination",
    KeyReleaseDenied: "key_release_denied",
    AssetIntegrityError: "integrity",
    AssetRejected: "asset_rejected",
    StorageFailure: "storage",
    ResultUploadError: "result_upload",
}


class EnclaveRunFailed(LaunchError):  # noqa: N818 - reads as the event it reports
    """The workload ran and exited non-zero. ``error_class`` is the enclave error its exit code
    stands for (None when it was killed); ``reason`` is the enclave's public reason (its
    ``failed`` event's) or, without an event, what the launcher knows. ``code`` is the failure
    code the event states (None without one) and ``rule`` the key-release rule a refusal names
    (:class:`~sealbench.contract.events.RunFailed`): what a client keys its advice on."""

    def __init__(
        self, exit_code: int, reason: str, peak_rss_bytes: int | None, *,
        code: str | None = None, rule: Rule | None = None,
    ) -> None:
        self.exit_code = exit_code
        self.reason = reason
        self.code = code
        self.rule = rule
        self.error_class = error_for_exit_code(exit_code)
        self.peak_rss_bytes = peak_rss_bytes
        self.failure_class = (  # type: ignore[misc]  # per instance: by exit code
            "killed" if self.error_class is None else _ENCLAVE_FAILURE[self.error_class]
        )
        kind = self.error_class.__name__ if self.error_class else "killed or crashed"
        super().__init__(f"the enclave failed (exit {exit_code}, {kind}): {reason}")


class FailureWatch:
    """Reads the workload's output lines for its ``failed`` event
    (:func:`~sealbench.contract.events.parse_event`; any other line passes untouched) and hands
    each line on to ``on_output``. :attr:`event` is the last failure event seen."""

    def __init__(self, on_output: OutputFn | None = None) -> None:
        self._on_output = on_output
        self.event: RunFailed | None = None

    def __call__(self, line: str) -> None:
        event = parse_event(line)
        if isinstance(event, RunFailed):
            self.event = event
        if self._on_output is not None:
            self._on_output(line)


def failure_from_exit(
    exit_code: int, event: RunFailed | None, stderr: Sequence[str], peak_rss_bytes: int | None,
    *, max_reason: int,
) -> EnclaveRunFailed:
    """The failure of a workload that exited ``exit_code``: its ``failed`` event's reason, code
    and rule when the event states that exit code; otherwise (it died without one, or the event
    does not match how it ended) the failure by exit code alone, with its last non-empty
    ``stderr`` line as is (or ``exited N without a reason``)."""
    if event is not None and event.exit_code == exit_code:
        return EnclaveRunFailed(exit_code, event.reason[:max_reason], peak_rss_bytes,
                                code=event.code, rule=event.rule)
    lines = [line.strip() for line in stderr if line.strip()]
    reason = lines[-1] if lines else f"exited {exit_code} without a reason"
    return EnclaveRunFailed(exit_code, reason[:max_reason], peak_rss_bytes)


@dataclass(frozen=True)
class LaunchResult:
    """A workload that exited 0."""

    image_digest: str
    wall_seconds: float
    peak_rss_bytes: int | None


class RunningWorkload(Protocol):
    """A started workload."""

    @property
    def pid(self) -> int | None: ...

    def kill(self) -> None:
        """Stop the workload at once (as a crash or a killed VM would)."""
        ...

    def wait(self, timeout: float | None = None) -> LaunchResult:
        """Wait for the end; raise :class:`EnclaveRunFailed` unless it exited 0."""
        ...


class Launcher(Protocol):
    """Starts the evaluation workload with ``spec`` as its attested environment."""

    @property
    def image_digest(self) -> str:
        """The digest of the image this launcher runs (what key owners' policies name)."""
        ...

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> RunningWorkload:
        """Start the workload and return at once."""
        ...

    def launch(
        self, spec: RunSpec, *, on_output: OutputFn | None = None, timeout: float | None = None
    ) -> LaunchResult:
        """Start the workload and wait for it."""
        ...


def platform_for_backend(backend: str, platforms: Iterable[Platform] | None = None) -> Platform:
    """The one installed platform (of ``platforms``, default: the registry's, without
    constructing the others) whose :attr:`~sealbench.platforms.platform.Platform.launcher_backends`
    names ``backend``; a :class:`LaunchError` when none or several do."""
    if platforms is None:
        names = platforms_for_backend(backend)
        if len(names) == 1:
            return load_platform(names[0])
        what = "no installed platform" if not names else f"{len(names)} platforms"
    else:
        owners = [p for p in platforms if backend in p.launcher_backends]
        if len(owners) == 1:
            return owners[0]
        what = "no platform given" if not owners else f"{len(owners)} platforms"
    known = ", ".join(sorted({b for bs in installed_launcher_backends().values() for b in bs}))
    raise LaunchError(
        f"{what} starts workloads with the {backend!r} launcher (installed: {known or 'none'})"
    )


def check_backend(platform: LaunchPlatform, backend: str) -> LaunchPlatform:
    """``platform``, when the ``backend`` launcher starts its workloads; else a
    :class:`LaunchError` (a launcher never speaks for a platform that does not name it)."""
    if backend not in platform.launcher_backends:
        raise LaunchError(
            f"the {platform.name} platform's workloads are not started by the {backend!r} "
            f"launcher (its launchers: {', '.join(platform.launcher_backends)})"
        )
    return platform


def launch_environment(
    platform: LaunchPlatform, spec: RunSpec | AggregateSpec
) -> dict[str, str]:
    """The launch settings that make ``platform`` attest exactly ``spec``'s variables
    (:meth:`~sealbench.platforms.platform.Platform.launch_environment`): the mock's env overrides,
    Confidential Space's ``tee-env-*`` instance metadata."""
    try:
        return platform.launch_environment(spec.to_environ())
    except ValueError as exc:
        raise LaunchError(f"the run spec cannot reach a {platform.name} workload: {exc}") from exc
