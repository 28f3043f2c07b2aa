"""The pure half of the Confidential Space launcher: the VM settings, the ``Instance`` to insert
(:func:`instance_resource`), the image-reference check, the launcher's errors, and the one place
Google API errors become them, each with a ``hint`` naming what to grant, request or change (the
tree is drawn in :mod:`sealbench.gcp.launcher`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import Credentials
from google.cloud import compute_v1

from sealbench.platforms.launcher import LaunchError

__all__ = [
    "CLOUD_PLATFORM_SCOPE",
    "CS_DEBUG_IMAGE_FAMILY",
    "CS_IMAGE_FAMILY",
    "CapacityUnavailable",
    "ComputeNotFound",
    "ComputePermissionDenied",
    "ComputeUnavailable",
    "ConfidentialSpaceError",
    "ImagePullDenied",
    "ImageReferenceError",
    "QuotaExceeded",
    "VmSettings",
    "VmStoppedUnexpectedly",
    "VmTimeout",
    "WatchInterrupted",
    "image_digest_of",
    "image_pull_denied",
    "instance_resource",
    "make_compute_clients",
    "translate_api_error",
]

CS_IMAGE_FAMILY: Final = (
    "projects/confidential-space-images/global/images/family/confidential-space"
)
CS_DEBUG_IMAGE_FAMILY: Final = CS_IMAGE_FAMILY + "-debug"
#: Confidential GPU images (preview; their tokens carry support_attributes ["EXPERIMENTAL"]).
CS_GPU_IMAGE_FAMILY: Final = CS_IMAGE_FAMILY + "-preview-cgpu"
CS_GPU_DEBUG_IMAGE_FAMILY: Final = CS_IMAGE_FAMILY + "-debug-preview-cgpu"
#: ``--accelerator`` name -> (machine type, GPU count): H100 in confidential-computing mode runs
#: only on TDX A3 machines, TERMINATE on maintenance, SPOT (or FLEX_START) provisioning.
GPU_MACHINES: Final = {"nvidia-h100-80gb": ("a3-highgpu-1g", 1)}
CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
_MACHINES: Final = {"SEV": ("n2d-standard-2", "MIGRATE"), "TDX": ("c3-standard-4", "TERMINATE")}
_DIGEST_REFERENCE = re.compile(
    r"^[a-z0-9][a-z0-9.-]*(:[0-9]{1,5})?/[a-z0-9._/-]+@(?P<digest>sha256:[0-9a-f]{64})$"
)
_QUOTA_REASONS = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
_RATE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
_CAPACITY_REASONS = frozenset(
    {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "STOCKOUT"}
)
_QUOTA_METRIC = re.compile(r"Quota '(?P<metric>[A-Z0-9_]+)' exceeded")
#: The launcher's refused pull on the serial port: go-tpm-tools' "cannot pull image" (older:
#: "failed to pull image") with a 401/403 status or the registry's "denied".
_PULL_DENIED = re.compile(
    r"(?:cannot|failed to) pull (?:the )?image.*(?:40[13] (?:Forbidden|Unauthorized)|denied)")
_AR_REPOSITORY = re.compile(
    r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[a-z0-9.:-]+)/"
    r"(?P<repository>[a-z0-9._-]+)/")


class ConfidentialSpaceError(LaunchError):
    """The VM could not be created, watched or deleted. ``hint`` says what to do about it."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class ImageReferenceError(ConfidentialSpaceError):
    """The image is named by tag (or not at all), not by ``@sha256:`` digest."""

    failure_class = "image_reference"


class QuotaExceeded(ConfidentialSpaceError):  # noqa: N818 - reads as the event it reports
    """A CPU (or other resource) quota or an API rate limit was hit."""

    failure_class = "quota"
    retryable = True


class CapacityUnavailable(ConfidentialSpaceError):  # noqa: N818
    """The zone has no capacity for the machine type right now."""

    failure_class = "capacity"
    retryable = True


class ComputeUnavailable(ConfidentialSpaceError):  # noqa: N818
    """The Compute API failed on its side (500, 502, 503): a new try may succeed."""

    retryable = True


class ComputePermissionDenied(ConfidentialSpaceError):  # noqa: N818
    """The caller may not create or watch VMs, or may not use the service account."""

    failure_class = "permission"


