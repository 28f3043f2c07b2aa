"""``sealbench doctor``'s Compute checks (for :mod:`sealbench.gcp.doctor`): the CPU quota of
the VMs' machine family in their region, or for confidential GPU runs the regional H100 quota,
the project-wide ``GPUS_ALL_REGIONS`` quota (0 in a new project on Google Cloud: a GPU VM is
refused until it is raised) and whether the zone has the confidential GPU at all.

The zone check first refuses a zone outside :data:`CONFIDENTIAL_GPU_REGIONS`, the regions where
Google offers the H100 in confidential-computing mode: Compute's catalogue does not say it (an
``a3-highgpu-1g`` with ``nvidia-h100-80gb`` is listed wherever plain H100s are, e.g.
europe-west4), so the list is Google's own from its Confidential Space launcher's GPU tests
(go-tpm-tools, ``launcher/image/test``: us-central1 and us-east5), the Confidential VM
"supported configurations" page (:data:`SUPPORTED_ZONES_PAGE`) being where a change would show.
Then it asks Compute, as Google's documentation does ("gcloud compute accelerator-types list",
"machine-types describe"): ``acceleratorTypes.get`` and ``machineTypes.get`` in the zone, and on
a refusal ``acceleratorTypes.aggregatedList`` for the zones that have the accelerator.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from sealbench.gcp._doctor_base import Check, ProbeRefused, RunnerSettings, run_check

if TYPE_CHECKING:
    from sealbench.gcp.owner_cloud import GcpOwnerCloud

__all__ = ["CONFIDENTIAL_GPU_REGIONS", "SUPPORTED_ZONES_PAGE", "gpu_quota_metrics",
           "quota_checks"]

#: Google's list of the zones with confidential GPUs.
SUPPORTED_ZONES_PAGE: Final = (
    "https://cloud.google.com/confidential-computing/confidential-vm/docs/"
    "supported-configurations#zones"
)
#: The regions with confidential H100s (see the module docstring).
CONFIDENTIAL_GPU_REGIONS: Final = ("us-central1", "us-east5")
PROJECT_GPU_METRIC: Final = "GPUS_ALL_REGIONS"
_TIMEOUT_S: Final = 30.0
_MACHINE = re.compile(r"^(?P<family>[a-z0-9]+)-[a-z]+-(?P<cpus>[0-9]+)$")


def gpu_quota_metrics(accelerator: str) -> tuple[str, str]:
    """The Compute quota metrics a Spot VM with ``accelerator`` draws on, preferred first:
    ``PREEMPTIBLE_NVIDIA_H100_GPUS`` (Spot capacity, where the project has that quota), then
    ``NVIDIA_H100_GPUS``."""
    vendor, model = accelerator.split("-")[:2]
    metric = f"{vendor.upper()}_{model.upper()}_GPUS"
    return f"PREEMPTIBLE_{metric}", metric


def _client(cloud: GcpOwnerCloud, kind: str) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.cloud import compute_v1

    return getattr(compute_v1, kind)(
        credentials=cloud.credentials(), transport="rest",
        client_options=ClientOptions(api_endpoint=cloud.apis.compute),
    )


def _viewer(project: str) -> str:
    return (f"a project owner lets you read quotas: gcloud projects add-iam-policy-binding "
            f"{project} --member=user:YOUR_EMAIL --role=roles/compute.viewer")


def quota_checks(cloud: GcpOwnerCloud, runner: RunnerSettings) -> list[Check]:
    """The CPU quota, or for a GPU run the regional and project-wide GPU quotas and the zone."""
    if runner.accelerator is not None:
        return [_gpu_quota(cloud, runner, runner.accelerator),
                _project_gpu_quota(cloud, runner),
                _gpu_zone(cloud, runner, runner.accelerator)]
    return [_cpu_quota(cloud, runner)]


def _gpu_quota(cloud: GcpOwnerCloud, runner: RunnerSettings, accelerator: str) -> Check:

    project, zone = cloud.project_id, runner.zone
    if not zone:
        return Check("GPU quota", False, "no zone configured",
                     "sealbench profile add NAME ... --zone ZONE (a zone with H100s)")
    region = zone.rsplit("-", 1)[0]
    metrics = gpu_quota_metrics(accelerator)

    def probe() -> str:
        found = _client(cloud, "RegionsClient").get(project=project, region=region,
                                                    timeout=_TIMEOUT_S)
        quotas = {q.metric: q for q in found.quotas}
        present = [m for m in metrics if m in quotas]
        if not present:
            raise ProbeRefused(f"no {' or '.join(metrics)} quota in {region}")
        for metric in present:
            quota = quotas[metric]
            free = quota.limit - quota.usage
            if free >= runner.gpus:
                return f"{metric} in {region}: {free:g} of {quota.limit:g} free"
        shown = "; ".join(f"{m} {quotas[m].limit - quotas[m].usage:g} of "
                          f"{quotas[m].limit:g} free" for m in present)
        raise ProbeRefused(f"{shown} in {region}; {runner.machine_type} with "
                           f"{accelerator} needs {runner.gpus}")

    return run_check(
        "GPU quota", probe,
        f"request {metrics[0]} in {region}: gcloud beta quotas preferences create "
        f"--service=compute.googleapis.com --quota-id={metrics[0].replace('_', '-')}"
        f"-per-project-region --dimensions=region={region} --preferred-value={runner.gpus} "
        f"--project={project} (or IAM & Admin → Quotas), or try a zone with H100 capacity",
        project, _viewer(project),
    )


def _project_gpu_quota(cloud: GcpOwnerCloud, runner: RunnerSettings) -> Check:
    """``GPUS_ALL_REGIONS`` (Compute ``projects.get``): every GPU VM draws on it too."""

    project = cloud.project_id

    def probe() -> str:
        found = _client(cloud, "ProjectsClient").get(project=project, timeout=_TIMEOUT_S)
        quota = next((q for q in found.quotas if q.metric == PROJECT_GPU_METRIC), None)
        if quota is None:
            raise ProbeRefused(f"project {project} shows no {PROJECT_GPU_METRIC} quota")
        free = quota.limit - quota.usage
        if free < runner.gpus:
            raise ProbeRefused(
                f"{PROJECT_GPU_METRIC}: {free:g} of {quota.limit:g} free in project {project}, "
                f"a run needs {runner.gpus} (a new project has 0)")
        return f"{PROJECT_GPU_METRIC}: {free:g} of {quota.limit:g} free"

    return run_check(
        "GPU quota, all regions", probe,
        f"request it: gcloud beta quotas preferences create --service=compute.googleapis.com "
        f"--quota-id=GPUS-ALL-REGIONS-per-project --preferred-value={runner.gpus} "
        f"--project={project} (or IAM & Admin → Quotas, 'GPUs (all regions)')",
        project, _viewer(project),
    )


def _gpu_zone(cloud: GcpOwnerCloud, runner: RunnerSettings, accelerator: str) -> Check:
    """The zone has the accelerator and its machine type (Compute's answer), else the zones
    that have the accelerator."""
    from google.api_core import exceptions as gexc


    project, zone = cloud.project_id, runner.zone
    if not zone:
        return Check("GPU zone", False, "no zone configured",
                     f"sealbench profile add NAME ... --zone ZONE (see {SUPPORTED_ZONES_PAGE})")

    def zones_with_it() -> list[str]:
        pages = _client(cloud, "AcceleratorTypesClient").aggregated_list(
            request={"project": project, "filter": f"name={accelerator}"}, timeout=_TIMEOUT_S)
        return sorted(scope.removeprefix("zones/") for scope, listed in pages
                      if any(a.name == accelerator for a in listed.accelerator_types))

    def probe() -> str:
        if zone.rsplit("-", 1)[0] not in CONFIDENTIAL_GPU_REGIONS:
            offered = [z for z in zones_with_it()
                       if z.rsplit("-", 1)[0] in CONFIDENTIAL_GPU_REGIONS]
            raise ProbeRefused(
                f"{zone} is not in a region with confidential {accelerator} GPUs (Google offers "
                f"them in {' and '.join(CONFIDENTIAL_GPU_REGIONS)} only; a plain H100 there "
                "would not attest); zones there with it: "
                f"{', '.join(offered) or 'none listed'}",
                f"sealbench profile add NAME ... --zone {offered[0] if offered else 'ZONE'} "
                f"(a zone of {' or '.join(CONFIDENTIAL_GPU_REGIONS)}; {SUPPORTED_ZONES_PAGE})")
        try:
            _client(cloud, "AcceleratorTypesClient").get(
                project=project, zone=zone, accelerator_type=accelerator, timeout=_TIMEOUT_S)
            _client(cloud, "MachineTypesClient").get(
                project=project, zone=zone, machine_type=runner.machine_type,
                timeout=_TIMEOUT_S)
        except gexc.NotFound as exc:
            others = zones_with_it()
            raise ProbeRefused(
                f"{zone} has no {accelerator} with {runner.machine_type} "
                f"({_short(exc)}); zones with {accelerator}: "
                f"{', '.join(others) or 'none listed'}",
                f"choose one of them that Google lists for confidential GPUs "
                f"({SUPPORTED_ZONES_PAGE}): sealbench profile add NAME ... --zone ZONE",
            ) from exc
        return (f"{zone} has {runner.machine_type} with {accelerator}, in a region with "
                "confidential GPUs")

    return run_check("GPU zone", probe, f"choose a zone from {SUPPORTED_ZONES_PAGE}", project,
                     _viewer(project))


def _short(exc: Exception) -> str:
    return str(getattr(exc, "message", exc))[:160]


def _cpu_quota(cloud: GcpOwnerCloud, runner: RunnerSettings) -> Check:

    project = cloud.project_id
    machine = _MACHINE.match(runner.machine_type)
    if not runner.zone or machine is None:
        return Check("CPU quota", False,
                     "no zone configured" if not runner.zone
                     else f"machine type {runner.machine_type!r} is not FAMILY-KIND-CPUS",
                     "sealbench profile add NAME ... --zone ZONE --machine-type n2d-standard-2")
    region = runner.zone.rsplit("-", 1)[0]
    metric, cpus = f"{machine['family'].upper()}_CPUS", int(machine["cpus"])

    def probe() -> str:
        found = _client(cloud, "RegionsClient").get(project=project, region=region,
                                                    timeout=_TIMEOUT_S)
        for quota in found.quotas:
            if quota.metric == metric:
                free = quota.limit - quota.usage
                if free < cpus:
                    raise ProbeRefused(
                        f"{metric} in {region}: {free:g} of {quota.limit:g} free, "
                        f"{runner.machine_type} needs {cpus}"
                    )
                return f"{metric} in {region}: {free:g} of {quota.limit:g} free"
        raise ProbeRefused(f"no {metric} quota in {region}")

    return run_check(
        "CPU quota", probe,
        f"request more {metric} in {region}: gcloud beta quotas preferences create "
        f"--service=compute.googleapis.com --quota-id={metric.replace('_', '-')}"
        f"-per-project-region --dimensions=region={region} --preferred-value=N "
        f"--project={project} (or IAM & Admin → Quotas), or delete idle VMs",
        project, _viewer(project),
    )
