"""The policy writer against the mock's IAM, KMS and storage REST APIs: idempotent, incremental,
and it never drops a binding it did not create."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from google.oauth2.credentials import Credentials as OwnerCredentials

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.confidential_space import principal_set
from sealbench.gcp.policy import (
    BUCKET_ROLE,
    KEY_ROLE,
    RESULT_BUCKET_ROLE,
    RESULT_READER_ROLE,
    AssetPolicy,
    PoolProvider,
)
from sealbench.gcp.policy_writer import PolicyWriter
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from tests.unit.contract.test_pool import POOL_RECIPIENT


def _d(label: str) -> str:
    return sha256_digest(label.encode())


W1 = WorkloadIdentity(_d("img"), _d("data 1"), _d("model"), _d("recipient"),  # type: ignore[arg-type]
                      "1", "brats-2023-gli/1")
W2 = WorkloadIdentity(_d("img"), _d("data 2"), _d("model"), _d("recipient"),  # type: ignore[arg-type]
                      "1", "brats-2023-gli/1")
FOREIGN = "user:auditor@example.org"


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockCloud, OwnerSetup]]:
    with MockCloud(tmp_path_factory.mktemp("policy") / "state") as cloud:
        owner = provision_owner(
            cloud.endpoints,
            email="hospital@example.org",
            project_id="hospital",
            project_number="500000000005",
            bucket="hospital-policy-bucket",
        )
        yield cloud, owner


def _writer(cloud: MockCloud, owner: OwnerSetup) -> PolicyWriter:
    ep = cloud.endpoints
    return PolicyWriter.from_credentials(
        OwnerCredentials(owner.access_token),
        iam_url=ep.iam,
        kms_url=ep.kms,
        storage_url=ep.storage,
    )


def _policy(cloud: MockCloud, owner: OwnerSetup, *workloads: WorkloadIdentity) -> AssetPolicy:
    return AssetPolicy(
        provider=PoolProvider(owner.project_number, "hospital-pool", "attestation"),
        key_name=owner.key_name,
        bucket=owner.bucket,
        workloads=frozenset(workloads),
        include_data=True,
        issuer_uri=cloud.endpoints.issuer + "/",
        endpoints=cloud.endpoints.service_endpoints(),
    )


def _get(url: str, token: str) -> dict[str, Any]:
    response = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _key_policy(cloud: MockCloud, owner: OwnerSetup) -> dict[str, Any]:
    return _get(f"{cloud.endpoints.kms}/v1/{owner.key_name}:getIamPolicy"
                "?options.requestedPolicyVersion=3", owner.access_token)


def _v3(bucket_url: str, owner: OwnerSetup) -> dict[str, Any]:
    """A bucket's IAM policy read at version 3 (what a policy with conditions needs)."""
    return _get(f"{bucket_url}?optionsRequestedPolicyVersion=3", owner.access_token)


def _members(policy: dict[str, Any], role: str) -> set[str]:
    return {m for b in policy["bindings"] if b["role"] == role for m in b["members"]}


def test_policy_writer_run_twice_is_idempotent(mock: tuple[MockCloud, OwnerSetup]) -> None:
    cloud, owner = mock
    policy = _policy(cloud, owner, W1)
    first = _writer(cloud, owner).sync(policy)
    assert first.changed and first.key.added
    before = _key_policy(cloud, owner)
    second = _writer(cloud, owner).sync(policy)
    assert not second.changed
    assert second.provider == "unchanged" and not second.pool_created
    # Nothing was written the second time: the etag did not move.
    assert _key_policy(cloud, owner)["etag"] == before["etag"]


