"""What the mock Compute API (:mod:`sealbench.mocktee.compute`) checks in an ``instances.insert``
body before any VM exists, and the errors it answers in Compute's JSON shape. Pure: a body in,
a :class:`ValidInsert` or a 4xx :class:`~sealbench.mocktee._http.Response` out.

Compute's rules: the name; the machine type (in the request's zone) vs. the confidential
instance type (SEV: N2D/C2D/C3D; TDX: C3, and ``a3-highgpu-1g`` for a confidential H100); live
migration (``onHostMaintenance: MIGRATE``) only for SEV on N2D and never with guest accelerators;
the boot image (the ``confidential-space-images`` families below); the service account (one of
the project's own). Confidential GPUs (preview): ``a3-highgpu-1g`` only with TDX, with
``scheduling.provisioningModel: SPOT`` (``FLEX_START`` needs an instance template and a MIG
resize request, which the mock has not), in a zone that has it (Compute's "does not exist in
zone"; the mock's zones: :mod:`sealbench.mocktee._compute_catalog`), and ``guestAccelerators``
exactly one ``nvidia-h100-80gb`` of count 1 in the request's zone; an accelerator on any other
machine type is refused.

The mock's own rules, which say so in their messages: the VM must be confidential; Shielded VM
Secure Boot must be on; ``tee-image-reference`` must name a digest (the mock has no registry to
resolve tags); an A3 request must list its GPU in ``guestAccelerators`` (Compute attaches an
accelerator-optimized machine's GPUs itself; sealbench always sends it, and the mock checks what
is sent); and the GPU families (``…-preview-cgpu``) boot exactly the GPU VMs, the other
families exactly the CPU ones.

Quota: a CPU VM charges its vCPUs to ``{FAMILY}_CPUS``; a GPU VM charges its GPUs to
:data:`GPU_QUOTA_METRIC` and to the project-wide :data:`PROJECT_GPU_METRIC` (Compute would
charge a Spot VM to ``PREEMPTIBLE_NVIDIA_H100_GPUS`` where that quota was granted; the mock has
the one metric) and no CPUs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sealbench.mocktee import _compute_catalog as catalog
from sealbench.mocktee._compute_vm import DIGEST_REFERENCE, metadata_items
from sealbench.mocktee._http import Response, json_response
from sealbench.mocktee.constants import GPU_ACCELERATOR

__all__ = [
    "CPU_QUOTA_METRICS",
    "CS_IMAGE_PROJECT",
    "GPU_ACCELERATOR",
    "GPU_MACHINE_TYPE",
    "GPU_QUOTA_METRIC",
    "PROJECT_GPU_METRIC",
    "ComputeFault",
    "ValidInsert",
    "error",
    "validate_insert",
]

CS_IMAGE_PROJECT: Final = "confidential-space-images"
#: The confidential GPU the mock knows: an H100 in confidential-computing mode, one per A3 TDX VM.
GPU_MACHINE_TYPE: Final = "a3-highgpu-1g"
GPU_QUOTA_METRIC: Final = "NVIDIA_H100_GPUS"
#: The project-wide GPU quota every GPU VM also draws on (0 in a new project on Google Cloud).
PROJECT_GPU_METRIC: Final = "GPUS_ALL_REGIONS"
CPU_QUOTA_METRICS: Final = ("N2D_CPUS", "C2D_CPUS", "C3D_CPUS", "C3_CPUS")


@dataclass(frozen=True)
class _Family:
    debug: bool
    gpu: bool


_FAMILIES: Final = {
    "confidential-space": _Family(debug=False, gpu=False),
    "confidential-space-debug": _Family(debug=True, gpu=False),
    "confidential-space-preview-cgpu": _Family(debug=False, gpu=True),
    "confidential-space-debug-preview-cgpu": _Family(debug=True, gpu=True),
}
_IMAGE = re.compile(
    r"^(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?"
    r"projects/(?P<project>[^/]+)/global/images/family/(?P<family>[^/]+)$"
)
_MACHINE = re.compile(r"^(?:.*/)?zones/(?P<zone>[^/]+)/machineTypes/(?P<type>[a-z0-9-]+)$")
_MACHINE_TYPE = re.compile(
    r"^(?:(?P<family>n2d|c2d|c3d|c3)-(standard|highmem|highcpu)-(?P<cpus>\d+)"
    r"|(?P<gpu_family>a3)-highgpu-(?P<gpus>[1248])g)$"
)
_ACCELERATOR = re.compile(r"^(?:.*/)?zones/(?P<zone>[^/]+)/acceleratorTypes/(?P<type>[a-z0-9-]+)$")
_CONFIDENTIAL: Final = {"SEV": ("n2d", "c2d", "c3d"), "TDX": ("c3", "a3")}
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ComputeFault:
    """An error in Compute's JSON shape, for :meth:`MockCompute.fail_next`."""

    code: int
    message: str
    reason: str
    error_info_reason: str | None = None

    @classmethod
    def rate_limited(cls) -> ComputeFault:
        return cls(429, "Rate Limit Exceeded", "rateLimitExceeded", "RATE_LIMIT_EXCEEDED")

    @classmethod
    def read_rate_exceeded(cls, project_number: str, limit: int) -> ComputeFault:
        """Compute's 403 past a project's read requests per minute (Google: 1,500 by default,
        every ``get`` and ``getSerialPortOutput`` counting)."""
        return cls(403, f"Quota exceeded for quota metric 'Read requests' and limit 'Read "
                   f"requests per minute' of service 'compute.googleapis.com' for consumer "
                   f"'project_number:{project_number}' (limit {limit}).",
                   "rateLimitExceeded", "RATE_LIMIT_EXCEEDED")

    @classmethod
    def quota_exceeded(cls, metric: str, limit: float, region: str | None) -> ComputeFault:
        """Compute's message: ``in region R`` for a regional quota, ``globally`` for a
        project-wide one (``region`` None)."""
        where = f"in region {region}" if region else "globally"
        message = f"Quota '{metric}' exceeded.  Limit: {limit:.1f} {where}."
        return cls(403, message, "quotaExceeded", "QUOTA_EXCEEDED")

    @classmethod
    def permission_denied(cls, permission: str, resource: str) -> ComputeFault:
        return cls(403, f"Required '{permission}' permission for '{resource}'", "forbidden")

    def response(self) -> Response:
        body: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
        }
        if self.error_info_reason:
            body["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.error_info_reason,
                    "domain": "compute.googleapis.com",
                }
            ]
        return json_response(self.code, {"error": body})


