"""``sealbench doctor``: read-only checks of what an owner's runs need in its cloud, each with the
``gcloud`` command that fixes a failure. The library behind the command:
:func:`check_owner_cloud` returns one :class:`Check` per item and never changes anything (the
KMS probe encrypts a constant, which writes nothing).

Checked, on Google Cloud and on the mock alike (the same client code, only the endpoints and
credentials differ): credentials (present, and whose); the APIs a run needs are enabled (Service
Usage ``services.get``); the KMS key (exists, its primary version is enabled, the caller can
encrypt with it); the bucket (exists, the caller can create objects in it); the workload
identity pool provider (exists: ``policy sync`` writes it); the runner service account (exists,
holds :data:`RUNNER_ROLES` on the project); the CPU quota for the VMs' machine type in their
region (Compute ``regions.get``); and, given a benchmark, that its image is named by digest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sealbench.client.cloud import GcpOwnerCloud, api_disabled
from sealbench.client.errors import ClientError

if TYPE_CHECKING:
    from sealbench.server.schemas import BenchmarkPublic

__all__ = [
    "REQUIRED_APIS",
    "RUNNER_ROLES",
    "Check",
    "RunnerSettings",
    "check_owner_cloud",
    "enable_command",
]

_PROBE = b"sealbench doctor probe"
_TIMEOUT_S: Final = 30.0

#: The APIs an owner's project needs for sealing, policies and Confidential Space runs.
REQUIRED_APIS: Final = (
    "cloudkms.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "sts.googleapis.com",
    "compute.googleapis.com",
    "confidentialcomputing.googleapis.com",
)
#: The project roles the service account of the owner's VMs needs (Confidential Space:
#: attestation tokens, and the container's log redirect).
RUNNER_ROLES: Final = ("roles/confidentialcomputing.workloadUser", "roles/logging.logWriter")
_MACHINE = re.compile(r"^(?P<family>[a-z0-9]+)-[a-z]+-(?P<cpus>[0-9]+)$")


class ProbeRefused(ClientError):  # noqa: N818 - reads as what happened
    """A check found the resource but not what a run needs; ``fix`` overrides the check's."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Check:
    """One item: ``ok``, what was found, and (when not ok) the command that fixes it."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class RunnerSettings:
    """Where the owner's Confidential Space VMs run: zone, service account, machine type."""

    zone: str | None
    service_account: str | None
    machine_type: str = "n2d-standard-2"
    #: A confidential GPU (``--accelerator``), ``gpus`` of them: checked against the GPU quota.
    accelerator: str | None = None
    gpus: int = 0


def gpu_quota_metrics(accelerator: str) -> tuple[str, str]:
    """The Compute quota metrics a Spot VM with ``accelerator`` draws on, preferred first:
    ``PREEMPTIBLE_NVIDIA_H100_GPUS`` (Spot capacity, where the project has that quota), then
    ``NVIDIA_H100_GPUS``."""
    vendor, model = accelerator.split("-")[:2]
    metric = f"{vendor.upper()}_{model.upper()}_GPUS"
    return f"PREEMPTIBLE_{metric}", metric


def enable_command(service: str, project: str) -> str:
    return f"gcloud services enable {service} --project {project}"


def _run(
    name: str, probe: Callable[[], str], fix: str, project: str, denied: str | None = None
) -> Check:
    """``probe`` as a check: its failure with ``fix`` (``denied`` when the caller was refused,
    the enabling command when an API is disabled)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    from sealbench.cloud.errors import CloudError

    try:
        return Check(name, True, probe())
    except ProbeRefused as exc:
        return Check(name, False, str(exc), exc.fix or fix)
    except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, CloudError, ClientError) as exc:
        service = api_disabled(exc)
        if service is not None:
            return Check(name, False, f"the {service} API is disabled in project {project}",
                         enable_command(service, project))
        if isinstance(exc, gexc.NotFound):
            return Check(name, False, f"not found: {_reason(exc.message)}", fix)
        if isinstance(exc, gexc.Forbidden):
            return Check(name, False, f"permission denied: {_reason(exc.message)}",
                         denied or fix)
        return Check(name, False, f"{type(exc).__name__}: {str(exc)[:300]}", fix)


def _reason(message: object) -> str:
    """Google's error message without the ``METHOD URL:`` prefix the REST clients add."""
    return re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", str(message))[:300]


