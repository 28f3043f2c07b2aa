"""Set up an asset owner in a running mock cloud the way an owner sets up Google Cloud by hand
(``gcloud projects create``, ``gcloud services enable``, ``gcloud kms keyrings/keys create``,
``gcloud storage buckets create``): a project with the owner, the APIs a sealbench owner uses
enabled through Service Usage (a new project, as at Google, has them off), a KMS key ring and
``ENCRYPT_DECRYPT`` key, a bucket, and an owner access token. Everything goes through the
mock's public REST endpoints (and its INSECURE control endpoint for the project and the
token), so tests, ``sealbench demo`` and the CLI's ``mock-tee up`` share one path; with it comes
the service account the owner's VMs run as (``sealbench-runner@PROJECT``) and its project
roles. The workload identity pool, provider and IAM bindings are not made here: that is the
policy writer's job (:mod:`sealbench.gcp.policy_writer`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from sealbench.mocktee.server import MockEndpoints

__all__ = [
    "OWNER_SERVICES",
    "PROVISION_TIMEOUT_S",
    "RUNNER_ACCOUNT_ID",
    "RUNNER_ROLES",
    "OwnerSetup",
    "ProvisionError",
    "enable_services",
    "provision_owner",
]

#: The account id of the service account an owner's Confidential Space VMs run as.
RUNNER_ACCOUNT_ID = "sealbench-runner"
#: The project roles that account needs (the same list ``sealbench doctor`` checks).
RUNNER_ROLES = ("roles/confidentialcomputing.workloadUser", "roles/logging.logWriter")

#: The APIs an owner enables for sealbench (``gcloud services enable ...``): KMS, IAM and the
#: STS for keys, pools and grants, Resource Manager for the project policy, Compute Engine and
#: Confidential Computing for the VMs a data owner runs. Cloud Storage and Service Usage are on
#: in a new project already.
OWNER_SERVICES = (
    "cloudkms.googleapis.com",
    "iam.googleapis.com",
    "sts.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "compute.googleapis.com",
    "confidentialcomputing.googleapis.com",
    "artifactregistry.googleapis.com",  # where an authority keeps its evaluation images
)

#: Seconds allowed for each provisioning request.
PROVISION_TIMEOUT_S = 30.0


class ProvisionError(Exception):
    """A provisioning request to the mock failed."""


@dataclass(frozen=True)
class OwnerSetup:
    """What an owner has in the mock after :func:`provision_owner`. ``access_token`` is an
    owner credential: keep it out of logs."""

    principal: str
    project_id: str
    project_number: str
    key_name: str
    bucket: str
    access_token: str

    def __repr__(self) -> str:
        return f"OwnerSetup(principal={self.principal!r}, key_name={self.key_name!r})"


def _call(method: str, url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    if not url.startswith("http://127.0.0.1:"):
        raise ProvisionError("the mock only listens on 127.0.0.1")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(  # noqa: S310 - loopback http URL checked above
        url, data=json.dumps(body).encode(), headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=PROVISION_TIMEOUT_S) as response:  # noqa: S310
            result: dict[str, Any] = json.loads(response.read(1 << 20) or b"{}")
            return result
    except urllib.error.HTTPError as exc:
        detail = exc.read(4096).decode("utf-8", "replace")
        raise ProvisionError(f"{method} {url.split('?')[0]}: HTTP {exc.code}: {detail}") from exc
    except OSError as exc:
        raise ProvisionError(f"{method} {url.split('?')[0]}: {exc}") from exc


def provision_owner(
    endpoints: MockEndpoints,
    *,
    email: str,
    project_id: str,
    project_number: str,
    key_ring: str = "sealbench",
    key: str = "assets",
    bucket: str | None = None,
    services: tuple[str, ...] = OWNER_SERVICES,
) -> OwnerSetup:
    """Create (or reuse) the owner's project, enable ``services`` in it, create its key ring,
    key and bucket; return an owner token."""
    principal = f"user:{email}"
    _call(
        "POST",
        f"{endpoints.control}/mock/v1/projects",
        {"projectId": project_id, "projectNumber": project_number, "owner": principal},
    )
    token = str(
        _call("POST", f"{endpoints.control}/mock/v1/ownerTokens", {"principal": principal})[
            "access_token"
        ]
    )
    enable_services(endpoints, project_id, token, services)
    parent = f"projects/{project_id}/locations/global"
    ring_name = f"{parent}/keyRings/{key_ring}"
    key_name = f"{ring_name}/cryptoKeys/{key}"
    bucket = bucket or f"{project_id}-assets"
    for method, url, body in (
        ("POST", f"{endpoints.kms}/v1/{parent}/keyRings?keyRingId={key_ring}", {}),
        (
            "POST",
            f"{endpoints.kms}/v1/{ring_name}/cryptoKeys?cryptoKeyId={key}",
            {"purpose": "ENCRYPT_DECRYPT"},
        ),
        ("POST", f"{endpoints.storage}/storage/v1/b?project={project_id}", {
            "name": bucket,
            # as sealbench creates buckets: Google lets federated workloads into a bucket only
            # with uniform bucket-level access (and secure-by-default organisations demand it)
            "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True},
                                 "publicAccessPrevention": "enforced"}}),
    ):
        try:
            _call(method, url, body, token)
        except ProvisionError as exc:
            if "HTTP 409" not in str(exc):  # already exists: provisioning is idempotent
                raise
    if endpoints.apis is not None:
        _runner_account(endpoints, project_id, token)
    return OwnerSetup(principal, project_id, project_number, key_name, bucket, token)


def enable_services(
    endpoints: MockEndpoints,
    project_id: str,
    token: str,
    services: tuple[str, ...] = OWNER_SERVICES,
) -> None:
    """Enable ``services`` in the project through Service Usage's ``services:batchEnable``, as
    ``gcloud services enable`` does (``token``: a project owner's). A mock whose
    ``endpoints.json`` predates the Service Usage API had every API on: nothing to do there."""
    if endpoints.apis is None or not services:
        return
    _call("POST", f"{endpoints.apis}/v1/projects/{project_id}/services:batchEnable",
          {"serviceIds": list(services)}, token)


def _runner_account(endpoints: MockEndpoints, project_id: str, token: str) -> None:
    """The service account the owner's Confidential Space VMs run as, with the project roles a
    run needs (``gcloud iam service-accounts create`` + ``gcloud projects
    add-iam-policy-binding``)."""
    try:
        _call("POST", f"{endpoints.iam}/v1/projects/{project_id}/serviceAccounts",
              {"accountId": RUNNER_ACCOUNT_ID}, token)
    except ProvisionError as exc:
        if "HTTP 409" not in str(exc):
            raise
    member = f"serviceAccount:{RUNNER_ACCOUNT_ID}@{project_id}.iam.gserviceaccount.com"
    policy = _call("POST", f"{endpoints.apis}/v1/projects/{project_id}:getIamPolicy", {}, token)
    bindings = [b for b in policy.get("bindings", []) if b.get("role") != "roles/owner"]
    held = {b["role"] for b in bindings if member in b.get("members", [])}
    if held >= set(RUNNER_ROLES):
        return
    bindings += [{"role": role, "members": [member]} for role in RUNNER_ROLES if role not in held]
    _call("POST", f"{endpoints.apis}/v1/projects/{project_id}:setIamPolicy",
          {"policy": {"bindings": bindings, "etag": policy.get("etag")}}, token)
