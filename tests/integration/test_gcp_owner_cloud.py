"""The Google Cloud owner implementation (:class:`GcpOwnerCloud`) against the mock's
Google-compatible endpoints: the same google-cloud-kms, google-cloud-storage and IAM REST code
as production, with only the endpoints, the credentials (an owner token) and the platform (the
mock's issuer and pinned endpoints) injected. No ``InsecureMock*`` owner class is constructed on
this path: the owner creates its key ring, key and bucket itself, seals, and syncs its policy,
and an approved workload then gets the key released through the production path."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.oauth2.credentials import Credentials

from sealbench.client.assets.store import seal_model
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import WrappedKey, asset_aad, unwrap_key
from sealbench.gcp.credentials import workload_credentials
from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
from sealbench.gcp.owner_cloud import GcpOwnerCloud
from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud, insecure_mock_platform, mock_apis
from sealbench.mocktee.provision import enable_services
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.errors import CredentialError, OwnerSettingsError

PROJECT, NUMBER = "owner-gcp", "500000000005"
IMAGE = sha256_digest(b"evaluation image")
RECIPIENT = sha256_digest(b"hospital result key")
METRICS = "brats-2023-gli/1"


def _control(url: str, body: dict[str, str]) -> dict[str, str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, str] = json.loads(response.read())
        return answer


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCloud]:
    with MockCloud(tmp_path_factory.mktemp("gcp-owner") / "state") as cloud:
        yield cloud


def _new_owner(mock: MockCloud, project: str, number: str,
               bucket_location: str | None = "EU") -> GcpOwnerCloud:
    """An owner with only a project and its own credentials, as on Google Cloud."""
    ep = mock.endpoints
    principal = f"user:owner@{project}.example"
    _control(f"{ep.control}/mock/v1/projects",
             {"projectId": project, "projectNumber": number, "owner": principal})
    token = _control(f"{ep.control}/mock/v1/ownerTokens", {"principal": principal})
    enable_services(ep, project, token["access_token"])  # 'gcloud services enable ...'
    return GcpOwnerCloud(
        project_id=project,
        project_number=number,
        credentials_source=lambda: Credentials(token["access_token"]),  # type: ignore[no-untyped-call]
        platform=insecure_mock_platform(ep),
        apis=mock_apis(ep),
        bucket_location=bucket_location,
    )


@pytest.fixture
def no_mock_owner_class(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the GCP path constructed an InsecureMock owner cloud")

    monkeypatch.setattr(InsecureMockOwnerCloud, "__init__", forbidden)


@pytest.fixture
def owner(mock: MockCloud, no_mock_owner_class: None) -> GcpOwnerCloud:
    return _new_owner(mock, PROJECT, NUMBER)


def test_owner_creates_key_and_bucket_seals_syncs_and_the_approved_workload_gets_the_key(
    mock: MockCloud, owner: GcpOwnerCloud, tmp_path: Path
) -> None:
    owner.ensure_key_and_bucket()
    owner.ensure_key_and_bucket()  # existing ones are used as they are
    coordinates = owner.default_coordinates("model", 7)
    assert coordinates.kms_key_name == (
        f"projects/{PROJECT}/locations/global/keyRings/sealbench/cryptoKeys/assets"
    )
    assert coordinates.storage_uri == f"gs://{PROJECT}-sealbench/models/7"
    weights = tmp_path / "model.onnx"
    weights.write_bytes(b"weights of a model, not a real ONNX file" * 100)
    store, prefix = owner.blob_store(coordinates.storage_uri)
    sealed = seal_model(
        weights,
        asset_id="7",
        key_wrapper=owner.key_wrapper(coordinates.kms_key_name),
        store=store,
        prefix=prefix,
    )
    workload = WorkloadIdentity(IMAGE, None, sealed.digest, RECIPIENT, "1", METRICS)
    report = owner.sync_policy(
        coordinates,
        frozenset({workload}),
        include_data=False,
    )
    assert report.pool_created and report.key.added
    wrapped = WrappedKey.from_bytes(store.get_bytes(prefix + "dek.wrapped", 1 << 16))
    aad = asset_aad("model", "7", sealed.digest)
    ep = mock.endpoints
    env = {
        **workload.env_overrides(),
        "SEALBENCH_DATA_DIGEST": sha256_digest(b"any dataset"),
        **ep.service_endpoints().env_names(),
    }
    with mock.launcher().start_workload(
        IMAGE, f"repo/eval@{IMAGE}", env, socket_dir=tmp_path / "run"
    ) as run:
        creds = workload_credentials(
            coordinates.wip_provider, token_file=run.token_file, sts_url=ep.sts_token_url
        )
        wrapper = KmsKeyWrapper(coordinates.kms_key_name, make_kms_client(creds, ep.kms))
        assert len(unwrap_key(wrapper, wrapped, aad).secret_bytes()) == 32
    # A workload the owner did not approve (another image) is refused by the same policy.
    with mock.launcher().start_workload(
        sha256_digest(b"another image"), "repo/other", env, socket_dir=tmp_path / "other"
    ) as run:
        creds = workload_credentials(
            coordinates.wip_provider, token_file=run.token_file, sts_url=ep.sts_token_url
        )
        wrapper = KmsKeyWrapper(coordinates.kms_key_name, make_kms_client(creds, ep.kms))
        with pytest.raises(CredentialError, match="attribute condition"):
            unwrap_key(wrapper, wrapped, aad)


def test_a_production_owner_pins_googles_issuer_and_no_endpoints() -> None:
    from sealbench.gcp.owner_cloud import confidential_space_platform

    platform = confidential_space_platform()
    assert platform.issuer_uri == "https://confidentialcomputing.googleapis.com/"
    assert platform.endpoints is None


def _by_name(checks: list[object]) -> dict[str, object]:
    return {c.name: c for c in checks}  # type: ignore[attr-defined]


def test_doctor_names_each_missing_piece_and_its_fix_then_passes(
    mock: MockCloud, no_mock_owner_class: None
) -> None:
    from sealbench.client.assets.doctor import check_owner_cloud

    owner = _new_owner(mock, "doctor-gcp", "700000000007")

    fresh = _by_name(check_owner_cloud(owner))
    assert fresh["credentials"].ok  # type: ignore[attr-defined]
    for name, fix in (("KMS key", "gcloud kms keys create"),
                      ("bucket", "gcloud storage buckets create"),
                      ("pool provider", "sealbench policy sync")):
        check = fresh[name]
        assert not check.ok and fix in (check.fix or ""), check  # type: ignore[attr-defined]
    owner.ensure_key_and_bucket()
    coordinates = owner.default_coordinates("model", 8)
    workload = WorkloadIdentity(IMAGE, None, sha256_digest(b"m"), RECIPIENT, "1", METRICS)
    owner.sync_policy(coordinates, frozenset({workload}), include_data=False)
    ready = check_owner_cloud(owner)
    assert all(c.ok for c in ready), ready
    # Someone else's credentials: the key is there, but not theirs to use.
    other = _new_owner(mock, "stranger-gcp", "600000000006")
    stranger = GcpOwnerCloud(
        project_id=owner.project_id,
        project_number=owner.project_number,
        credentials_source=other.credentials,
        platform=owner.platform,
        apis=owner.apis,
    )
    refused = _by_name(check_owner_cloud(stranger))
    assert not refused["KMS key"].ok  # type: ignore[attr-defined]
    assert "permission denied" in refused["KMS key"].detail.lower()  # type: ignore[attr-defined]


def test_bucket_never_created_in_googles_default_location_by_omission(
    mock: MockCloud, no_mock_owner_class: None
) -> None:
    """Google puts a bucket created without a location in the US multi-region: a hospital's
    data residency is its own choice, so without --bucket-location nothing is created (the key
    is, as before) and the error says how to choose (issue 29)."""
    owner = _new_owner(mock, "nowhere-gcp", "600000000016", bucket_location=None)
    with pytest.raises(OwnerSettingsError, match="no location is chosen") as info:
        owner.ensure_key_and_bucket()
    assert "--bucket-location" in (info.value.hint or "")
    created = _new_owner(mock, "eu-gcp", "600000000017").ensure_key_and_bucket()
    assert "bucket gs://eu-gcp-sealbench" in created