class ComputeNotFound(ConfidentialSpaceError):  # noqa: N818
    """The project, zone, network, image or instance does not exist (or the API is off)."""

    failure_class = "not_found"


class ImagePullDenied(ConfidentialSpaceError):  # noqa: N818
    """The VM's launcher could not pull the image: its repository does not let the VM's
    service account download it (``roles/artifactregistry.reader``)."""

    failure_class = "permission"


def image_pull_denied(
    lines: list[str], service_account: str, image_reference: str
) -> ImagePullDenied | None:
    """The launcher's refused pull among the serial ``lines`` as an error naming the image, the
    account and (for Artifact Registry) the grant that fixes it; None when the serial port
    shows none."""
    if not any(_PULL_DENIED.search(line) for line in lines):
        return None
    found = _AR_REPOSITORY.match(image_reference)
    if found is None:
        return ImagePullDenied(
            f"the VM could not pull the evaluation image {image_reference[:200]}: its registry "
            f"refused {service_account}",
            hint="the image's owner lets the VM's service account read the image")
    repository, location, project = found.group("repository", "location", "project")
    return ImagePullDenied(
        f"the VM could not pull the evaluation image: repository {repository} ({location}, "
        f"project {project}) does not let {service_account} download it",
        hint=f"the image's owner grants it: gcloud artifacts repositories add-iam-policy-binding "
        f"{repository} --location={location} --project={project} "
        f"--member=serviceAccount:{service_account} --role=roles/artifactregistry.reader "
        "('sealbench doctor --benchmark B' checks it)")


class VmTimeout(ConfidentialSpaceError):  # noqa: N818
    """An API call, an operation or the whole run took longer than allowed."""

    failure_class = "timeout"


class WatchInterrupted(ConfidentialSpaceError):  # noqa: N818
    """The VM could no longer be watched (the Compute API kept failing or refused the reads);
    the VM was left running, its workload unjudged: not the run's own failure, so neither
    deleted nor retried (a second VM would run the same workload)."""

    failure_class = "watch"
    retryable = False


class VmStoppedUnexpectedly(ConfidentialSpaceError):  # noqa: N818
    """The VM stopped without the Confidential Space launcher reporting an exit."""

    failure_class = "vm_stopped"


def image_digest_of(reference: str) -> str:
    """The digest of ``repo@sha256:<64 hex>``; :class:`ImageReferenceError` for anything else
    (tags above all: ``repo:tag`` may point elsewhere by the time the VM pulls it)."""
    match = _DIGEST_REFERENCE.match(reference)
    if match is None:
        raise ImageReferenceError(
            f"the image reference {reference[:200]!r} does not name a digest",
            hint="name the image as REGISTRY/REPO@sha256:<64 hex> (the digest the benchmark "
            "registered; `sealbench image build` prints it)",
        )
    return match.group("digest")


