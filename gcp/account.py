"""A Google Cloud account as a sealbench profile holds it (:class:`GcpSettings`, the
Confidential Space platform's declared account settings) and the answers the platform gives
about it: where its runs go, its owner cloud, what ``profile show`` prints, its project number.

Settings name a project and what sealbench touches in it, never credentials: Application
Default Credentials, optionally impersonating ``impersonate_service_account``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sealbench.platforms.account import AccountRoutes, LaunchDefaults
from sealbench.platforms.launcher import Launcher, LaunchSettingsError
from sealbench.platforms.owner_cloud import OwnerCloud
from sealbench.platforms.platform import LaunchPlatform, VerifierKeys

__all__ = [
    "API_ENDPOINT_NAMES",
    "CsLaunchOptions",
    "GcpSettings",
    "account_launcher",
    "account_owner_cloud",
    "account_routes",
    "account_rows",
    "complete_account",
    "launch_defaults",
]

_log = logging.getLogger("sealbench.gcp")

#: The Google APIs whose endpoint a profile may override (``--api-endpoint NAME=URL``).
API_ENDPOINT_NAMES: Final = (
    "kms", "storage", "iam", "sts", "compute", "serviceusage", "cloudresourcemanager",
    "attestation", "artifactregistry",
)
_ENDPOINT = re.compile(
    r"^(https://[A-Za-z0-9.-]+(:[0-9]{1,5})?|http://127\.0\.0\.1:[0-9]{1,5})(/[^\s@?#]*)?$"
)
#: A project number not yet looked up (``profile add`` without ``--project-number``).
UNKNOWN_NUMBER: Final = "0"


class GcpSettings(BaseModel):
    """An owner's Google Cloud project as a profile names it: what ``seal``, ``policy sync``,
    ``run --tee confidential-space`` and ``result fetch`` touch (each overridable per command).
    Credentials are never stored: Application Default Credentials, optionally impersonating
    ``impersonate_service_account``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str = Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
    project_number: str = Field(pattern=r"^[0-9]{1,20}$")
    location: str = Field(default="global", pattern=r"^[a-z0-9-]{1,63}$")
    key_ring: str = Field(default="sealbench", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    key: str = Field(default="assets", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
    #: Where a bucket sealbench creates lives (``EU``, ``europe-west4``, ...): required to
    #: create one, since Google's default is the US multi-region, a data-residency question
    #: each owner answers for itself.
    bucket_location: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{2,40}$")
    pool: str = Field(default="sealbench", pattern=r"^[a-z0-9-]{4,32}$")
    provider: str = Field(default="attestation", pattern=r"^[a-z0-9-]{4,32}$")
    impersonate_service_account: str | None = Field(
        default=None, pattern=r"^[a-z0-9-]+@[a-z0-9-]+\.iam\.gserviceaccount\.com$"
    )
    zone: str | None = Field(default=None, pattern=r"^[a-z]+-[a-z]+[0-9]-[a-z]$")
    service_account: str | None = Field(
        default=None, pattern=r"^[a-z0-9-]+@[a-z0-9.-]+\.gserviceaccount\.com$"
    )
    #: Endpoint overrides, ``{API name: URL}`` (:data:`API_ENDPOINT_NAMES`): private or
    #: regional endpoints, or a test stand-in. Overriding ``sts``, ``kms`` or ``storage`` makes
    #: the key-release policy pin them; ``attestation`` replaces Google's attestation verifier
    #: as the issuer the pool trusts.
    api_endpoints: dict[str, str] = Field(default_factory=dict, max_length=16)
    #: The machine type doctor checks the CPU quota for (what ``run`` starts by default).
    machine_type: str = Field(default="n2d-standard-2", pattern=r"^[a-z0-9]+-[a-z]+-[0-9]+$")

    @field_validator("api_endpoints")
    @classmethod
    def _known_endpoints(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if name not in API_ENDPOINT_NAMES:
                raise ValueError(
                    f"unknown API {name[:40]!r}; known: {', '.join(API_ENDPOINT_NAMES)}"
                )
            if not _ENDPOINT.match(url):
                raise ValueError(
                    f"{name}: {url[:80]!r} is not an https URL (or http on 127.0.0.1)"
                )
        return value


class CsLaunchOptions(BaseModel):
    """What a command's ``--tee confidential-space`` flags say of the VM it starts (``run``,
    ``benchmark pool``), the platform's declared launch options: each None or False unless
    given, the account's :class:`~sealbench.platforms.account.LaunchDefaults` and the
    benchmark's image filling the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str | None = None
    zone: str | None = None
    service_account: str | None = None
    #: ``REPO@sha256:…`` of the image to run (default: the benchmark's).
    image_reference: str | None = None
    #: Intel TDX instead of AMD SEV (a confidential GPU is always TDX).
    tdx: bool = False
    #: keep the VM after the run (also when interrupted)
    keep_vm: bool = False
    #: the debug image family (every key refused)
    debug: bool = False
    compute_endpoint: str | None = None
    #: a confidential GPU (``nvidia-h100-80gb``)
    accelerator: str | None = None


def account_launcher(
    platform: LaunchPlatform,
    *,
    launch: CsLaunchOptions | None,
    defaults: LaunchDefaults,
    image_reference: Callable[[], str],
    check_image: Callable[[str, bool], None],
    debug: bool,
    credentials: Any,
    result_store: Any,
) -> Launcher:
    """A Confidential Space VM from a command's ``launch`` options, the account's ``defaults``
    filling what they leave out (project, zone, service account, Compute endpoint, poll
    interval) and ``image_reference()`` the image when they name none; ``check_image(reference,
    gpu)`` refuses an image of the wrong variant before a VM starts.
    :class:`LaunchSettingsError` naming the options still missing."""
    from sealbench.gcp.launcher import build_launcher

    options = launch or CsLaunchOptions()
    reference = options.image_reference or image_reference()
    check_image(reference, options.accelerator is not None)
    project = options.project or defaults.project
    zone = options.zone or defaults.zone
    service_account = options.service_account or defaults.service_account
    missing = [name for name, value in (("--project", project), ("--zone", zone),
                                        ("--service-account", service_account)) if not value]
    if missing or not (project and zone and service_account):
        raise LaunchSettingsError(
            f"--tee confidential-space needs {', '.join(missing)}",
            hint="name your Google Cloud project, zone and the VM's service account "
            "(docs/gcp-setup.md)",
        )
    return build_launcher(
        platform,
        project=project,
        zone=zone,
        service_account=service_account,
        image_reference=reference,
        tee="TDX" if options.tdx or options.accelerator else "SEV",  # confidential GPUs: TDX
        debug=debug or options.debug,
        keep_vm=options.keep_vm,
        accelerator=options.accelerator,
        credentials=credentials,
        api_endpoint=options.compute_endpoint or defaults.api_endpoint,
        result_store=result_store,
        poll_interval=defaults.poll_interval_s,
    )


def _owner_cloud(settings: GcpSettings, **changes: Any) -> OwnerCloud:
    from sealbench.gcp.owner_cloud import gcp_owner_cloud

    options: dict[str, Any] = {
        "project": settings.project,
        "project_number": settings.project_number,
        "impersonate_service_account": settings.impersonate_service_account,
        "location": settings.location,
        "key_ring": settings.key_ring,
        "key": settings.key,
        "bucket": settings.bucket,
        "bucket_location": settings.bucket_location,
        "pool": settings.pool,
        "provider": settings.provider,
        "api_endpoints": settings.api_endpoints,
    } | changes
    return gcp_owner_cloud(**options)


def account_owner_cloud(settings: GcpSettings, *, email: Callable[[], str]) -> OwnerCloud:
    """The production owner cloud the settings name; the owner's Application Default
    Credentials are looked up when a call first needs them (``email`` is not asked). Endpoint
    overrides replace Google's endpoints and, for ``attestation``, ``sts``, ``kms`` and
    ``storage``, what the key-release policy pins; a replaced verifier is logged."""
    if "attestation" in settings.api_endpoints:
        _log.warning("this profile trusts attestation tokens from %s instead of Google's "
                     "Confidential Space verifier", settings.api_endpoints["attestation"])
    return _owner_cloud(settings)


def account_routes(settings: GcpSettings, google: VerifierKeys) -> AccountRoutes:
    """Runs of a Google Cloud account: Google's token destinations unless the settings
    override them (then exactly what its policies pin), results in ``results/`` of its bucket,
    attested by ``google`` (Google's verifier) or the ``attestation`` override."""
    cloud = _owner_cloud(settings)
    override = settings.api_endpoints.get("attestation")
    if override is None or override.rstrip("/") == google.issuer:
        verifier, label = google, "Google's Confidential Space verifier"
        hint = ("check this machine reaches www.googleapis.com, or pass --unverified to open "
                "the result without checking its signature")
    else:
        verifier = VerifierKeys(override.rstrip("/"))
        label = "the attestation verifier your profile names"
        hint = (f"check the attestation endpoint {override} answers, or pass --unverified to "
                "open the result without checking its signature")
    return AccountRoutes(cloud.pinned_endpoints, cloud.result_prefix, verifier, label, hint)


def launch_defaults(settings: GcpSettings) -> LaunchDefaults:
    """The VMs of a Google Cloud account: in its project, in the zone, as the service account
    and of the machine type it names, started at its ``compute`` endpoint override."""
    return LaunchDefaults(
        project=settings.project, zone=settings.zone, service_account=settings.service_account,
        machine_type=settings.machine_type, api_endpoint=settings.api_endpoints.get("compute"),
    )


def account_rows(settings: GcpSettings) -> dict[str, str]:
    """What a Google Cloud account touches (no credentials needed)."""
    cloud = _owner_cloud(settings)
    rows = {"cloud": f"Google Cloud project {settings.project} ({settings.project_number})"}
    rows.update(cloud.names())
    rows["attestation issuer"] = cloud.issuer_uri
    rows["credentials"] = (
        f"ADC impersonating {settings.impersonate_service_account}"
        if settings.impersonate_service_account else "Application Default Credentials"
    )
    rows["VM zone"] = settings.zone or "(pass --zone)"
    rows["VM service account"] = settings.service_account or "(pass --service-account)"
    rows["VM machine type"] = settings.machine_type
    for api, url in sorted(settings.api_endpoints.items()):
        rows[f"{api} endpoint"] = url
    return rows


def complete_account(settings: GcpSettings) -> GcpSettings:
    """The settings with the project number asked of Resource Manager (with the credentials
    the profile will use, its endpoint overrides honoured) when it is :data:`UNKNOWN_NUMBER`."""
    if settings.project_number != UNKNOWN_NUMBER:
        return settings
    number = _owner_cloud(settings, project_number=None).project_number
    return settings.model_copy(update={"project_number": number})
