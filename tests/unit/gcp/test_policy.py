"""The policy model: typed CEL generation that cannot be injected, and incremental bindings."""

from __future__ import annotations

import pytest

from sealbench.contract.inputs import ConditionContext
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.gcp.confidential_space import principal_set
from sealbench.gcp.policy import (
    KEY_ROLE,
    AssetPolicy,
    PoolProvider,
    attribute_condition,
    cel_string,
    managed_prefix,
    merge_bindings,
    provider_body,
)
from sealbench.platforms.errors import PolicyInputError


def _d(label: str) -> Sha256Digest:
    return sha256_digest(label.encode())


PROVIDER = PoolProvider("123456789", "hospital-pool", "attestation")
KEY = "projects/hospital/locations/global/keyRings/r/cryptoKeys/k"
W1 = WorkloadIdentity(_d("img"), _d("data"), _d("model"), _d("recipient"), "1", "brats-2023-gli/1")
W2 = WorkloadIdentity(_d("img2"), _d("data"), _d("model"), _d("recipient"), "1",
                      "brats-2023-gli/1")


def _condition(images: list[str], include_data: bool) -> str:
    return attribute_condition(ConditionContext(frozenset(images), include_data))


@pytest.mark.parametrize(
    "payload",
    ["x' || true || '", "sha256:abc') || (true", 'a"b', "a b", "", "a\\u0027"],
)
def test_cel_injection_through_a_literal_rejected(payload: str) -> None:
    with pytest.raises(PolicyInputError):
        cel_string(payload)


def test_malformed_image_digest_rejected_before_use() -> None:
    with pytest.raises(PolicyInputError, match="sha256"):
        _condition(["sha256:' || true || '"], include_data=True)


def test_condition_requires_production_image_and_lists_images() -> None:
    condition = _condition([W2.image_digest, W1.image_digest, W1.image_digest], True)
    assert "assertion.swname == 'CONFIDENTIAL_SPACE'" in condition
    assert "assertion.dbgstat == 'disabled-since-boot'" in condition
    assert "'STABLE' in assertion.submods.confidential_space.support_attributes" in condition
    assert "size(assertion.submods.container.cmd_override) == 0" in condition
    images = sorted([W1.image_digest, W2.image_digest])
    assert f"image_digest in ['{images[0]}', '{images[1]}']" in condition
    assert "SEALBENCH_DATA_DIGEST.matches(" in condition
    assert "assertion.hwmodel in ['GCP_AMD_SEV', 'GCP_AMD_SEV_SNP', 'GCP_INTEL_TDX']" in condition
    assert "assertion.secboot == true" in condition
    assert "!has(assertion.submods.container.env_override.SEALBENCH_STS_URL)" in condition
    # the pin and the benchmark are uid fields (each grant one approval), shape-checked here
    assert "SEALBENCH_METRICS_VERSION.matches('^[a-z0-9]" in condition
    assert "SEALBENCH_BENCHMARK_ID.matches('^[1-9][0-9]{0,17}$')" in condition
    assert "SEALBENCH_METRICS_VERSION in" not in condition


def test_model_owner_condition_does_not_read_the_data_override() -> None:
    condition = _condition([W1.image_digest], False)
    assert "SEALBENCH_DATA_DIGEST.matches" not in condition
    assert "SEALBENCH_DATA_DIGEST" in condition  # only as an allowed override name


def test_no_approved_workload_allows_no_image() -> None:
    assert "image_digest in []" in _condition([], True)


def test_data_owner_policy_without_dataset_digest_rejected() -> None:
    with pytest.raises(PolicyInputError, match="dataset digest"):
        AssetPolicy(
            PROVIDER,
            KEY,
            None,
            frozenset({W1.without_data()}),
            include_data=True,
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [("key_name", "projects/p/keyRings/r"), ("bucket", "Bad Bucket"), ("issuer_uri", "ftp://x")],
)
def test_malformed_policy_coordinates_rejected(field: str, value: str) -> None:
    fields: dict[str, object] = {
        "key_name": KEY,
        "bucket": "hospital-bucket",
        "issuer_uri": "https://confidentialcomputing.googleapis.com/",
    }
    fields[field] = value
    with pytest.raises(PolicyInputError):
        AssetPolicy(
            PROVIDER,
            workloads=frozenset({W1}),
            include_data=True,
            **fields,  # type: ignore[arg-type]
        )


def test_malformed_pool_coordinates_rejected() -> None:
    with pytest.raises(PolicyInputError):
        PoolProvider("my-project", "pool-a", "prov-a")
    with pytest.raises(PolicyInputError):
        PoolProvider("1", "Pool_A", "prov-a")


