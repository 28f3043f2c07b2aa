"""``sealbench doctor`` against the mock's Google-compatible APIs (issue 29, items 4 and 7): per
role (a model owner is not asked for Compute), the project-wide GPU quota and the zone of a
confidential GPU run, roles held through a group (reported, not counted as certain), and the
runner's read access to the evaluation image's Artifact Registry repository."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from google.oauth2.credentials import Credentials

from sealbench.client.assets.doctor import Check, RunnerSettings, check_owner_cloud
from sealbench.gcp.doctor import OWNER_APIS, RUNNER_APIS
from sealbench.gcp.owner_cloud import GcpOwnerCloud, pool_provider_from_name
from sealbench.mocktee._compute_catalog import CONFIDENTIAL_GPU_ZONES
from sealbench.mocktee.owner_cloud import insecure_mock_platform, mock_apis
from sealbench.mocktee.server import MockCloud
from tests.integration.test_gcp_mock_apis import _post

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCloud]:
    with MockCloud(tmp_path_factory.mktemp("doctor") / "state") as cloud:
        yield cloud


class Owner:
    """A project in the mock with its owner's token and a GcpOwnerCloud on it."""

    def __init__(self, mock: MockCloud, project: str, number: str) -> None:
        ep = mock.endpoints
        self.mock, self.project = mock, project
        principal = f"user:owner@{project}.example"
        _post(f"{ep.control}/mock/v1/projects",
              {"projectId": project, "projectNumber": number, "owner": principal})
        self.token = str(_post(f"{ep.control}/mock/v1/ownerTokens",
                               {"principal": principal})["access_token"])
        self.cloud = GcpOwnerCloud(
            project_id=project, project_number=number,
            credentials_source=lambda: Credentials(self.token),  # type: ignore[no-untyped-call]
            platform=insecure_mock_platform(ep), apis=mock_apis(ep), bucket_location="EU",
        )
        self.runner = f"sealbench-runner@{project}.iam.gserviceaccount.com"

    def services(self, *names: str, enable: bool = True) -> None:
        """``gcloud services enable`` (or ``disable``) ``names``."""
        verb = "enable" if enable else "disable"
        for name in names:
            _post(f"{self.mock.endpoints.apis}/v1/projects/{self.project}/services/{name}:{verb}",
                  {}, self.token)

    def runner_account(self, bindings: list[dict[str, Any]]) -> None:
        """The runner's service account and these project bindings (as gcloud makes them)."""
        ep = self.mock.endpoints
        _post(f"{ep.iam}/v1/projects/{self.project}/serviceAccounts",
              {"accountId": "sealbench-runner"}, self.token)
        policy = _post(f"{ep.apis}/v1/projects/{self.project}:getIamPolicy", {}, self.token)
        policy["bindings"].extend(bindings)
        _post(f"{ep.apis}/v1/projects/{self.project}:setIamPolicy", {"policy": policy},
              self.token)

    def settings(self, zone: str = "us-central1-a", **gpu: Any) -> RunnerSettings:
        return RunnerSettings(zone, self.runner, **gpu)


def _checks(found: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in found}


_GPU = {"machine_type": "a3-highgpu-1g", "accelerator": "nvidia-h100-80gb", "gpus": 1}
_ROLES = ("roles/confidentialcomputing.workloadUser", "roles/logging.logWriter")


def test_a_model_owner_is_not_asked_for_compute_a_hospital_is(mock: MockCloud) -> None:
    owner = Owner(mock, "roles-gcp", "810000000001")
    owner.services(*OWNER_APIS, "cloudresourcemanager.googleapis.com")
    owner.services(*RUNNER_APIS, enable=False)
    model_owner = _checks(check_owner_cloud(owner.cloud))["APIs enabled"]
    assert model_owner.ok, model_owner
    assert "compute" not in model_owner.detail and "no runner" in model_owner.detail
    hospital = _checks(check_owner_cloud(owner.cloud, runner=owner.settings()))["APIs enabled"]
    assert not hospital.ok
    assert hospital.detail == ("disabled in project roles-gcp: compute.googleapis.com, "
                               "confidentialcomputing.googleapis.com")
    assert hospital.fix == ("gcloud services enable compute.googleapis.com "
                            "confidentialcomputing.googleapis.com --project roles-gcp")


