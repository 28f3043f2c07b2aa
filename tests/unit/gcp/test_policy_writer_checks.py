"""What ``policy sync`` checks before it writes anything (issue 44, parts 1, 4 and 5), against a
scripted Google: a soft-deleted pool or provider (refused with the undelete command, undeleted
only when the owner agrees, never "unchanged"), a bucket without uniform bucket-level access,
and an allow policy that would pass Google's 1,500 principals. A writer that wrote first (the
key's bindings, then Google's 400 on the bucket) would leave half a policy behind."""

from __future__ import annotations

from typing import Any

import pytest

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.policy import AssetPolicy
from sealbench.gcp.policy_writer import (
    MAX_PRINCIPALS,
    BucketNotUniform,
    PolicyTooLarge,
    PoolDeleted,
    count_principals,
)
from sealbench.platforms.errors import PolicyWriteError
from tests.unit.gcp.test_policy_writer import KEY, PROVIDER, FakeSession, _writer

UNIFORM = {"iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}}


def _workloads(n: int) -> frozenset[WorkloadIdentity]:
    return frozenset(
        WorkloadIdentity(sha256_digest(b"i"), sha256_digest(b"d%d" % i), sha256_digest(b"m"),
                         sha256_digest(b"r"), "1", "brats-2023-gli/1") for i in range(n))


def _policy(n: int = 1, bucket: str | None = "assets-b", results: str | None = None
            ) -> AssetPolicy:
    return AssetPolicy(PROVIDER, KEY, bucket, _workloads(n), include_data=True,
                       result_bucket=results)


def _writes(session: FakeSession) -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in session.calls if m != "GET"]


def _script(**changes: list[tuple[int, dict[str, Any]]]) -> dict[tuple[str, str], Any]:
    base: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {
        ("GET", "/v1/" + PROVIDER.pool_name): [(200, {"state": "ACTIVE"})],
        ("GET", "/providers/prov-a"): [(200, {"state": "ACTIVE"})],
        ("GET", ":getIamPolicy"): [(200, {"etag": "e", "bindings": []})],
        ("GET", "/b/assets-b"): [(200, UNIFORM)],
        ("GET", "/b/assets-b/iam"): [(200, {"etag": "e", "bindings": []})],
    }
    for key, answers in changes.items():
        method, _, suffix = key.partition(" ")
        base[(method, suffix)] = answers
    return dict(sorted(base.items(), key=lambda kv: -len(kv[0][1])))  # longest suffix first


@pytest.mark.parametrize("deleted", ["pool", "provider"])
def test_a_soft_deleted_pool_or_provider_is_refused_with_the_command_and_nothing_is_written(
    deleted: str,
) -> None:
    gone = (200, {"state": "DELETED", "expireTime": "2026-12-31T00:00:00Z"})
    key = "GET /v1/" + PROVIDER.pool_name if deleted == "pool" else "GET /providers/prov-a"
    session = FakeSession(_script(**{key: [gone]}))
    with pytest.raises(PoolDeleted, match="DELETED") as refused:
        _writer(session).sync(_policy())
    assert "undelete" in refused.value.command
    assert ("pools providers undelete" in refused.value.command) == (deleted == "provider")
    assert _writes(session) == []  # never "unchanged", never half-written


def test_with_the_owners_consent_the_deleted_pool_is_undeleted_before_anything_else() -> None:
    gone = (200, {"state": "DELETED"})
    session = FakeSession(_script(**{
        "GET /v1/" + PROVIDER.pool_name: [gone],
        "POST :undelete": [(200, {"name": "op/undelete", "done": True})],
        "GET /b/assets-b": [(200, {"iamConfiguration": {}})],
    }))
    with pytest.raises(BucketNotUniform):  # every check runs before the undelete writes
        _writer(session).sync(_policy(), undelete=True)
    assert _writes(session) == []
    ok = FakeSession(_script(**{
        "GET /v1/" + PROVIDER.pool_name: [gone, (200, {"state": "ACTIVE"})],
        "POST :undelete": [(200, {"name": "op/undelete", "done": True})],
    }))
    # past the undelete the writer goes on to the provider, which this script leaves out
    with pytest.raises((AssertionError, PolicyWriteError)):
        _writer(ok).sync(_policy(), undelete=True)
    assert _writes(ok)[0] == ("POST", f"/v1/{PROVIDER.pool_name}:undelete")


def test_a_bucket_without_uniform_access_is_refused_before_anything_is_written() -> None:
    session = FakeSession(_script(**{"GET /b/assets-b": [(200, {"iamConfiguration": {
        "uniformBucketLevelAccess": {"enabled": False}}})]}))
    with pytest.raises(BucketNotUniform) as refused:
        _writer(session).sync(_policy())
    assert refused.value.command == (
        "gcloud storage buckets update gs://assets-b --uniform-bucket-level-access")
    assert _writes(session) == []


def test_a_key_policy_past_1500_principals_is_refused_before_anything_is_written() -> None:
    crowded = {"etag": "e", "bindings": [
        {"role": "roles/cloudkms.cryptoKeyEncrypterDecrypter",
         "members": [f"user:u{i}@example.org" for i in range(MAX_PRINCIPALS - 1)]}]}
    assert count_principals(crowded) == MAX_PRINCIPALS - 1
    session = FakeSession(_script(**{"GET :getIamPolicy": [(200, crowded)]}))
    with pytest.raises(PolicyTooLarge, match="1501 principals") as refused:
        _writer(session).sync(_policy(n=2))
    assert "own (--result-bucket)" not in str(refused.value)
    assert _writes(session) == []


def test_one_bucket_for_assets_and_results_reaches_the_limit_at_half_the_approvals() -> None:
    """760 workloads fit the key (760 principals) but not a bucket that holds each of them as a
    reader of the assets and a creator of results (1,520): refused, naming the remedy."""
    session = FakeSession(_script())
    with pytest.raises(PolicyTooLarge) as refused:
        _writer(session).sync(_policy(n=760, results="assets-b"))
    assert refused.value.resource == "gs://assets-b" and refused.value.principals == 1520
    assert "give results a bucket of their own (--result-bucket)" in str(refused.value)
    assert _writes(session) == []