def test_policy_writer_preserves_a_binding_someone_else_added(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    writer = _writer(cloud, owner)
    writer.sync(_policy(cloud, owner, W1))
    # Someone else grants the same role to an auditor, and another role on the bucket.
    key_policy = _key_policy(cloud, owner)
    key_policy["bindings"].append({"role": KEY_ROLE, "members": [FOREIGN]})
    key_policy["bindings"].append({"role": "roles/cloudkms.viewer", "members": [FOREIGN]})
    headers = {"Authorization": f"Bearer {owner.access_token}"}
    url = f"{cloud.endpoints.kms}/v1/{owner.key_name}:setIamPolicy"
    requests.post(url, json={"policy": key_policy}, headers=headers, timeout=10).raise_for_status()
    bucket_url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    bucket_policy = _v3(bucket_url, owner)
    bucket_policy["bindings"].append({"role": BUCKET_ROLE, "members": [FOREIGN]})
    requests.put(bucket_url, json=bucket_policy, headers=headers, timeout=10).raise_for_status()

    # The approved workloads change: W1 is withdrawn, W2 approved.
    report = writer.sync(_policy(cloud, owner, W2))
    m1 = principal_set(owner.project_number, "hospital-pool", W1.uid())
    m2 = principal_set(owner.project_number, "hospital-pool", W2.uid())
    assert report.key.added == (m2,) and report.key.removed == (m1,)
    after = _key_policy(cloud, owner)
    assert _members(after, KEY_ROLE) == {FOREIGN, m2}
    assert _members(after, "roles/cloudkms.viewer") == {FOREIGN}
    assert _members(_v3(bucket_url, owner), BUCKET_ROLE) == {FOREIGN, m2}

    # Withdrawing every workload removes only the writer's members.
    writer.sync(_policy(cloud, owner))
    assert _members(_key_policy(cloud, owner), KEY_ROLE) == {FOREIGN}
    assert _members(_v3(bucket_url, owner), BUCKET_ROLE) == {FOREIGN}


def test_provider_written_with_the_typed_condition(mock: tuple[MockCloud, OwnerSetup]) -> None:
    cloud, owner = mock
    policy = _policy(cloud, owner, W1)
    _writer(cloud, owner).sync(policy)
    provider = _get(f"{cloud.endpoints.iam}/v1/{policy.provider.name}", owner.access_token)
    condition = provider["attributeCondition"]
    for clause in (
        "assertion.swname == 'CONFIDENTIAL_SPACE'",
        "assertion.dbgstat == 'disabled-since-boot'",
        "'STABLE' in assertion.submods.confidential_space.support_attributes",
        "size(assertion.submods.container.cmd_override) == 0",
        f"assertion.submods.container.image_digest in ['{W1.image_digest}']",
    ):
        assert clause in condition
    assert "attribute.workload_uid" in provider["attributeMapping"]
    assert provider["oidc"]["issuerUri"] == cloud.endpoints.issuer + "/"


def test_policy_writer_refused_without_ownership(mock: tuple[MockCloud, OwnerSetup]) -> None:
    from sealbench.platforms.errors import PolicyWriteError

    cloud, owner = mock
    stranger = cloud.owner_token("user:stranger@example.org")
    ep = cloud.endpoints
    writer = PolicyWriter.from_credentials(
        OwnerCredentials(stranger), iam_url=ep.iam, kms_url=ep.kms, storage_url=ep.storage
    )
    with pytest.raises(PolicyWriteError) as info:
        writer.sync(_policy(cloud, owner, W1))
    assert "403" in str(info.value)


def test_policy_writer_lets_approved_workloads_create_results_only(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    writer = _writer(cloud, owner)
    bucket_url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    policy = dataclasses.replace(_policy(cloud, owner, W1), result_bucket=owner.bucket)
    report = writer.sync(policy)
    m1 = principal_set(owner.project_number, "hospital-pool", W1.uid())
    assert report.result_bucket is not None and report.result_bucket.added == (m1,)
    assert _members(_v3(bucket_url, owner), RESULT_BUCKET_ROLE) == {m1}
    assert not writer.sync(policy).changed

    writer.sync(dataclasses.replace(policy, workloads=frozenset()))
    assert _members(_v3(bucket_url, owner), RESULT_BUCKET_ROLE) == set()


def test_policy_writer_lets_the_aggregator_read_results(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    """The benchmark's aggregator (issue 27) reads each run's pool.sealed in the result bucket:
    its member alone gets RESULT_READER_ROLE there, besides creating objects as every workload;
    the evaluation's members never read results."""
    cloud, owner = mock
    writer = _writer(cloud, owner)
    bucket_url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    aggregator = WorkloadIdentity(_d("aggregator"), None, _d("model"),  # type: ignore[arg-type]
                                  POOL_RECIPIENT, "1", "brats-2023-gli/1")
    policy = dataclasses.replace(_policy(cloud, owner, W1, aggregator),
                                 result_bucket=owner.bucket)
    report = writer.sync(policy)
    reader = principal_set(owner.project_number, "hospital-pool", aggregator.uid())
    assert report.result_readers is not None and report.result_readers.added == (reader,)
    assert _members(_v3(bucket_url, owner), RESULT_READER_ROLE) == {reader}
    assert not writer.sync(policy).changed

    writer.sync(dataclasses.replace(policy, workloads=frozenset({W1})))
    assert _members(_v3(bucket_url, owner), RESULT_READER_ROLE) == set()
    writer.sync(dataclasses.replace(policy, workloads=frozenset()))


def test_policy_sync_keeps_the_owners_conditional_bindings(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    """An owner's key and bucket may already carry IAM Conditions (a time-bound admin grant):
    Google then refuses a read at policy version 1 and requires version 3 to write; sync reads
    and writes at 3 and leaves the conditional bindings exactly as they were (issue 29)."""
    cloud, owner = mock
    headers = {"Authorization": f"Bearer {owner.access_token}"}
    condition = {"title": "until 2027",
                 "expression": 'request.time < timestamp("2027-01-01T00:00:00Z")'}
    conditional = {"role": "roles/cloudkms.admin", "members": [FOREIGN], "condition": condition}
    key_url = f"{cloud.endpoints.kms}/v1/{owner.key_name}"
    key_policy = _key_policy(cloud, owner)
    without_version = {**key_policy, "bindings": [*key_policy["bindings"], conditional]}
    refused = requests.post(f"{key_url}:setIamPolicy", json={"policy": without_version},
                            headers=headers, timeout=10)
    assert refused.status_code == 400 and "version 3" in refused.text
    requests.post(f"{key_url}:setIamPolicy", json={"policy": {**without_version, "version": 3}},
                  headers=headers, timeout=10).raise_for_status()
    bucket_url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    bucket_policy = _v3(bucket_url, owner)
    requests.put(bucket_url, headers=headers, timeout=10, json={
        **bucket_policy, "version": 3, "bindings": [*bucket_policy["bindings"], {
            "role": "roles/storage.admin", "members": [FOREIGN], "condition": condition}],
    }).raise_for_status()
    # as strict as Google: a version-1 read of a policy with conditions is refused
    for url in (f"{key_url}:getIamPolicy", bucket_url):
        assert requests.get(url, headers=headers, timeout=10).status_code == 400

    report = _writer(cloud, owner).sync(_policy(cloud, owner, W1, W2))
    assert report.key.added  # written, at version 3
    after = _key_policy(cloud, owner)
    assert after["version"] == 3 and conditional in after["bindings"]
    granted = {principal_set(owner.project_number, "hospital-pool", w.uid()) for w in (W1, W2)}
    assert granted <= _members(after, KEY_ROLE)
    bucket_after = _v3(bucket_url, owner)
    assert any(b.get("condition") == condition for b in bucket_after["bindings"])
