"""TEE launchers: start the evaluation workload for a run specification and report how it ended.

- :class:`Launcher` — the interface (mock process today; Docker and Confidential Space VM later)
- :class:`MockProcessLauncher` — INSECURE: ``python -m sealbench.enclave`` as a child process
  wired to a running mock TEE (tests, ``sealbench demo``)
- :func:`enclave_image_digest` — the mock backend's "image digest": a manifest digest of the
  code the enclave runs
"""

from sealbench.client.runs.launchers.base import (
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
from sealbench.client.runs.launchers.image import (
    IMAGE_PACKAGES,
    MockImage,
    enclave_image_digest,
    mock_image,
)
from sealbench.client.runs.launchers.mock import MockProcessLauncher

__all__ = [
    "IMAGE_PACKAGES",
    "EnclaveRunFailed",
    "LaunchError",
    "LaunchResult",
    "LaunchTimeoutError",
    "Launcher",
    "MockImage",
    "MockProcessLauncher",
    "OutputFn",
    "RunningWorkload",
    "TransientLaunchError",
    "enclave_image_digest",
    "error_for_exit_code",
    "mock_image",
]