def test_model_owner_grants_the_dataless_uid() -> None:
    policy = AssetPolicy(
        PROVIDER, KEY, None, frozenset({W1}), include_data=False
    )
    assert policy.uids() == {W1.without_data().uid()}
    body = provider_body(policy)
    assert "'-'" in body["attributeMapping"]["attribute.workload_uid"]
    assert body["oidc"]["issuerUri"] == "https://confidentialcomputing.googleapis.com/"


def test_google_provider_takes_no_endpoints_and_a_mock_provider_needs_them() -> None:
    from sealbench.contract.spec import ServiceEndpoints

    mock = ServiceEndpoints("http://127.0.0.1:1/v1/token", "http://127.0.0.1:2", "http://127.0.0.1:3")
    with pytest.raises(PolicyInputError, match="takes no endpoints"):
        AssetPolicy(
            PROVIDER, KEY, None, frozenset({W1}), True, endpoints=mock
        )
    with pytest.raises(PolicyInputError, match="not Google's"):
        AssetPolicy(
            PROVIDER,
            KEY,
            None,
            frozenset({W1}),
            True,
            issuer_uri="http://127.0.0.1:4/",
        )


def _policy(*bindings: dict[str, object]) -> dict[str, object]:
    return {"version": 1, "etag": "e1", "bindings": list(bindings)}


def test_merge_keeps_foreign_members_and_bindings() -> None:
    mine = principal_set("123456789", "hospital-pool", W1.uid())
    stale = principal_set("123456789", "hospital-pool", W2.uid())
    other_pool = principal_set("123456789", "other-pool", W2.uid())
    current = _policy(
        {"role": KEY_ROLE, "members": ["user:auditor@example.org", stale, other_pool]},
        {"role": "roles/cloudkms.viewer", "members": ["group:ops@example.org"]},
        {"role": "roles/owner", "members": []},
    )
    updated, added, removed = merge_bindings(
        current, KEY_ROLE, managed_prefix(PROVIDER), frozenset({mine})
    )
    assert added == (mine,) and removed == (stale,)
    key_members = {m for b in updated["bindings"] if b["role"] == KEY_ROLE for m in b["members"]}
    assert key_members == {"user:auditor@example.org", other_pool, mine}
    assert {"role": "roles/cloudkms.viewer", "members": ["group:ops@example.org"]} in updated[
        "bindings"
    ]
    assert {"role": "roles/owner", "members": []} in updated["bindings"]
    assert updated["etag"] == "e1"
    # Applying the result again changes nothing.
    again, added2, removed2 = merge_bindings(
        updated, KEY_ROLE, managed_prefix(PROVIDER), frozenset({mine})
    )
    assert (added2, removed2) == ((), ()) and again == updated


def test_merge_refuses_to_manage_members_outside_its_prefix() -> None:
    with pytest.raises(PolicyInputError):
        merge_bindings(
            _policy(), KEY_ROLE, managed_prefix(PROVIDER), frozenset({"user:attacker@example.org"})
        )


def test_merge_removes_its_binding_when_nothing_is_approved() -> None:
    mine = principal_set("123456789", "hospital-pool", W1.uid())
    updated, _, removed = merge_bindings(
        _policy({"role": KEY_ROLE, "members": [mine]}),
        KEY_ROLE,
        managed_prefix(PROVIDER),
        frozenset(),
    )
    assert removed == (mine,) and updated["bindings"] == []


def test_a_data_less_identity_is_granted_only_as_an_aggregator_beside_its_evaluation() -> None:
    """Issue 27: beside W1, an aggregator of W1's model, benchmark and pin (another image, the
    registry's recipient) is granted; the same without W1, for another model, or with the data
    owner's own result key as recipient is refused."""
    registry = _d("registry pool key")
    aggregator = WorkloadIdentity(_d("agg"), None, _d("model"), registry, "1", "brats-2023-gli/1")
    AssetPolicy(PROVIDER, KEY, None, frozenset({W1, aggregator}), include_data=True)
    for workloads in ({aggregator},
                      {W1, WorkloadIdentity(_d("agg"), None, _d("other"), registry, "1",
                                            "brats-2023-gli/1")},
                      {W1, WorkloadIdentity(_d("agg"), None, _d("model"), _d("recipient"), "1",
                                            "brats-2023-gli/1")}):
        with pytest.raises(PolicyInputError, match="dataset digest"):
            AssetPolicy(PROVIDER, KEY, None, frozenset(workloads), include_data=True)
