"""The mock as strict as Google Cloud where sealbench could otherwise pass on the mock and fail on
a real project (issue 29 item 6), through Google's own client libraries: Cloud Storage's
predefined roles grant exactly their documented permissions (``objectViewer`` no bucket
metadata, ``objectCreator`` no overwrite), a resumable upload corrupted in transit reports the
corruption even when the library's cleanup is refused, and a new project has only Google's
default APIs on until its owner enables the rest. Each test fails on the lenient mock
it guards against."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage  # type: ignore[attr-defined]
from google.oauth2.credentials import Credentials

from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
from sealbench.gcp.kms import make_kms_client
from sealbench.mocktee.identity import DEFAULT_ENABLED_SERVICES, SERVICE_TITLES
from sealbench.mocktee.provision import OWNER_SERVICES, OwnerSetup, enable_services, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.errors import ObjectCorrupted, StorageAccessDenied

PROJECT, NUMBER = "strict-google", "720000000072"


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockCloud, OwnerSetup]]:
    with MockCloud(tmp_path_factory.mktemp("strict") / "state") as cloud:
        owner = provision_owner(
            cloud.endpoints, email="owner@example.org", project_id=PROJECT,
            project_number=NUMBER, bucket="strict-google-bucket",
        )
        yield cloud, owner


def _client(cloud: MockCloud, owner: OwnerSetup, token: str) -> storage.Client:
    return make_storage_client(owner.project_id, Credentials(token), cloud.endpoints.storage)


def _grant(cloud: MockCloud, owner: OwnerSetup, role: str, member: str) -> str:
    """Bind ``role`` on the bucket to ``member``; return an access token for ``member``."""
    url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    headers = {"Authorization": f"Bearer {owner.access_token}"}
    policy = requests.get(url, headers=headers, timeout=10).json()
    policy["bindings"].append({"role": role, "members": [member]})
    assert requests.put(url, json=policy, headers=headers, timeout=10).status_code == 200
    return cloud.owner_token(member)


def _held(cloud: MockCloud, owner: OwnerSetup, token: str) -> set[str]:
    bucket = _client(cloud, owner, token).bucket(owner.bucket)
    asked = ["storage.buckets.get", "storage.objects.get", "storage.objects.list",
             "storage.objects.create", "storage.objects.delete", "storage.objects.update"]
    return set(bucket.test_iam_permissions(asked))


# -- Cloud Storage role semantics -----------------------------------------------------------------


def test_object_viewer_reads_objects_but_not_bucket_metadata(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    GcsBlobStore(_client(cloud, owner, owner.access_token), owner.bucket).put_bytes(
        "viewer/case.sealed", b"ciphertext"
    )
    token = _grant(cloud, owner, "roles/storage.objectViewer", "user:viewer@example.org")
    client = _client(cloud, owner, token)
    reader = GcsBlobStore(client, owner.bucket)
    assert reader.get_bytes("viewer/case.sealed", 100) == b"ciphertext"
    assert "viewer/case.sealed" in list(reader.list("viewer/"))
    with pytest.raises(gexc.Forbidden, match=r"storage\.buckets\.get"):
        client.get_bucket(owner.bucket)
    assert _held(cloud, owner, token) == {"storage.objects.get", "storage.objects.list"}


def test_object_creator_creates_but_cannot_overwrite_read_or_delete(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    token = _grant(cloud, owner, "roles/storage.objectCreator", "user:creator@example.org")
    writer = GcsBlobStore(_client(cloud, owner, token), owner.bucket)
    writer.put_bytes("creator/result.sealed", b"first")
    with pytest.raises(StorageAccessDenied, match=r"storage\.objects\.delete"):
        writer.put_bytes("creator/result.sealed", b"second")  # multipart upload
    with pytest.raises(StorageAccessDenied, match=r"storage\.objects\.delete"):
        writer.put_stream("creator/result.sealed", io.BytesIO(b"third"))  # resumable upload
    owner_store = GcsBlobStore(_client(cloud, owner, owner.access_token), owner.bucket)
    assert owner_store.get_bytes("creator/result.sealed", 100) == b"first"
    for refused in (
        lambda: writer.get_bytes("creator/result.sealed", 100),
        lambda: list(writer.list("creator/")),
        lambda: writer.delete("creator/result.sealed"),
    ):
        with pytest.raises(StorageAccessDenied):
            refused()
    assert _held(cloud, owner, token) == {"storage.objects.create"}


def test_object_admin_and_user_overwrite_but_see_no_bucket_metadata(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    objects = {"storage.objects.get", "storage.objects.list", "storage.objects.create",
               "storage.objects.delete", "storage.objects.update"}
    for role, member in (("roles/storage.objectAdmin", "user:objadmin@example.org"),
                         ("roles/storage.objectUser", "user:objuser@example.org")):
        token = _grant(cloud, owner, role, member)
        client = _client(cloud, owner, token)
        store = GcsBlobStore(client, owner.bucket)
        store.put_bytes("admin/x.sealed", b"one")
        store.put_bytes("admin/x.sealed", b"two")  # holds storage.objects.delete: may replace
        assert store.get_bytes("admin/x.sealed", 10) == b"two"
        with pytest.raises(gexc.Forbidden):
            client.get_bucket(owner.bucket)
        assert _held(cloud, owner, token) == objects, role


def test_legacy_bucket_reader_sees_bucket_and_listing_not_objects(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    GcsBlobStore(_client(cloud, owner, owner.access_token), owner.bucket).put_bytes(
        "legacy/model.tar", b"weights"
    )
    token = _grant(cloud, owner, "roles/storage.legacyBucketReader", "user:legacy@example.org")
    client = _client(cloud, owner, token)
    assert client.get_bucket(owner.bucket).name == owner.bucket
    store = GcsBlobStore(client, owner.bucket)
    assert list(store.list("legacy/")) == ["legacy/model.tar"]
    with pytest.raises(StorageAccessDenied):
        store.get_bytes("legacy/model.tar", 100)
    assert _held(cloud, owner, token) == {"storage.buckets.get", "storage.objects.list"}


def test_storage_admin_holds_everything(mock: tuple[MockCloud, OwnerSetup]) -> None:
    cloud, owner = mock
    token = _grant(cloud, owner, "roles/storage.admin", "user:admin@example.org")
    assert _client(cloud, owner, token).get_bucket(owner.bucket).name == owner.bucket
    assert len(_held(cloud, owner, token)) == 6


# -- a corrupted resumable upload with only objectCreator --------------------------------------


class _CorruptingSession(AuthorizedSession):
    """Flips one byte of the last chunk of every resumable upload on its way to the store: the
    store keeps (and checksums) bytes other than those the client sent."""

    def request(self, method: str, url: str, data: object = None, **kwargs: object) -> object:
        if method == "PUT" and "upload_id=" in url and isinstance(data, bytes) and data:
            data = data[:-1] + bytes([data[-1] ^ 0x01])
        return super().request(method, url, data=data, **kwargs)  # type: ignore[arg-type]


def test_corrupted_resumable_upload_reported_as_corruption_not_the_cleanup_403(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    token = _grant(cloud, owner, "roles/storage.objectCreator", "user:uploader@example.org")
    credentials = Credentials(token)
    client = storage.Client(
        project=owner.project_id, credentials=credentials,
        _http=_CorruptingSession(credentials),
        client_options={"api_endpoint": cloud.endpoints.storage},
    )
    store = GcsBlobStore(client, owner.bucket)
    with pytest.raises(ObjectCorrupted) as info:
        store.put_stream("corrupt/result.sealed", io.BytesIO(b"sealed result bytes"))
    error = info.value
    assert error.action == "upload" and error.name == "corrupt/result.sealed"
    # The library's cleanup delete() was refused (objectCreator cannot delete): noted, not raised.
    assert "could not be deleted" in str(error) and "storage.objects.delete" in str(error)
    assert type(error.__cause__).__name__ == "DataCorruption"
    assert "sealed result bytes" not in str(error)


# -- APIs off in a new project until enabled ----------------------------------------------------


def test_a_new_project_has_only_googles_default_apis_until_the_owner_enables_more(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, _ = mock
    ep = cloud.endpoints
    project, number, owner = "fresh-project", "730000000073", "user:fresh@example.org"
    requests.post(f"{ep.control}/mock/v1/projects", timeout=10,
                  json={"projectId": project, "projectNumber": number, "owner": owner})
    session = AuthorizedSession(Credentials(cloud.owner_token(owner)))

    def state(service: str) -> str:
        answer = session.get(f"{ep.apis}/v1/projects/{project}/services/{service}").json()
        return str(answer["state"])

    assert {s: state(s) for s in SERVICE_TITLES} == {
        s: "ENABLED" if s in DEFAULT_ENABLED_SERVICES else "DISABLED" for s in SERVICE_TITLES
    }
    assert {"storage.googleapis.com", "serviceusage.googleapis.com"} == DEFAULT_ENABLED_SERVICES
    ring = f"{ep.kms}/v1/projects/{project}/locations/global/keyRings"
    calls = {
        "cloudkms.googleapis.com": lambda: session.post(f"{ring}?keyRingId=r", json={}),
        "iam.googleapis.com": lambda: session.post(
            f"{ep.iam}/v1/projects/{project}/locations/global/workloadIdentityPools"
            "?workloadIdentityPoolId=pool-x", json={}),
        "cloudresourcemanager.googleapis.com": lambda: session.post(
            f"{ep.apis}/v1/projects/{project}:getIamPolicy", json={}),
        "compute.googleapis.com": lambda: session.get(
            f"{ep.compute}/compute/v1/projects/{project}/regions/europe-west4"),
        "sts.googleapis.com": lambda: requests.post(ep.sts_token_url, timeout=10, data={
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "audience": f"//iam.googleapis.com/projects/{number}/locations/global/"
                        "workloadIdentityPools/pool-x/providers/prov-x",
            "subject_token": "x.y.z",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        }),
    }
    for service, call in calls.items():
        refused = call()
        error = gexc.from_http_response(refused)  # type: ignore[no-untyped-call]
        assert refused.status_code == 403 and error.reason == "SERVICE_DISABLED", service
        assert error.metadata == {"service": service, "consumer": f"projects/{number}"}
    # Cloud Storage is on by default: the owner may create a bucket at once.
    created = session.post(f"{ep.storage}/storage/v1/b?project={project}", json={
        "name": "fresh-project-bucket",  # with uniform access: secure-by-default (issue 44)
        "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}})
    assert created.status_code == 200

    enable_services(ep, project, cloud.owner_token(owner))  # 'gcloud services enable ...'
    assert all(state(s) == "ENABLED" for s in OWNER_SERVICES)
    assert calls["cloudkms.googleapis.com"]().status_code == 200
    assert calls["cloudresourcemanager.googleapis.com"]().status_code == 200
    assert calls["sts.googleapis.com"]().json()["error"] == "invalid_target"  # no such pool
    unknown = session.post(f"{ep.apis}/v1/projects/{project}/services:batchEnable",
                            json={"serviceIds": ["nope.googleapis.com"]})
    assert unknown.status_code == 404


# -- conditional bindings on KMS keys and buckets ----------------------------------------------


def test_conditional_bindings_kept_at_version_3_and_never_granting_more(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    """Google keeps a binding's IAM Condition and requires policy version 3 to read or write a
    policy with one. The mock does not evaluate conditions (Google's engine is not cel-python):
    a conditional binding grants nothing in the mock, so a run can never pass here on a grant
    that Google's evaluation might refuse."""
    cloud, owner = mock
    member = "user:conditional@example.org"
    condition = {"title": "always",
                 "expression": "request.time > timestamp('2000-01-01T00:00:00Z')"}
    admin = make_kms_client(Credentials(owner.access_token), cloud.endpoints.kms)
    ciphertext = admin.encrypt(request={"name": owner.key_name, "plaintext": b"k"}).ciphertext
    policy = admin.get_iam_policy(request={"resource": owner.key_name,
                                           "options": {"requested_policy_version": 3}})
    policy.version = 3
    binding = policy.bindings.add(role="roles/cloudkms.cryptoKeyDecrypter", members=[member])
    binding.condition.title, binding.condition.expression = (
        condition["title"], condition["expression"])
    admin.set_iam_policy(request={"resource": owner.key_name, "policy": policy})
    read = admin.get_iam_policy(request={"resource": owner.key_name,
                                         "options": {"requested_policy_version": 3}})
    assert read.version == 3
    assert any(b.condition.expression == condition["expression"] for b in read.bindings)
    with pytest.raises(gexc.BadRequest, match="version 3"):
        admin.get_iam_policy(request={"resource": owner.key_name})
    member_kms = make_kms_client(Credentials(cloud.owner_token(member)), cloud.endpoints.kms)
    with pytest.raises(gexc.Forbidden):
        member_kms.decrypt(request={"name": owner.key_name, "ciphertext": ciphertext})

    bucket = _client(cloud, owner, owner.access_token).bucket(owner.bucket)
    bucket_policy = bucket.get_iam_policy(requested_policy_version=3)
    bucket_policy.version = 3
    bucket_policy.bindings.append({"role": "roles/storage.objectViewer", "members": {member},
                                   "condition": condition})
    bucket.set_iam_policy(bucket_policy)
    again = bucket.get_iam_policy(requested_policy_version=3)
    assert again.version == 3 and any(b.get("condition") == condition for b in again.bindings)
    with pytest.raises(gexc.BadRequest):
        bucket.get_iam_policy()
    GcsBlobStore(_client(cloud, owner, owner.access_token), owner.bucket).put_bytes(
        "conditional/x", b"x")
    with pytest.raises(StorageAccessDenied):
        GcsBlobStore(_client(cloud, owner, cloud.owner_token(member)), owner.bucket).get_bytes(
            "conditional/x", 10)
