"""``sealbench doctor`` and the owner's bucket against the mock (issue 44): a bucket sealbench
creates has uniform bucket-level access and public access prevention; doctor fails a bucket
without uniform access with the command that turns it on, says what the organisation policies in
effect mean (a domain restriction makes it unverified, never silently fine), and names a VPC
Service Controls perimeter as a perimeter, not as a missing grant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sealbench.client.assets.doctor import check_owner_cloud
from sealbench.gcp.doctor import OWNER_APIS
from sealbench.gcp.failures import bucket_create_command, cloud_failure
from sealbench.mocktee.orgpolicy import ALLOWED_DOMAINS, UNIFORM_ACCESS
from sealbench.mocktee.server import MockCloud
from tests.integration.test_doctor_checks import Owner, _checks


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCloud]:
    with MockCloud(tmp_path_factory.mktemp("doctor-buckets") / "state") as cloud:
        yield cloud


def _ready(mock: MockCloud, project: str, number: str) -> Owner:
    owner = Owner(mock, project, number)
    owner.services(*OWNER_APIS, "cloudresourcemanager.googleapis.com")
    return owner


def test_the_bucket_sealbench_creates_has_uniform_access_and_public_access_prevention(
    mock: MockCloud,
) -> None:
    owner = _ready(mock, "ubla-gcp", "844000000001")
    assert f"bucket gs://{owner.cloud.bucket}" in owner.cloud.ensure_key_and_bucket()
    config = mock.state.read()["bucket_config"][owner.cloud.bucket]
    assert config == {"uniform": True, "public_access_prevention": "enforced"}
    bucket = _checks(check_owner_cloud(owner.cloud))["bucket"]
    assert bucket.ok and "uniform bucket-level access, public access prevention enforced" in (
        bucket.detail)


def test_doctor_fails_a_bucket_without_uniform_access_with_the_command_that_fixes_it(
    mock: MockCloud,
) -> None:
    owner = _ready(mock, "legacy-gcp", "844000000002")
    owner.cloud.ensure_key_and_bucket()
    mock.inject({"fault": "bucket-fine-grained", "bucket": owner.cloud.bucket})
    bucket = _checks(check_owner_cloud(owner.cloud))["bucket"]
    assert not bucket.ok
    assert "fine-grained access control (no uniform bucket-level access)" in bucket.detail
    assert bucket.fix == (
        f"gcloud storage buckets update gs://{owner.cloud.bucket} --uniform-bucket-level-access")


def test_every_printed_bucket_create_command_has_uniform_access_and_public_prevention(
    mock: MockCloud,
) -> None:
    command = bucket_create_command("b-1", "p-1", "EU")
    assert command.endswith("--uniform-bucket-level-access --public-access-prevention")
    owner = _ready(mock, "nobucket-gcp", "844000000003")
    bucket = _checks(check_owner_cloud(owner.cloud))["bucket"]
    assert not bucket.ok and bucket.fix == bucket_create_command(owner.cloud.bucket,
                                                                 "nobucket-gcp", "EU")


def test_doctor_says_what_the_organisation_policies_mean_and_is_unsure_of_domain_restriction(
    mock: MockCloud,
) -> None:
    owner = _ready(mock, "org-gcp", "844000000004")
    found = _checks(check_owner_cloud(owner.cloud))["organisation policies"]
    assert found.ok and found.verified
    assert "storage.uniformBucketLevelAccess enforced: buckets must have uniform" in found.detail
    assert "storage.publicAccessPrevention enforced" in found.detail
    assert "iam.allowedPolicyMemberDomains not restricted" in found.detail
    mock.inject({"fault": "org-policy", "project": "org-gcp", "constraint": ALLOWED_DOMAINS,
                 "value": ["C0abc123"]})
    mock.inject({"fault": "org-policy", "project": "org-gcp", "constraint": UNIFORM_ACCESS,
                 "value": False})
    restricted = _checks(check_owner_cloud(owner.cloud))["organisation policies"]
    assert restricted.ok and not restricted.verified  # unverified either way: said so
    assert "restricted to C0abc123" in restricted.detail
    assert "storage.uniformBucketLevelAccess not enforced" in restricted.detail
    assert "do not belong to a permitted customer" in (restricted.fix or "")


def test_a_perimeter_is_reported_as_a_perimeter_not_as_a_missing_grant() -> None:
    """The owner-side translation of Google's VPC-SC refusal (KMS's google.rpc shape)."""
    from google.api_core import exceptions as gexc

    refusal = gexc.Forbidden(
        "Request is prohibited by organization's policy. vpcServiceControlsUniqueIdentifier: "
        "AbC-123_x", details=[{"@type": "type.googleapis.com/google.rpc.PreconditionFailure",
                               "violations": [{"type": "VPC_SERVICE_CONTROLS"}]}])
    failure = cloud_failure(refusal, "sealing the dataset", project="hospital")
    assert "VPC Service Controls perimeter around project hospital" in str(failure)
    assert "AbC-123_x" in str(failure) and "ingress rule" in (failure.hint or "")
    by_reason = gexc.Forbidden("denied", errors=[{"reason": "vpcServiceControls"}])
    assert "perimeter" in str(cloud_failure(by_reason, "reading", project="hospital"))
    plain = gexc.Forbidden("Permission 'cloudkms.cryptoKeyVersions.useToEncrypt' denied on "
                           "resource 'k' (or it may not exist).")
    assert "perimeter" not in str(cloud_failure(plain, "sealing", project="hospital"))


def test_doctor_names_a_perimeter_where_a_check_meets_one() -> None:
    from google.api_core import exceptions as gexc

    from sealbench.gcp._doctor_base import PERIMETER_FIX, run_check

    def probe() -> str:
        raise gexc.Forbidden("Request is prohibited by organization's policy. "
                             "vpcServiceControlsUniqueIdentifier: Zz9", errors=[
                                 {"reason": "vpcServiceControls"}])

    check = run_check("bucket", probe, "the usual fix", "hospital", "grant yourself the bucket")
    assert not check.ok and check.fix == PERIMETER_FIX
    assert "VPC Service Controls perimeter around project hospital" in check.detail
    assert "Zz9" in check.detail and "permission denied" not in check.detail
