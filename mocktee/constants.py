"""The INSECURE mock's constants that more than one of its modules shares, defined once: the
Compute resource URLs its stand-in writes, the confidential GPU it offers, its launchers' limits,
and the zone its VMs (and their tokens) are in by default."""

from __future__ import annotations

from typing import Final

__all__ = [
    "COMPUTE_API",
    "GPU_ACCELERATOR",
    "LAUNCH_TIMEOUT_S",
    "MAX_FAILURE_REASON",
    "MOCK_ZONE",
]

#: The base of the ``selfLink`` s the Compute stand-in writes (as Google's Compute API does).
COMPUTE_API: Final = "https://www.googleapis.com/compute/v1"
#: The one confidential GPU the Compute stand-in offers (and quotas, zones and VMs name).
GPU_ACCELERATOR: Final = "nvidia-h100-80gb"
#: The zone the mock's VMs run in unless told otherwise (their tokens' ``gce.zone``).
MOCK_ZONE: Final = "us-central1-a"
#: Seconds a mock run (a process or a container) may take before it is killed.
LAUNCH_TIMEOUT_S: Final = 3600.0
#: The most characters of a failed run's output its launcher keeps as the reason.
MAX_FAILURE_REASON: Final = 2000
