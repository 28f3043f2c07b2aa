"""TEE launchers as the client uses them: start the evaluation workload for a run specification
and report how it ended.

- :class:`Launcher` — the interface (:mod:`sealbench.platforms.launcher`); each platform builds
  its own backends (:mod:`~sealbench.client.runs.launchers.selection` picks one by ``--tee``)
- :func:`enclave_image_digest` — the mock backends' "image digest": a manifest digest of the
  code the enclave runs (:mod:`sealbench.mocktee.image`)
"""

from sealbench.mocktee.image import (
    IMAGE_PACKAGES,
    MockImage,
    enclave_image_digest,
    mock_image,
)
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
    "IMAGE_PACKAGES",
    "EnclaveRunFailed",
    "LaunchError",
    "LaunchResult",
    "LaunchTimeoutError",
    "Launcher",
    "MockImage",
    "OutputFn",
    "RunningWorkload",
    "TransientLaunchError",
    "enclave_image_digest",
    "error_for_exit_code",
    "mock_image",
]
