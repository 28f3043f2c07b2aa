"""TEE launchers as the client uses them: start the evaluation workload for a run specification
and report how it ended.

- :class:`Launcher` — the interface (:mod:`sealbench.platforms.launcher`); each platform builds
  its own backends (:mod:`~sealbench.client.backends` picks one by ``--tee``)
- :mod:`~sealbench.client.runs.launchers.for_profile` — a backend's launcher with a profile's
  settings
"""

from sealbench.platforms.launcher import (
    EnclaveRunFailed,
    Launcher,
    LaunchError,
    LaunchResult,
    LaunchTimeoutError,
    OutputFn,
    RunningWorkload,
    TransientLaunchError,
    error_for_exit_code,
)

__all__ = [
    "EnclaveRunFailed",
    "LaunchError",
    "LaunchResult",
    "LaunchTimeoutError",
    "Launcher",
    "OutputFn",
    "RunningWorkload",
    "TransientLaunchError",
    "error_for_exit_code",
]