def test_a_gpu_run_needs_gpus_in_all_regions_and_a_zone_with_confidential_h100s(
    mock: MockCloud,
) -> None:
    owner = Owner(mock, "gpu-gcp", "810000000002")
    owner.services(*OWNER_APIS, *RUNNER_APIS, "cloudresourcemanager.googleapis.com")
    found = _checks(check_owner_cloud(owner.cloud, runner=owner.settings(**_GPU)))
    assert found["GPU quota"].ok  # the regional H100 quota is there
    everywhere = found["GPU quota, all regions"]
    assert not everywhere.ok
    assert "GPUS_ALL_REGIONS: 0 of 0 free in project gpu-gcp, a run needs 1" in everywhere.detail
    assert "--quota-id=GPUS-ALL-REGIONS-per-project --preferred-value=1" in (everywhere.fix or "")
    assert found["GPU zone"].ok, found["GPU zone"]
    assert "us-central1-a has a3-highgpu-1g with nvidia-h100-80gb" in found["GPU zone"].detail

    mock.compute.set_quota("gpu-gcp", "GPUS_ALL_REGIONS", 1)  # the increase, granted
    elsewhere = _checks(check_owner_cloud(
        owner.cloud, runner=owner.settings("europe-west1-b", **_GPU)))
    assert elsewhere["GPU quota, all regions"].ok
    zone = elsewhere["GPU zone"]
    assert not zone.ok
    assert zone.detail.startswith("europe-west1-b is not in a region with confidential")
    assert f"zones there with it: {', '.join(sorted(CONFIDENTIAL_GPU_ZONES))}" in zone.detail
    assert "--zone us-central1-a" in (zone.fix or "")
    # a zone whose catalogue has the H100, but not in confidential mode (issue 44)
    plain = _checks(check_owner_cloud(
        owner.cloud, runner=owner.settings("europe-west4-c", **_GPU)))["GPU zone"]
    assert not plain.ok and plain.detail.startswith("europe-west4-c is not in a region with "
                                                    "confidential nvidia-h100-80gb GPUs")
    cpu = _checks(check_owner_cloud(owner.cloud, runner=owner.settings()))
    assert "GPU zone" not in cpu and "GPU quota, all regions" not in cpu and cpu["CPU quota"].ok


def test_roles_held_through_a_group_are_reported_and_not_counted_as_certain(
    mock: MockCloud,
) -> None:
    owner = Owner(mock, "group-gcp", "810000000003")
    owner.services(*OWNER_APIS, *RUNNER_APIS, "cloudresourcemanager.googleapis.com")
    owner.runner_account([
        {"role": _ROLES[0], "members": [f"serviceAccount:{owner.runner}"]},
        {"role": _ROLES[1], "members": ["group:runners@group-gcp.example"]},
    ])
    check = _checks(check_owner_cloud(owner.cloud, runner=owner.settings()))[
        "runner service account"]
    assert check.ok and not check.verified, check
    assert ("roles/logging.logWriter through group runners@group-gcp.example (membership not "
            "checked)") in check.detail
    assert (f"gcloud projects add-iam-policy-binding group-gcp --member=serviceAccount:"
            f"{owner.runner} --role=roles/logging.logWriter") in (check.fix or "")
    assert "workloadUser" not in (check.fix or "")
    # without the group binding the role is missing: a failure, with the same grant as its fix
    stranger = Owner(mock, "nogroup-gcp", "810000000004")
    stranger.services(*OWNER_APIS, *RUNNER_APIS, "cloudresourcemanager.googleapis.com")
    stranger.runner_account([{"role": _ROLES[0],
                              "members": [f"serviceAccount:{stranger.runner}"]}])
    missing = _checks(check_owner_cloud(stranger.cloud, runner=stranger.settings()))[
        "runner service account"]
    assert not missing.ok and "lacks roles/logging.logWriter" in missing.detail


def _benchmark(reference: str) -> Any:
    return cast(Any, SimpleNamespace(image_reference=reference))