@dataclass(frozen=True)
class VmSettings:
    """Where and how the operator's confidential VM runs. ``machine_type`` defaults per
    ``tee``; ``debug`` selects the debug image family, whose runs every key owner refuses."""

    project: str
    zone: str
    service_account: str
    image_reference: str
    tee: Literal["SEV", "TDX"] = "SEV"
    machine_type: str | None = None
    debug: bool = False
    keep_vm: bool = False
    log_redirect: Literal["true", "serial", "cloud_logging"] = "true"
    network: str = "global/networks/default"
    external_ip: bool = True
    disk_size_gb: int = 30
    instance_prefix: str = "sealbench-eval"
    accelerator: str | None = None

    def __post_init__(self) -> None:
        image_digest_of(self.image_reference)
        if self.accelerator is not None:
            if self.accelerator not in GPU_MACHINES:
                raise ConfidentialSpaceError(
                    f"unknown accelerator {self.accelerator!r}",
                    hint=f"use one of {', '.join(sorted(GPU_MACHINES))}",
                )
            if self.tee != "TDX":
                raise ConfidentialSpaceError(
                    f"confidential GPUs run on TDX machines, not {self.tee}", hint="add --tdx"
                )
            expected = GPU_MACHINES[self.accelerator][0]
            if self.machine_type not in (None, expected):
                raise ConfidentialSpaceError(
                    f"{self.accelerator} needs machine type {expected}, not {self.machine_type}",
                    hint="leave the machine type to the accelerator",
                )
        if self.tee not in _MACHINES:
            raise ConfidentialSpaceError(
                f"unknown TEE type {self.tee!r}", hint="use SEV (AMD) or TDX (Intel)"
            )
        if not re.match(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$", self.instance_prefix):
            raise ConfidentialSpaceError(
                f"instance prefix {self.instance_prefix!r} is not a valid instance name start",
                hint="use at most 32 lowercase letters, digits and dashes, starting with a letter",
            )

    @property
    def image_digest(self) -> str:
        digest: str = image_digest_of(self.image_reference)
        return digest


def instance_resource(
    settings: VmSettings, name: str, launch_metadata: Mapping[str, str]
) -> compute_v1.Instance:
    """The ``Instance`` to insert for one run (pure); ``launch_metadata`` is the run spec as the
    platform renders it (:meth:`~sealbench.platforms.platform.Platform.launch_environment`:
    ``tee-env-<NAME>`` items), and may not replace the launch settings set here."""
    machine_type, maintenance = _MACHINES[settings.tee]
    machine_type = settings.machine_type or machine_type
    fixed = [
        ("tee-image-reference", settings.image_reference),
        ("tee-restart-policy", "Never"),
        ("tee-container-log-redirect", settings.log_redirect),
    ]
    family = CS_DEBUG_IMAGE_FAMILY if settings.debug else CS_IMAGE_FAMILY
    gpus: list[compute_v1.AcceleratorConfig] = []
    if settings.accelerator is not None:
        machine_type, count = GPU_MACHINES[settings.accelerator]
        family = CS_GPU_DEBUG_IMAGE_FAMILY if settings.debug else CS_GPU_IMAGE_FAMILY
        fixed.append(("tee-install-gpu-driver", "true"))
        gpus = [compute_v1.AcceleratorConfig(
            accelerator_type=f"zones/{settings.zone}/acceleratorTypes/{settings.accelerator}",
            accelerator_count=count)]
        maintenance = "TERMINATE"
    clash = sorted({key for key, _ in fixed} & set(launch_metadata))
    if clash:
        raise ValueError(f"the run spec's launch metadata may not set {clash}")
    metadata = [*fixed, *sorted(launch_metadata.items())]
    if settings.tee == "SEV" and not machine_type.startswith("n2d-"):
        maintenance = "TERMINATE"  # live migration exists only for SEV on N2D
    scheduling = compute_v1.Scheduling(on_host_maintenance=maintenance)
    if gpus:
        scheduling.provisioning_model = "SPOT"
    access = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{settings.zone}/machineTypes/{machine_type}",
        confidential_instance_config=compute_v1.ConfidentialInstanceConfig(
            confidential_instance_type=settings.tee
        ),
        shielded_instance_config=compute_v1.ShieldedInstanceConfig(enable_secure_boot=True),
        scheduling=scheduling,
        guest_accelerators=gpus,
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=family,
                    disk_size_gb=settings.disk_size_gb,
                ),
            )
        ],
        network_interfaces=[
            compute_v1.NetworkInterface(
                network=settings.network, access_configs=access if settings.external_ip else []
            )
        ],
        service_accounts=[
            compute_v1.ServiceAccount(email=settings.service_account, scopes=[CLOUD_PLATFORM_SCOPE])
        ],
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key=key, value=value) for key, value in metadata]
        ),
        labels={"sealbench": "evaluation"},
    )


def make_compute_clients(
    credentials: Credentials | None, api_endpoint: str | None = None
) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
    """Instances and zone-operations clients over REST (``credentials=None``: application
    default credentials; ``api_endpoint=None``: Google's)."""
    options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
    return (
        compute_v1.InstancesClient(
            credentials=credentials, transport="rest", client_options=options
        ),
        compute_v1.ZoneOperationsClient(
            credentials=credentials, transport="rest", client_options=options
        ),
    )


def _reasons(exc: gexc.GoogleAPICallError) -> set[str]:
    reasons = {exc.reason} if exc.reason else set()
    for error in exc.errors or ():
        if isinstance(error, dict):
            reasons |= {str(error.get(k)) for k in ("reason", "code") if error.get(k)}
    return reasons