def error(code: int, message: str, reason: str = "invalid") -> Response:
    """A Compute error reply (``{"error": {"code", "message", "errors": [...]}}``)."""
    return ComputeFault(code, message, reason).response()


@dataclass(frozen=True)
class ValidInsert:
    """A valid insert body's facts: the quota it charges (metric → amount), whether it boots a
    debug image, and whether it carries a confidential GPU (the preview image attests it)."""

    quota: Mapping[str, int]
    debug: bool
    gpu: bool


def _invalid(field: str, value: object, why: str) -> Response:
    return error(400, f"Invalid value for field '{field}': '{value}'. {why}")


def _accelerator(
    body: dict[str, Any], machine_type: str, zone: str, gpus: int | None
) -> Response | None:
    """Compute's (and the mock's) refusal of ``guestAccelerators`` for this machine type."""
    accelerators = body.get("guestAccelerators") or []
    if not isinstance(accelerators, list) or not all(isinstance(a, dict) for a in accelerators):
        return error(400, "Invalid value for field 'resource.guestAccelerators'")
    if gpus is None:
        if accelerators:
            return _invalid(
                "resource.guestAccelerators[0].acceleratorType",
                accelerators[0].get("acceleratorType", ""),
                f"Machine type '{machine_type}' does not support guest accelerators; "
                f"confidential GPUs run on {GPU_MACHINE_TYPE}.",
            )
        return None
    if len(accelerators) != 1:
        return error(
            400,
            f"Invalid value for field 'resource.guestAccelerators': machine type "
            f"'{machine_type}' comes with {gpus} {GPU_ACCELERATOR}; the sealbench mock requires "
            f"it listed as exactly one guestAccelerators entry, got {len(accelerators)}",
        )
    given = accelerators[0]
    kind = str(given.get("acceleratorType", ""))
    parsed = _ACCELERATOR.match(kind)
    if parsed is None:
        return _invalid("resource.guestAccelerators[0].acceleratorType", kind,
                        "Expected 'zones/ZONE/acceleratorTypes/TYPE'.")
    if parsed["zone"] != zone:
        return _invalid("resource.guestAccelerators[0].acceleratorType", kind,
                        f"Accelerator type zone must be the instance's zone '{zone}'.")
    if parsed["type"] != GPU_ACCELERATOR:
        return _invalid("resource.guestAccelerators[0].acceleratorType", kind,
                        f"Machine type '{machine_type}' supports only {GPU_ACCELERATOR}.")
    count = given.get("acceleratorCount")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if count != gpus or isinstance(count, bool):
        return _invalid("resource.guestAccelerators[0].acceleratorCount", count,
                        f"Machine type '{machine_type}' has exactly {gpus} {GPU_ACCELERATOR}.")
    return None