def test_the_runners_read_access_to_the_image_repository(mock: MockCloud) -> None:
    owner = Owner(mock, "pull-gcp", "810000000005")
    owner.services(*OWNER_APIS, *RUNNER_APIS, "cloudresourcemanager.googleapis.com",
                   "artifactregistry.googleapis.com")
    owner.runner_account([{"role": r, "members": [f"serviceAccount:{owner.runner}"]}
                          for r in _ROLES])
    ar = mock.endpoints.compute
    repository = "projects/pull-gcp/locations/europe/repositories/mirror"
    _post(f"{ar}/v1/projects/pull-gcp/locations/europe/repositories?repositoryId=mirror",
          {"format": "DOCKER"}, owner.token)
    mirror = _benchmark(f"europe-docker.pkg.dev/pull-gcp/mirror/eval@{DIGEST}")

    def access(benchmark: Any) -> Check:
        return _checks(check_owner_cloud(owner.cloud, benchmark, owner.settings()))[
            "runner image access"]

    refused = access(mirror)
    assert not refused.ok
    assert refused.detail == (f"{repository} does not grant {owner.runner} read access: the "
                              "VM's launcher cannot pull the image")
    assert refused.fix == (
        "the image's owner grants it: gcloud artifacts repositories add-iam-policy-binding "
        f"mirror --location=europe --project=pull-gcp --member=serviceAccount:{owner.runner} "
        "--role=roles/artifactregistry.reader")
    _post(f"{ar}/v1/{repository}:setIamPolicy", {"policy": {"bindings": [
        {"role": "roles/artifactregistry.reader",
         "members": [f"serviceAccount:{owner.runner}"]}]}}, owner.token)
    granted = access(mirror)
    assert granted.ok and granted.verified, granted
    # the authority's repository: its policy is not the hospital's to read, so doctor says so
    mock.artifacts.grant(f"us-docker.pkg.dev/authority/sealbench/eval@{DIGEST}",
                         f"serviceAccount:{owner.runner}")
    theirs = access(_benchmark(f"us-docker.pkg.dev/authority/sealbench/eval@{DIGEST}"))
    assert theirs.ok and not theirs.verified
    assert "cannot read the IAM policy of projects/authority/locations/us/repositories/" \
           "sealbench" in theirs.detail
    assert "add-iam-policy-binding sealbench --location=us --project=authority" in (
        theirs.fix or "")
    other = access(_benchmark(f"ghcr.io/someone/eval@{DIGEST}"))
    assert other.ok and not other.verified and "not in Artifact Registry" in other.detail


def _synced_owner(mock: MockCloud, project: str, number: str) -> tuple[Owner, Any]:
    """An owner whose key, bucket, pool and provider policy sync wrote, and the policy."""
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.crypto.digest import sha256_digest
    from sealbench.gcp.policy import AssetPolicy

    owner = Owner(mock, project, number)
    owner.services(*OWNER_APIS, "cloudresourcemanager.googleapis.com")
    owner.cloud.ensure_key_and_bucket()
    coordinates = owner.cloud.default_coordinates("model", 9)
    workloads = frozenset(
        WorkloadIdentity(sha256_digest(b"image %d" % i), None, sha256_digest(b"model"),
                         sha256_digest(b"recipient %d" % i), str(i + 1), "brats-2023-gli/1")
        for i in range(3))
    owner.cloud.sync_policy(coordinates, workloads, include_data=False)
    policy = AssetPolicy(
        provider=pool_provider_from_name(coordinates.wip_provider),
        key_name=coordinates.kms_key_name,
        bucket=f"{project}-sealbench", workloads=workloads, include_data=False,
        issuer_uri=owner.cloud.platform.issuer_uri, endpoints=owner.cloud.platform.endpoints)
    return owner, policy


