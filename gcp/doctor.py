"""``sealbench doctor``'s checks of an owner's Google Cloud project (what
:meth:`GcpOwnerCloud.doctor_checks <sealbench.gcp.owner_cloud.GcpOwnerCloud.doctor_checks>`
returns; the client's :mod:`sealbench.client.assets.doctor` adds the platform-neutral ones and
renders them): read-only checks of what an owner's runs need in its cloud, each with the ``gcloud``
command that fixes a failure. :func:`check_owner_cloud` returns one
:class:`~sealbench.platforms.owner_cloud.Check` per item and never changes anything (the KMS
probe encrypts a constant, which writes nothing); :mod:`sealbench.gcp._doctor_probe` holds the
one step that does (``doctor --probe-condition``).

Checked, on Google Cloud and on the mock alike (the same client code, only the endpoints and
credentials differ): credentials (present, and whose); the APIs the owner's role needs are
enabled (Service Usage ``services.get``: :data:`OWNER_APIS` for every owner, and
:data:`RUNNER_APIS` too for one that runs workloads, a profile with runner settings); the KMS
key (exists, its primary version is enabled, the caller can encrypt with it); the bucket
(exists, has uniform bucket-level access, without which Google refuses every federated workload
on it, and the caller can create objects in it); the workload identity pool provider (exists,
not soft-deleted, not disabled: ``policy sync`` writes it); the organisation policies in effect
on the project that bear on sealbench (:mod:`sealbench.gcp._doctor_org`). A refusal by a VPC
Service Controls perimeter is reported as such wherever a check meets one. For a runner: its
service account (exists, holds :data:`RUNNER_ROLES` on the project, read from the version-3
policy with conditional and group bindings reported as such: :mod:`sealbench.gcp._doctor_iam`);
the CPU quota for the VMs' machine type in their region, or for GPU runs the regional GPU quota,
``GPUS_ALL_REGIONS`` and the zone (:mod:`sealbench.gcp._doctor_compute`); given a benchmark, its
read access to the image's Artifact Registry repository.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sealbench.gcp._doctor_base import (
    Check,
    ProbeRefused,
    RunnerSettings,
    enable_command,
    http_get,
    run_check,
)
from sealbench.gcp._doctor_compute import gpu_quota_metrics, quota_checks
from sealbench.gcp._doctor_iam import image_access_check, runner_account_check
from sealbench.gcp._doctor_org import org_policy_check, uniform_access_command
from sealbench.gcp.failures import bucket_create_command

if TYPE_CHECKING:
    from sealbench.gcp.owner_cloud import GcpOwnerCloud

__all__ = [
    "OWNER_APIS",
    "REQUIRED_APIS",
    "RUNNER_APIS",
    "RUNNER_ROLES",
    "Check",
    "RunnerSettings",
    "check_owner_cloud",
    "enable_command",
    "gpu_quota_metrics",
    "required_apis",
]

_PROBE = b"sealbench doctor probe"

#: The APIs every owner's project needs: sealing, key release, policies.
OWNER_APIS: Final = (
    "cloudkms.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "sts.googleapis.com",
)
#: The APIs an owner that runs workloads (a hospital) needs besides: its Confidential Space VMs.
RUNNER_APIS: Final = ("compute.googleapis.com", "confidentialcomputing.googleapis.com")
#: Every API a runner's project needs.
REQUIRED_APIS: Final = (*OWNER_APIS, *RUNNER_APIS)
#: The project roles the service account of the owner's VMs needs (Confidential Space:
#: attestation tokens, and the container's log redirect).
RUNNER_ROLES: Final = ("roles/confidentialcomputing.workloadUser", "roles/logging.logWriter")


def required_apis(runs_workloads: bool) -> tuple[str, ...]:
    """The APIs doctor asks for: a model owner never starts a VM, so it is not asked for
    Compute and Confidential Computing."""
    return REQUIRED_APIS if runs_workloads else OWNER_APIS


def check_owner_cloud(
    cloud: GcpOwnerCloud,
    runner: RunnerSettings | None = None,
    image_reference: str | None = None,
) -> list[Check]:
    """Every check for ``cloud`` (``runner``'s account and quota, and its read access to
    ``image_reference``, when given). When the credentials do not work, that check is the only
    one."""
    from google.auth.transport.requests import AuthorizedSession, Request

    from sealbench.gcp.gcs import make_storage_client
    from sealbench.gcp.kms import make_kms_client

    project, key = cloud.project_id, cloud.key_name
    checks: list[Check] = []

    def credentials() -> str:
        creds = cloud.credentials()
        if not creds.valid:
            creds.refresh(Request())  # type: ignore[no-untyped-call]
        who = getattr(creds, "service_account_email", None)
        return f"valid ({who})" if who and who != "default" else "valid (your own account)"

    checks.append(run_check("credentials", credentials,
                            "gcloud auth application-default login", project))
    if not checks[-1].ok:
        return checks
    session = AuthorizedSession(cloud.credentials())  # type: ignore[no-untyped-call]

    wanted = required_apis(runner is not None)

    def apis() -> str:
        disabled = []
        for service in wanted:
            found = http_get(session, f"{cloud.apis.serviceusage}/v1/projects/{project}/"
                             f"services/{service}", "service")
            if found.get("state") != "ENABLED":
                disabled.append(service)
        if disabled:
            raise ProbeRefused(
                f"disabled in project {project}: {', '.join(disabled)}",
                enable_command(" ".join(disabled), project),
            )
        role = "runner" if runner is not None else "no runner: Compute not needed"
        return f"{len(wanted)} enabled ({', '.join(s.split('.')[0] for s in wanted)}; {role})"

    checks.append(run_check(
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
    checks.append(run_check(
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
        if not found.iam_configuration.uniform_bucket_level_access_enabled:
            raise ProbeRefused(
                f"gs://{cloud.bucket} has fine-grained access control (no uniform bucket-level "
                "access): Google refuses every workload identity federation principal on it, "
                "so each run's reads and writes would be refused whatever policy sync grants",
                uniform_access_command(cloud.bucket))
        allowed = found.test_iam_permissions(["storage.objects.create"])
        if "storage.objects.create" not in allowed:
            raise ProbeRefused(f"cannot create objects in gs://{cloud.bucket}")
        prevention = found.iam_configuration.public_access_prevention or "inherited"
        return (f"gs://{cloud.bucket}, uniform bucket-level access, public access prevention "
                f"{prevention}, object creation allowed")

    checks.append(run_check(
        "bucket", bucket,
        bucket_create_command(cloud.bucket, project, cloud.bucket_location or "LOCATION"),
        project,
        f"a project owner grants you the bucket: gcloud storage buckets add-iam-policy-binding "
        f"gs://{cloud.bucket} --member=user:YOUR_EMAIL --role=roles/storage.objectAdmin",
    ))

    def provider() -> str:
        name = cloud.pool_provider_name()
        found = http_get(session, f"{cloud.apis.iam}/v1/{name}", "pool provider")
        pool, provider_id = name.split("/workloadIdentityPools/", 1)[1].split("/providers/")
        if found.get("state") == "DELETED":  # soft-deleted: kept 30 days, federates nothing
            raise ProbeRefused(
                f"{name} is DELETED: no workload federates through it",
                f"gcloud iam workload-identity-pools providers undelete {provider_id} "
                f"--workload-identity-pool={pool} --location=global --project={project}, "
                "then sealbench policy sync")
        if found.get("disabled"):
            raise ProbeRefused(
                f"{name} is disabled: no workload federates through it",
                f"gcloud iam workload-identity-pools providers update-oidc {provider_id} "
                f"--workload-identity-pool={pool} --location=global --project={project} "
                "--no-disabled")
        issuer = found.get("oidc", {}).get("issuerUri", "?")
        return f"{name} (trusts {issuer})"

    checks.append(run_check(
        "pool provider", provider,
        "sealbench policy sync --dataset D (or --model M) creates the pool and provider",
        project,
        f"a project owner lets you manage pools: gcloud projects add-iam-policy-binding "
        f"{project} --member=user:YOUR_EMAIL --role=roles/iam.workloadIdentityPoolAdmin",
    ))
    checks.append(org_policy_check(cloud, session))
    if runner is not None:
        checks.append(runner_account_check(cloud, session, runner, RUNNER_ROLES))
        checks.extend(quota_checks(cloud, runner))
        if image_reference is not None:
            checks.append(image_access_check(cloud, session, runner, image_reference))
    return checks
