"""What the mock Compute API (:mod:`sealbench.mocktee.compute`) says exists in its zones:
``machineTypes.get``, ``acceleratorTypes.get`` and ``acceleratorTypes.aggregatedList``, in
Compute's JSON shapes. Pure: a project, a zone and a name in, a JSON body (or None: not found)
out.

Every zone has the confidential CPU machine types (N2D, C2D, C3D, C3). The confidential H100
(``a3-highgpu-1g`` with its ``nvidia-h100-80gb``) is in :data:`CONFIDENTIAL_GPU_ZONES` only.
That set is the MOCK'S OWN, not Google's: on Google Cloud the zones where a confidential H100
can be had are few, change, and are listed on the Confidential VM "supported configurations"
page; what the mock shares with Google is the behaviour (the machine type and the accelerator
type are not found in other zones, and an insert there is refused).
"""

from __future__ import annotations

import re
from typing import Any, Final

from sealbench.mocktee.constants import COMPUTE_API, GPU_ACCELERATOR

__all__ = [
    "CONFIDENTIAL_GPU_ZONES",
    "accelerator_type",
    "accelerator_zones",
    "gpu_available",
    "machine_type",
]

#: The mock's zones with confidential H100s (``a3-highgpu-1g`` TDX + ``nvidia-h100-80gb``).
CONFIDENTIAL_GPU_ZONES: Final = ("us-central1-a", "us-east5-a", "europe-west4-c")
_API = COMPUTE_API
_GPU = GPU_ACCELERATOR
_A3_TYPE = re.compile(r"^a3-highgpu-(?P<gpus>[1248])g$")
_CPU_TYPE = re.compile(r"^(?P<family>n2d|c2d|c3d|c3)-(?P<kind>standard|highmem|highcpu)-"
                       r"(?P<cpus>\d+)$")
_MEMORY_PER_CPU_MB = {"standard": 4096, "highmem": 8192, "highcpu": 1024}


def gpu_available(zone: str) -> bool:
    """Whether ``zone`` has the mock's confidential H100."""
    return zone in CONFIDENTIAL_GPU_ZONES


def machine_type(project: str, zone: str, name: str) -> dict[str, Any] | None:
    """``machineTypes.get``'s body, or None (Compute's 404) where ``zone`` has no ``name``."""
    base = f"{_API}/projects/{project}/zones/{zone}/machineTypes/{name}"
    a3 = _A3_TYPE.match(name)
    if a3 is not None:  # a3-highgpu-1g is the confidential one (TDX); the others exist too
        if not gpu_available(zone):
            return None
        gpus = int(a3["gpus"])
        return {"kind": "compute#machineType", "name": name, "zone": zone,
                "guestCpus": 26 * gpus, "memoryMb": 239616 * gpus, "isSharedCpu": False,
                "selfLink": base, "description": f"{26 * gpus} vCPUs, {gpus} GPU",
                "accelerators": [{"guestAcceleratorType": _GPU, "guestAcceleratorCount": gpus}]}
    cpu = _CPU_TYPE.match(name)
    if cpu is None:
        return None
    cpus = int(cpu["cpus"])
    return {"kind": "compute#machineType", "name": name, "zone": zone, "guestCpus": cpus,
            "memoryMb": cpus * _MEMORY_PER_CPU_MB[cpu["kind"]], "isSharedCpu": False,
            "selfLink": base, "description": f"{cpus} vCPUs"}


def accelerator_type(project: str, zone: str, name: str) -> dict[str, Any] | None:
    """``acceleratorTypes.get``'s body, or None (Compute's 404) where ``zone`` has none."""
    if name != _GPU or not gpu_available(zone):
        return None
    return {"kind": "compute#acceleratorType", "name": name, "description": "NVIDIA H100 80GB",
            "zone": f"{_API}/projects/{project}/zones/{zone}", "maximumCardsPerInstance": 8,
            "selfLink": f"{_API}/projects/{project}/zones/{zone}/acceleratorTypes/{name}"}


def accelerator_zones(project: str, filter_text: str) -> dict[str, Any]:
    """``acceleratorTypes.aggregatedList``'s body: every zone's accelerator types, narrowed by
    a ``name=X`` (or ``name = "X"``) filter, the only filter the mock reads."""
    wanted = re.fullmatch(r'\s*name\s*=\s*"?([a-z0-9-]+)"?\s*', filter_text or "")
    items: dict[str, Any] = {}
    for zone in CONFIDENTIAL_GPU_ZONES:
        if wanted is None or wanted.group(1) == _GPU:
            items[f"zones/{zone}"] = {"acceleratorTypes": [accelerator_type(project, zone, _GPU)]}
    return {"kind": "compute#acceleratorTypeAggregatedList", "items": items,
            "selfLink": f"{_API}/projects/{project}/aggregated/acceleratorTypes"}
