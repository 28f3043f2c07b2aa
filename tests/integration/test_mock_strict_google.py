"""The mock as strict as Google Cloud where sealbench could otherwise pass on the mock and fail on
a real project (issue 29 item 6), through Google's own client libraries: Cloud Storage's
predefined roles grant exactly their documented permissions (``objectViewer`` no bucket
metadata, ``objectCreator`` no overwrite), and a resumable upload corrupted in transit reports
the corruption even when the library's cleanup is refused. Each test fails on the lenient mock
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

from sealbench.cloud.errors import ObjectCorrupted, StorageAccessDenied
from sealbench.cloud.gcs import GcsBlobStore, make_storage_client
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud

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