def _provider(mock: MockCloud, owner: Owner, name: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{mock.endpoints.iam}/v1/{name}",
                                     headers={"Authorization": f"Bearer {owner.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        found: dict[str, Any] = json.loads(response.read())
        return found


def test_probe_condition_creates_the_real_provider_once_and_deletes_it(mock: MockCloud) -> None:
    """``doctor --probe-condition`` (issue 29, item 5): the provider body policy sync writes is
    created under a new id, read back and deleted; a second probe takes another id (a deleted
    id cannot be reused for 30 days)."""
    from sealbench.gcp._doctor_probe import probe_provider
    from sealbench.gcp.policy import provider_body

    owner, policy = _synced_owner(mock, "probe-gcp", "810000000006")
    body = provider_body(policy)
    ids = iter(["sbprobe-first-0001", "sbprobe-second-0002"])
    first = probe_provider(owner.cloud, policy.provider.pool_name, body, facts="3 workloads",
                           provider_id=lambda: next(ids))
    assert first.ok, first
    assert first.detail.startswith("Google accepted the condition and mapping policy sync "
                                   "writes (3 workloads); probe provider sbprobe-first-0001 "
                                   "deleted")
    gone = _provider(mock, owner, f"{policy.provider.pool_name}/providers/sbprobe-first-0001")
    assert gone["state"] == "DELETED"
    assert probe_provider(owner.cloud, policy.provider.pool_name, body,
                          provider_id=lambda: next(ids)).ok
    real = _provider(mock, owner, policy.provider.name)  # the real provider is untouched
    assert real["state"] == "ACTIVE" and real["attributeCondition"] == body["attributeCondition"]


def test_probe_condition_shows_googles_refusal(mock: MockCloud) -> None:
    from sealbench.gcp._doctor_probe import probe_provider
    from sealbench.gcp.policy import provider_body

    owner, policy = _synced_owner(mock, "refused-gcp", "810000000007")
    body = {**provider_body(policy),
            "attributeCondition": provider_body(policy)["attributeCondition"] + " &&"}
    refused = probe_provider(owner.cloud, policy.provider.pool_name, body, facts="f")
    assert not refused.ok
    assert refused.detail.startswith("Google refused the provider (f): attribute_condition is "
                                     "not valid CEL"), refused.detail
    missing = probe_provider(owner.cloud, policy.provider.pool_name.replace("sealbench", "none"),
                             provider_body(policy))
    assert not missing.ok and "no pool" in missing.detail and "policy sync" in (missing.fix or "")


def test_a_soft_deleted_provider_is_no_provider(mock: MockCloud) -> None:
    """Google keeps a deleted provider 30 days as DELETED (issue 29, item 6): doctor does not
    read its presence as a working provider, and names the undelete."""
    owner, policy = _synced_owner(mock, "deleted-gcp", "810000000008")
    assert _checks(check_owner_cloud(owner.cloud))["pool provider"].ok
    request = urllib.request.Request(f"{mock.endpoints.iam}/v1/{policy.provider.name}",
                                     method="DELETE",
                                     headers={"Authorization": f"Bearer {owner.token}"})
    urllib.request.urlopen(request, timeout=30).close()
    gone = _checks(check_owner_cloud(owner.cloud))["pool provider"]
    assert not gone.ok and gone.detail.endswith("is DELETED: no workload federates through it")
    assert (gone.fix or "").startswith(
        "gcloud iam workload-identity-pools providers undelete attestation "
        "--workload-identity-pool=sealbench --location=global --project=deleted-gcp")


def test_a_role_granted_only_under_a_condition_is_shown_with_it_and_not_counted(
    mock: MockCloud,
) -> None:
    """The project policy is read at version 3: a conditional binding is kept, shown with its
    condition, and never counted as certain (doctor does not evaluate IAM Conditions; the mock
    keeps them and grants nothing by them, and refuses a version-1 read of them, as Google)."""
    owner = Owner(mock, "cond-gcp", "810000000009")
    owner.services(*OWNER_APIS, *RUNNER_APIS, "cloudresourcemanager.googleapis.com")
    ep = mock.endpoints
    _post(f"{ep.iam}/v1/projects/cond-gcp/serviceAccounts", {"accountId": "sealbench-runner"},
          owner.token)
    condition = {"title": "until 2027", "expression":
                 'request.time < timestamp("2027-01-01T00:00:00Z")'}
    policy = _post(f"{ep.apis}/v1/projects/cond-gcp:getIamPolicy", {}, owner.token)
    policy["version"] = 3
    policy["bindings"] += [
        {"role": _ROLES[0], "members": [f"serviceAccount:{owner.runner}"]},
        {"role": _ROLES[1], "members": [f"serviceAccount:{owner.runner}"],
         "condition": condition},
    ]
    _post(f"{ep.apis}/v1/projects/cond-gcp:setIamPolicy", {"policy": policy}, owner.token)
    with pytest.raises(urllib.error.HTTPError) as old:  # a version-1 read is refused
        _post(f"{ep.apis}/v1/projects/cond-gcp:getIamPolicy", {}, owner.token)
    assert old.value.code == 400
    check = _checks(check_owner_cloud(owner.cloud, runner=owner.settings()))[
        "runner service account"]
    assert check.ok and not check.verified, check
    assert check.detail == (
        f"{owner.runner}: roles/logging.logWriter only under condition 'until 2027': "
        'request.time < timestamp("2027-01-01T00:00:00Z")')
    assert "--role=roles/logging.logWriter" in (check.fix or "")