def _get(session: Any, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
    """GET (or POST with ``json=``) ``url`` through the authorized session; Google's error
    as a google-api-core exception (so ``_run`` reads it as it reads the client libraries')."""
    from google.api_core import exceptions as gexc

    method = session.post if "json" in kwargs else session.get
    reply = method(url, timeout=_TIMEOUT_S, **kwargs)
    if reply.status_code != 200:
        raise gexc.from_http_response(reply)  # type: ignore[no-untyped-call]
    answer: dict[str, Any] = reply.json()
    return answer


def check_owner_cloud(
    cloud: GcpOwnerCloud,
    benchmark: BenchmarkPublic | None = None,
    runner: RunnerSettings | None = None,
) -> list[Check]:
    """Every check for ``cloud`` (``runner``'s account and quota, and ``benchmark``'s image,
    when given)."""
    from google.auth.transport.requests import AuthorizedSession, Request

    from sealbench.cloud.gcs import make_storage_client
    from sealbench.cloud.kms import make_kms_client

    project, key = cloud.project_id, cloud.key_name
    checks: list[Check] = []

    def credentials() -> str:
        creds = cloud.credentials()
        if not creds.valid:
            creds.refresh(Request())  # type: ignore[no-untyped-call]
        who = getattr(creds, "service_account_email", None)
        return f"valid ({who})" if who and who != "default" else "valid (your own account)"

    checks.append(_run("credentials", credentials,
                       "gcloud auth application-default login", project))
    if not checks[-1].ok:
        return checks
    session = AuthorizedSession(cloud.credentials())  # type: ignore[no-untyped-call]

    def apis() -> str:
        disabled = []
        for service in REQUIRED_APIS:
            found = _get(session, f"{cloud.apis.serviceusage}/v1/projects/{project}/services/"
                         f"{service}", "service")
            if found.get("state") != "ENABLED":
                disabled.append(service)
        if disabled:
            raise ProbeRefused(
                f"disabled in project {project}: {', '.join(disabled)}",
                enable_command(" ".join(disabled), project),
            )
        return f"{len(REQUIRED_APIS)} enabled ({', '.join(s.split('.')[0] for s in REQUIRED_APIS)})"

    checks.append(_run(
        "APIs enabled", apis, enable_command("serviceusage.googleapis.com", project), project,
        f"a project owner lets you read its services: gcloud projects add-iam-policy-binding "
        f"{project} --member=user:YOUR_EMAIL --role=roles/serviceusage.serviceUsageViewer",
    ))

    def kms_key() -> str:
        client = make_kms_client(cloud.credentials(), cloud.apis.kms)
        found = client.get_crypto_key(request={"name": key})
        state = found.primary.state.name if found.primary else "MISSING"
        if state != "ENABLED":
            raise ProbeRefused(
                f"{key}: its primary version is {state}; what was sealed with it cannot be "
                "opened any more",
                f"gcloud kms keys versions create --key {cloud.key} --keyring {cloud.key_ring} "
                f"--location {cloud.location} --project {project} --primary, then seal your "
                "assets again",
            )
        client.encrypt(request={"name": key, "plaintext": _PROBE})
        return f"{key} ({found.purpose.name}), encrypt allowed"

    ring = key.rsplit("/cryptoKeys/", 1)[0]
    checks.append(_run(
        "KMS key", kms_key,
        f"gcloud kms keyrings create {cloud.key_ring} --location {cloud.location} "
        f"--project {project}; gcloud kms keys create {cloud.key} --keyring {cloud.key_ring} "
        f"--location {cloud.location} --purpose encryption --project {project} "
        f"(or grant roles/cloudkms.cryptoKeyEncrypter on {ring})",
        project,
        f"a project owner grants you the key: gcloud kms keys add-iam-policy-binding {key} "
        "--member=user:YOUR_EMAIL --role=roles/cloudkms.cryptoKeyEncrypterDecrypter",
    ))

    def bucket() -> str:
        client = make_storage_client(project, cloud.credentials(), cloud.apis.storage)
        found = client.get_bucket(cloud.bucket)
        allowed = found.test_iam_permissions(["storage.objects.create"])
        if "storage.objects.create" not in allowed:
            raise ProbeRefused(f"cannot create objects in gs://{cloud.bucket}")
        return f"gs://{cloud.bucket}, object creation allowed"

    checks.append(_run(
        "bucket", bucket,
        f"gcloud storage buckets create gs://{cloud.bucket} --project {project}",
        project,
        f"a project owner grants you the bucket: gcloud storage buckets add-iam-policy-binding "
        f"gs://{cloud.bucket} --member=user:YOUR_EMAIL --role=roles/storage.objectAdmin",
    ))

    def provider() -> str:
        name = cloud.pool_provider_name()
        found = _get(session, f"{cloud.apis.iam}/v1/{name}", "pool provider")
        issuer = found.get("oidc", {}).get("issuerUri", "?")
        return f"{name} (trusts {issuer})"

    checks.append(_run(
        "pool provider", provider,
        "sealbench policy sync --dataset D (or --model M) creates the pool and provider",
        project,
        f"a project owner lets you manage pools: gcloud projects add-iam-policy-binding "
        f"{project} --member=user:YOUR_EMAIL --role=roles/iam.workloadIdentityPoolAdmin",
    ))
    if runner is not None:
        checks.append(_runner_account(cloud, session, runner))
        checks.append(_quota(cloud, runner))
    if benchmark is not None:
        digest_named = "@sha256:" in benchmark.image_reference
        checks.append(Check(
            "image reference", digest_named, benchmark.image_reference,
            None if digest_named else "the authority pins the image by digest: "
            "'sealbench benchmark create --image-reference REPO@sha256:… --image-digest …'",
        ))
    return checks


def _runner_account(cloud: GcpOwnerCloud, session: Any, runner: RunnerSettings) -> Check:
    project, email = cloud.project_id, runner.service_account
    if not email:
        return Check("runner service account", False, "none configured",
                     "sealbench profile add NAME ... --service-account "
                     f"sealbench-runner@{project}.iam.gserviceaccount.com")
    account_id = email.split("@", 1)[0]

    def probe() -> str:
        _get(session, f"{cloud.apis.iam}/v1/projects/{project}/serviceAccounts/{email}",
             "service account")
        policy = _get(session, f"{cloud.apis.cloudresourcemanager}/v1/projects/{project}"
                      ":getIamPolicy", "project policy", json={})
        member = f"serviceAccount:{email}"
        held = {b.get("role") for b in policy.get("bindings", [])
                if member in b.get("members", []) and "condition" not in b}
        missing = [role for role in RUNNER_ROLES if role not in held]
        if missing:
            raise ProbeRefused(
                f"{email} lacks {', '.join(missing)} on project {project}",
                "; ".join(f"gcloud projects add-iam-policy-binding {project} --member={member} "
                          f"--role={role}" for role in missing),
            )
        return f"{email} ({', '.join(RUNNER_ROLES)})"

    return _run(
        "runner service account", probe,
        f"gcloud iam service-accounts create {account_id} --project {project}; then "
        + "; ".join(f"gcloud projects add-iam-policy-binding {project} "
                    f"--member=serviceAccount:{email} --role={role}" for role in RUNNER_ROLES),
        project,
        f"a project owner lets you see accounts and roles: gcloud projects "
        f"add-iam-policy-binding {project} --member=user:YOUR_EMAIL "
        "--role=roles/iam.securityReviewer",
    )


def _gpu_quota(cloud: GcpOwnerCloud, runner: RunnerSettings, accelerator: str) -> Check:
    project, zone = cloud.project_id, runner.zone
    if not zone:
        return Check("GPU quota", False, "no zone configured",
                     "sealbench profile add NAME ... --zone ZONE (a zone with H100s)")
    region = zone.rsplit("-", 1)[0]
    metrics = gpu_quota_metrics(accelerator)

    def probe() -> str:
        quotas = {q.metric: q for q in _region(cloud, region).quotas}
        present = [m for m in metrics if m in quotas]
        if not present:
            raise ProbeRefused(f"no {' or '.join(metrics)} quota in {region}")
        for metric in present:
            quota = quotas[metric]
            free = quota.limit - quota.usage
            if free >= runner.gpus:
                return f"{metric} in {region}: {free:g} of {quota.limit:g} free"
        found = "; ".join(f"{m} {quotas[m].limit - quotas[m].usage:g} of "
                                f"{quotas[m].limit:g} free" for m in present)
        raise ProbeRefused(f"{found} in {region}; {runner.machine_type} with "
                           f"{accelerator} needs {runner.gpus}")

    return _run(
        "GPU quota", probe,
        f"request {metrics[0]} in {region}: gcloud beta quotas preferences create "
        f"--service=compute.googleapis.com --quota-id={metrics[0].replace('_', '-')}"
        f"-per-project-region --dimensions=region={region} --preferred-value={runner.gpus} "
        f"--project={project} (or IAM & Admin → Quotas), or try a zone with H100 capacity",
        project,
        f"a project owner lets you read quotas: gcloud projects add-iam-policy-binding "
        f"{project} --member=user:YOUR_EMAIL --role=roles/compute.viewer",
    )


def _region(cloud: GcpOwnerCloud, region: str) -> Any:
    """Compute's ``regions.get`` for ``region`` of the owner's project (its quotas)."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import compute_v1

    client = compute_v1.RegionsClient(
        credentials=cloud.credentials(), transport="rest",
        client_options=ClientOptions(api_endpoint=cloud.apis.compute),
    )
    return client.get(project=cloud.project_id, region=region, timeout=_TIMEOUT_S)


def _quota(cloud: GcpOwnerCloud, runner: RunnerSettings) -> Check:
    if runner.accelerator is not None:
        return _gpu_quota(cloud, runner, runner.accelerator)
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
        found = _region(cloud, region)
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

    return _run(
        "CPU quota", probe,
        f"request more {metric} in {region}: gcloud beta quotas preferences create "
        f"--service=compute.googleapis.com --quota-id={metric.replace('_', '-')}"
        f"-per-project-region --dimensions=region={region} --preferred-value=N "
        f"--project={project} (or IAM & Admin → Quotas), or delete idle VMs",
        project,
        f"a project owner lets you read quotas: gcloud projects add-iam-policy-binding "
        f"{project} --member=user:YOUR_EMAIL --role=roles/compute.viewer",
    )