def translate_api_error(
    exc: gexc.GoogleAPICallError | gexc.RetryError, action: str, settings: VmSettings
) -> ConfidentialSpaceError:
    """The sealbench error for a Google API error raised while doing ``action``."""
    where = f"project {settings.project}, zone {settings.zone}"
    if isinstance(exc, (gexc.RetryError, gexc.DeadlineExceeded)):
        return VmTimeout(
            f"{action}: the Compute API did not answer in time ({exc})",
            hint="check your network and https://status.cloud.google.com, then run again",
        )
    message = f"{action}: {exc.code} {exc.message}"
    reasons = _reasons(exc)
    if "SERVICE_DISABLED" in reasons or "it is disabled. Enable it by visiting" in str(
        exc.message
    ):
        return ComputeNotFound(
            f"{action}: the Compute Engine API is disabled in project {settings.project}",
            hint=f"gcloud services enable compute.googleapis.com "
            f"confidentialcomputing.googleapis.com --project {settings.project}",
        )
    region = settings.zone.rsplit("-", 1)[0]
    if reasons & _CAPACITY_REASONS:
        return CapacityUnavailable(
            message,
            hint=f"zone {settings.zone} has no free capacity for this machine type now; "
            "try another zone of a region that offers it, or retry later",
        )
    if isinstance(exc, gexc.TooManyRequests) or reasons & _RATE_REASONS:
        return QuotaExceeded(
            message,
            hint="the Compute API rate limit was hit: wait a minute and retry, or request a "
            "higher compute.googleapis.com requests quota (IAM & Admin → Quotas)",
        )
    if reasons & _QUOTA_REASONS or _QUOTA_METRIC.search(str(exc.message)):
        metric = _QUOTA_METRIC.search(str(exc.message))
        name = metric.group("metric") if metric else "the CPU quota of this machine family"
        if name == "GPUS_ALL_REGIONS":  # project-wide, 0 in a new project
            return QuotaExceeded(
                message,
                hint="request a quota increase for GPUS_ALL_REGIONS, the project's GPUs in all "
                "regions (0 in a new project): gcloud beta quotas preferences create "
                "--service=compute.googleapis.com --quota-id=GPUS-ALL-REGIONS-per-project "
                f"--preferred-value=1 --project={settings.project} (or IAM & Admin → Quotas); "
                "'sealbench doctor --accelerator ...' checks it",
            )
        return QuotaExceeded(
            message,
            hint=f"request a quota increase for {name} in region {region} (IAM & Admin → "
            "Quotas), delete idle VMs, or pick a smaller --machine-type or another region",
        )
    if isinstance(exc, (gexc.InternalServerError, gexc.BadGateway, gexc.ServiceUnavailable)):
        return ComputeUnavailable(
            message, hint="the Compute API failed on Google's side; run again in a minute "
            "(https://status.cloud.google.com)",
        )
    text = str(exc.message)
    if isinstance(exc, gexc.Unauthorized):
        return ComputePermissionDenied(
            message,
            hint="your credentials were refused: run `gcloud auth application-default login` "
            "(or set GOOGLE_APPLICATION_CREDENTIALS) and try again",
        )
    if "service account" in text.lower() or "serviceAccountUser" in text:
        return ComputePermissionDenied(
            message,
            hint=f"grant yourself roles/iam.serviceAccountUser on {settings.service_account} "
            f"(gcloud iam service-accounts add-iam-policy-binding {settings.service_account} "
            "--member=user:YOU --role=roles/iam.serviceAccountUser)",
        )
    if isinstance(exc, (gexc.Forbidden, gexc.PermissionDenied)):
        return ComputePermissionDenied(
            message,
            hint=f"grant the operator roles/compute.instanceAdmin.v1 on {where} (and "
            f"roles/iam.serviceAccountUser on {settings.service_account}); see docs/gcp-setup.md",
        )
    if isinstance(exc, gexc.NotFound):
        return ComputeNotFound(
            message,
            hint=f"check {where} and the network exist and the APIs are enabled: gcloud services "
            "enable compute.googleapis.com confidentialcomputing.googleapis.com",
        )
    return ConfidentialSpaceError(
        message, hint="see the message above; docs/gcp-setup.md lists what the launcher needs"
    )
