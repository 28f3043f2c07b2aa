"""The mock refuses what Google refuses about buckets (issue 44): a federated workload on a bucket
without uniform bucket-level access, a bucket created without it where the organisation enforces
it, public members where public access prevention is enforced, and federated identities inside
a VPC Service Controls perimeter. A lenient mock would let each of these pass."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from google.api_core import exceptions as gexc
from google.oauth2.credentials import Credentials as OwnerCredentials

from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.mocktee.identity import federated_members
from sealbench.mocktee.orgpolicy import UNIFORM_ACCESS
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.errors import (
    ServicePerimeterDenied,
    StorageAccessDenied,
    refused_after_exchange,
)

PROJECT, NUMBER = "bucket-owner", "700000000044"


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockCloud, OwnerSetup]]:
    with MockCloud(tmp_path_factory.mktemp("buckets") / "state") as cloud:
        owner = provision_owner(cloud.endpoints, email="owner@example.org", project_id=PROJECT,
                                project_number=NUMBER, bucket="bucket-owner-assets")
        yield cloud, owner


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _create(cloud: MockCloud, owner: OwnerSetup, name: str, uniform: bool | None,
            project: str = PROJECT) -> requests.Response:
    body: dict[str, object] = {"name": name}
    if uniform is not None:
        body["iamConfiguration"] = {"uniformBucketLevelAccess": {"enabled": uniform}}
    return requests.post(f"{cloud.endpoints.storage}/storage/v1/b?project={project}",
                         json=body, headers=_headers(owner.access_token), timeout=30)


def _workload(cloud: MockCloud, uid: str) -> tuple[str, str]:
    """An access token of a federated workload whose uid attribute is ``uid``, and the member
    that grants it."""
    principal, sets = federated_members(NUMBER, "sealbench", "gcpcs::w", {"workload_uid": uid})
    token, _ = cloud.identity.issue(principal, sets)
    member = next(s for s in sets if "attribute.workload_uid" in s)
    return token, member


def _grant(cloud: MockCloud, owner: OwnerSetup, bucket: str, member: str) -> requests.Response:
    url = f"{cloud.endpoints.storage}/storage/v1/b/{bucket}/iam"
    policy = requests.get(url, headers=_headers(owner.access_token), timeout=30).json()
    policy["bindings"].append({"role": "roles/storage.objectViewer", "members": [member]})
    return requests.put(url, json=policy, headers=_headers(owner.access_token), timeout=30)


def test_a_bucket_without_uniform_access_is_refused_where_the_organisation_enforces_it(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    for uniform in (None, False):
        refused = _create(cloud, owner, f"fine-grained-{uniform}".lower(), uniform)
        assert refused.status_code == 412
        assert refused.json()["error"]["message"] == (
            f"Request violates constraint '{UNIFORM_ACCESS}'")
        assert refused.json()["error"]["errors"][0]["reason"] == "conditionNotMet"
    assert "fine-grained-none" not in cloud.state.read()["buckets"]  # nothing half-created
    created = _create(cloud, owner, "uniform-bucket", True)
    assert created.status_code == 200
    assert created.json()["iamConfiguration"]["uniformBucketLevelAccess"] == {"enabled": True}


def test_a_federated_workload_is_refused_a_bucket_without_uniform_access_whatever_it_is_granted(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    cloud.inject({"fault": "org-policy", "project": PROJECT, "constraint": UNIFORM_ACCESS,
                  "value": False})
    try:
        assert _create(cloud, owner, "legacy-acl-bucket", None).status_code == 200
    finally:
        cloud.inject({"fault": "org-policy", "project": PROJECT, "constraint": UNIFORM_ACCESS,
                      "value": True})
    token, member = _workload(cloud, "uid-1")
    for bucket in ("legacy-acl-bucket", owner.bucket):
        owner_store = GcsBlobStore(make_storage_client(
            PROJECT, OwnerCredentials(owner.access_token), cloud.endpoints.storage), bucket)
        owner_store.put_bytes("datasets/1/case.sealed", b"sealed")
        assert _grant(cloud, owner, bucket, member).status_code == 200  # Google accepts it
    client = make_storage_client(PROJECT, OwnerCredentials(token), cloud.endpoints.storage)
    assert GcsBlobStore(client, owner.bucket).get_bytes("datasets/1/case.sealed", 100) == (
        b"sealed")
    with pytest.raises(StorageAccessDenied):
        GcsBlobStore(client, "legacy-acl-bucket").get_bytes("datasets/1/case.sealed", 100)
    # the owner turns uniform access on (the fix doctor names): the same grant now works
    patched = requests.patch(
        f"{cloud.endpoints.storage}/storage/v1/b/legacy-acl-bucket",
        json={"iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}},
        headers=_headers(owner.access_token), timeout=30)
    assert patched.status_code == 200
    shown = make_storage_client(PROJECT, OwnerCredentials(owner.access_token),
                                cloud.endpoints.storage).get_bucket("legacy-acl-bucket")
    assert shown.iam_configuration.uniform_bucket_level_access_enabled
    assert GcsBlobStore(client, "legacy-acl-bucket").get_bytes(
        "datasets/1/case.sealed", 100) == b"sealed"


def test_public_members_are_refused_where_public_access_prevention_is_enforced(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    refused = _grant(cloud, owner, owner.bucket, "allUsers")
    assert refused.status_code == 412
    assert "constraints/storage.publicAccessPrevention" in refused.json()["error"]["message"]


def test_a_perimeter_refuses_federated_workloads_on_keys_and_buckets_with_googles_reason(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with MockCloud(tmp_path_factory.mktemp("perimeter") / "state") as cloud:
        owner = provision_owner(cloud.endpoints, email="owner@example.org", project_id=PROJECT,
                                project_number=NUMBER, bucket="perimeter-assets")
        token, member = _workload(cloud, "uid-2")
        assert _grant(cloud, owner, owner.bucket, member).status_code == 200
        cloud.inject({"fault": "perimeter", "project": PROJECT})
        answer = requests.get(f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/o/x",
                              headers=_headers(token), timeout=30)
        assert answer.status_code == 403
        assert answer.json()["error"]["errors"][0]["reason"] == "vpcServiceControls"
        assert "Request is prohibited by organization's policy" in answer.text
        kms = make_kms_client(OwnerCredentials(token), cloud.endpoints.kms)
        with pytest.raises(gexc.Forbidden) as caught:
            kms.decrypt(request={"name": owner.key_name, "ciphertext": b"x"})
        details = caught.value.details
        assert {"type": "VPC_SERVICE_CONTROLS", "description": details[0]["violations"][0][
            "description"]} in details[0]["violations"]
        assert details[1]["reason"] == "SECURITY_POLICY_VIOLATED"
        # the workload's adapters name the perimeter, and a grant wait does not wait it out
        with pytest.raises(ServicePerimeterDenied, match="VPC Service Controls") as key:
            KmsKeyWrapper(owner.key_name, kms).unwrap(b"x" * 40, b"aad")
        store = GcsBlobStore(make_storage_client(PROJECT, OwnerCredentials(token),
                                                 cloud.endpoints.storage), owner.bucket)
        with pytest.raises(ServicePerimeterDenied, match=r"storage\.googleapis\.com") as blob:
            store.get_bytes("x", 10)
        assert not refused_after_exchange(key.value)
        assert not refused_after_exchange(blob.value)
        # the owner (a user, named by the perimeter's ingress rules) still gets in
        assert requests.get(f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}",
                            headers=_headers(owner.access_token), timeout=30).status_code == 200
