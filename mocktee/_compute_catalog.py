"""What the mock Compute API (:mod:`sealbench.mocktee.compute`) says exists in its zones:
``machineTypes.get``, ``acceleratorTypes.get`` and ``acceleratorTypes.aggregatedList``, in
Compute's JSON shapes. Pure: a project, a zone and a name in, a JSON body (or None: not found)
out.

Every zone has the confidential CPU machine types (N2D, C2D, C3D, C3). The H100 (``a3-highgpu-1g``
with its ``nvidia-h100-80gb``) is in :data:`H100_ZONES` only, the mock's own zones; of those,
only the zones of :data:`CONFIDENTIAL_GPU_REGIONS` offer it in confidential-computing mode
(:data:`CONFIDENTIAL_GPU_ZONES`), as on Google Cloud, whose Confidential Space launcher tests say
confidential GPUs are available in us-central1 and us-east5 only. Like Google's, the catalogue
does not tell the two apart (``machineTypes.get`` and ``acceleratorTypes.get`` find the plain
H100 in europe-west4-c); an insert of a confidential GPU VM there is refused.
"""

from __future__ import annotations

import re
from typing import Any, Final

from sealbench.mocktee.constants import COMPUTE_API, GPU_ACCELERATOR

__all__ = [
    "CONFIDENTIAL_GPU_REGIONS",
    "CONFIDENTIAL_GPU_ZONES",
    "H100_ZONES",
    "accelerator_type",
    "accelerator_zones",
    "gpu_available",
    "h100_available",
    "machine_type",
]

#: The regions where Google offers confidential H100s (go-tpm-tools' launcher GPU tests).
CONFIDENTIAL_GPU_REGIONS: Final = ("us-central1", "us-east5")
#: The mock's zones with H100s (``a3-highgpu-1g`` + ``nvidia-h100-80gb``), confidential or not.
H100_ZONES: Final = ("us-central1-a", "us-east5-a", "europe-west4-c")
#: Those of them with confidential H100s (``a3-highgpu-1g`` TDX + ``nvidia-h100-80gb``).
CONFIDENTIAL_GPU_ZONES: Final = tuple(
    z for z in H100_ZONES if z.rsplit("-", 1)[0] in CONFIDENTIAL_GPU_REGIONS)
_API = COMPUTE_API
_GPU = GPU_ACCELERATOR
_A3_TYPE = re.compile(r"^a3-highgpu-(?P<gpus>[1248])g$")
_CPU_TYPE = re.compile(r"^(?P<family>n2d|c2d|c3d|c3)-(?P<kind>standard|highmem|highcpu)-"
                       r"(?P<cpus>\d+)$")
_MEMORY_PER_CPU_MB = {"standard": 4096, "highmem": 8192, "highcpu": 1024}


def gpu_available(zone: str) -> bool:
    """Whether ``zone`` has the mock's confidential H100."""
    return zone in CONFIDENTIAL_GPU_ZONES


def h100_available(zone: str) -> bool:
    """Whether ``zone`` has the mock's H100 at all (what the catalogue shows)."""
    return zone in H100_ZONES


def machine_type(project: str, zone: str, name: str) -> dict[str, Any] | None:
    """``machineTypes.get``'s body, or None (Compute's 404) where ``zone`` has no ``name``."""
    base = f"{_API}/projects/{project}/zones/{zone}/machineTypes/{name}"
    a3 = _A3_TYPE.match(name)
    if a3 is not None:  # a3-highgpu-1g is the confidential one (TDX); the others exist too
        if not h100_available(zone):
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
    if name != _GPU or not h100_available(zone):
        return None
    return {"kind": "compute#acceleratorType", "name": name, "description": "NVIDIA H100 80GB",
            "zone": f"{_API}/projects/{project}/zones/{zone}", "maximumCardsPerInstance": 8,
            "selfLink": f"{_API}/projects/{project}/zones/{zone}/acceleratorTypes/{name}"}


def accelerator_zones(project: str, filter_text: str) -> dict[str, Any]:
    """``acceleratorTypes.aggregatedList``'s body: every zone's accelerator types, narrowed by
    a ``name=X`` (or ``name = "X"``) filter, the only filter the mock reads."""
    wanted = re.fullmatch(r'\s*name\s*=\s*"?([a-z0-9-]+)"?\s*', filter_text or "")
    items: dict[str, Any] = {}
    for zone in H100_ZONES:
        if wanted is None or wanted.group(1) == _GPU:
            items[f"zones/{zone}"] = {"acceleratorTypes": [accelerator_type(project, zone, _GPU)]}
    return {"kind": "compute#acceleratorTypeAggregatedList", "items": items,
            "selfLink": f"{_API}/projects/{project}/aggregated/acceleratorTypes"}