def validate_insert(
    body: dict[str, Any], project_id: str, project_number: str, zone: str
) -> ValidInsert | Response:
    """The facts of a valid insert body, else Compute's 4xx (see the module docstring)."""
    if not isinstance(body.get("name"), str) or not _NAME.match(body["name"]):
        return error(400, "Invalid value for field 'resource.name'")
    machine = _MACHINE.match(str(body.get("machineType", "")))
    machine_type = _MACHINE_TYPE.match(machine.group("type")) if machine else None
    if machine is None or machine_type is None or machine.group("zone") != zone:
        return error(400, "Invalid value for field 'resource.machineType'")
    type_name = machine.group("type")
    if catalog.machine_type(project_id, zone, type_name) is None:
        return _invalid("resource.machineType", machine.group(0),
                        f"Machine type with name '{type_name}' does not exist in zone '{zone}'.")
    family = machine_type["family"] or machine_type["gpu_family"]
    gpus = int(machine_type["gpus"]) if machine_type["gpus"] else None
    confidential = (body.get("confidentialInstanceConfig") or {}).get("confidentialInstanceType")
    if confidential not in _CONFIDENTIAL:
        return error(
            400,
            "the sealbench mock runs only Confidential VMs: set "
            "confidentialInstanceConfig.confidentialInstanceType to SEV or TDX",
        )
    if family not in _CONFIDENTIAL[confidential] or (
        gpus is not None and type_name != GPU_MACHINE_TYPE
    ):
        return error(
            400,
            f"Confidential instance type {confidential} is not supported for machine type "
            f"'{type_name}'",
        )
    scheduling = body.get("scheduling") or {}
    maintenance = scheduling.get("onHostMaintenance", "MIGRATE")
    if maintenance != "TERMINATE" and (body.get("guestAccelerators") or gpus is not None):
        return error(400, "Instances with guest accelerators do not support live migration.")
    if maintenance != "TERMINATE" and (confidential != "SEV" or family != "n2d"):
        return error(
            400,
            f"Instances with confidential type {confidential} on {family} must set "
            "scheduling.onHostMaintenance to TERMINATE",
        )
    refused = _accelerator(body, type_name, zone, gpus)
    if refused is not None:
        return refused
    if gpus is not None and not catalog.gpu_available(zone):
        return error(400, f"Confidential Computing with {GPU_ACCELERATOR} is not available in "
                     f"zone '{zone}' (the sealbench mock's wording; confidential GPUs are in "
                     f"{', '.join(catalog.CONFIDENTIAL_GPU_REGIONS)} only).")
    provisioning = scheduling.get("provisioningModel", "STANDARD")
    if gpus is not None and provisioning != "SPOT":
        return _invalid(
            "resource.scheduling.provisioningModel", provisioning,
            f"Confidential {GPU_ACCELERATOR} instances are available as SPOT (or FLEX_START "
            "through a managed instance group resize request) only.",
        )
    if not (body.get("shieldedInstanceConfig") or {}).get("enableSecureBoot"):
        return error(400, "the sealbench mock requires Shielded VM Secure Boot (enableSecureBoot)")
    boot_disks = [d for d in body.get("disks") or [] if d.get("boot")]
    params = (boot_disks[0].get("initializeParams") or {}) if len(boot_disks) == 1 else {}
    source = str(params.get("sourceImage", ""))
    image = _IMAGE.match(source)
    if image is None or image["project"] != CS_IMAGE_PROJECT or image["family"] not in _FAMILIES:
        return error(404, f"The resource '{source}' was not found", "notFound")
    image_family = _FAMILIES[image["family"]]
    if image_family.gpu != (gpus is not None):
        return error(
            400,
            f"the sealbench mock boots image family {image['family']} only on "
            + (f"{GPU_MACHINE_TYPE} with its {GPU_ACCELERATOR}" if image_family.gpu
               else "CPU machine types; a GPU VM needs confidential-space-preview-cgpu"),
        )
    accounts = body.get("serviceAccounts") or []
    email = str(accounts[0].get("email", "")) if len(accounts) == 1 else ""
    if not email.endswith(
        (
            f"@{project_id}.iam.gserviceaccount.com",
            f"{project_number}-compute@developer.gserviceaccount.com",
        )
    ):
        return error(
            400,
            f"The user does not have access to service account '{email}'. Ask a project owner "
            "to grant you the iam.serviceAccountUser role on the service account",
        )
    try:
        metadata = metadata_items(body)
    except ValueError as exc:
        return error(400, str(exc))
    if not DIGEST_REFERENCE.match(metadata.get("tee-image-reference", "")):
        return error(
            400,
            "tee-image-reference must name the image by digest (repo@sha256:<64 hex>); the "
            "sealbench mock has no registry to resolve tags",
        )
    quota = (
        {GPU_QUOTA_METRIC: gpus, PROJECT_GPU_METRIC: gpus}
        if gpus is not None
        else {f"{family.upper()}_CPUS": int(machine_type["cpus"])}
    )
    return ValidInsert(quota, image_family.debug, gpus is not None)
