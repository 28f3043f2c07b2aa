"""``policy sync`` against the mock (issue 44, parts 1 and 5): a soft-deleted provider is refused
with the command, nothing written, and undeleted when the owner agrees, never reported present
or "unchanged"; a bucket without uniform bucket-level access is refused before the key's
bindings are written; and a perimeter's refusal in the enclave is no grant to wait for."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from sealbench.client.assets.doctor import check_owner_cloud
from sealbench.enclave.grant_wait import GrantWait
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.errors import OwnerCloudError, ServicePerimeterDenied
from tests.integration.test_doctor_checks import Owner, _checks, _synced_owner


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCloud]:
    with MockCloud(tmp_path_factory.mktemp("sync-checks") / "state") as cloud:
        yield cloud


def _iam(owner: Owner, method: str, name: str) -> dict[str, object]:
    request = urllib.request.Request(f"{owner.mock.endpoints.iam}/v1/{name}", method=method,
                                     headers={"Authorization": f"Bearer {owner.token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer: dict[str, object] = json.loads(reply.read() or b"{}")
        return answer


def _key_policy(mock: MockCloud, key: str) -> object:
    return mock.state.read()["iam"].get(key, {}).get("bindings")


def test_a_deleted_provider_is_refused_with_the_command_then_undeleted_when_asked(
    mock: MockCloud,
) -> None:
    owner, policy = _synced_owner(mock, "undelete-gcp", "844000000011")
    _iam(owner, "DELETE", policy.provider.name)
    before = _key_policy(mock, policy.key_name)
    coordinates = owner.cloud.default_coordinates("model", 9)
    with pytest.raises(OwnerCloudError, match="is DELETED") as refused:
        owner.cloud.sync_policy(coordinates, policy.workloads, include_data=False)
    assert "--undelete" in (refused.value.hint or "")
    assert "gcloud iam workload-identity-pools providers undelete attestation" in (
        refused.value.hint or "")
    assert _iam(owner, "GET", policy.provider.name)["state"] == "DELETED"
    assert _key_policy(mock, policy.key_name) == before  # nothing written
    report = owner.cloud.sync_policy(coordinates, policy.workloads, include_data=False,
                                     undelete=True)
    assert report.undeleted == (policy.provider.name,) and report.changed
    assert _iam(owner, "GET", policy.provider.name)["state"] == "ACTIVE"
    assert _checks(check_owner_cloud(owner.cloud))["pool provider"].ok


def test_a_bucket_without_uniform_access_is_refused_before_the_keys_bindings_are_written(
    mock: MockCloud,
) -> None:
    owner, policy = _synced_owner(mock, "finegrained-gcp", "844000000012")
    mock.inject({"fault": "bucket-fine-grained", "bucket": owner.cloud.bucket})
    before = _key_policy(mock, policy.key_name)
    fewer = frozenset(list(policy.workloads)[:1])  # a revocation the key would take
    with pytest.raises(OwnerCloudError, match="no uniform bucket-level access") as refused:
        owner.cloud.sync_policy(owner.cloud.default_coordinates("model", 9), fewer,
                                include_data=False)
    assert refused.value.hint == (
        f"gcloud storage buckets update gs://{owner.cloud.bucket} --uniform-bucket-level-access")
    assert _key_policy(mock, policy.key_name) == before


def test_a_perimeter_refusal_is_not_waited_out_as_a_grant_not_yet_applied() -> None:
    tries: list[int] = []

    def refused() -> None:
        tries.append(1)
        raise ServicePerimeterDenied(service="cloudkms.googleapis.com", resource="k",
                                     reference="ID-1")

    wait = GrantWait(window_s=600, sleep=lambda _: None)
    with pytest.raises(ServicePerimeterDenied, match="VPC Service Controls perimeter"):
        wait.call("dataset", refused)
    assert len(tries) == 1 and wait.waited_s == 0
