"""GcsBlobStore (google-cloud-storage) against the mock's storage: resumable uploads of large
objects, streaming reads, listing, and the bucket IAM the authorization proxy enforces."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator

import pytest
import requests
from google.oauth2.credentials import Credentials as OwnerCredentials

from sealbench.gcp.gcs import RESUMABLE_THRESHOLD, GcsBlobStore, make_storage_client
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.errors import ObjectNotFound, StorageAccessDenied

READER = "user:reader@example.org"


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockCloud, OwnerSetup]]:
    with MockCloud(tmp_path_factory.mktemp("storage") / "state") as cloud:
        owner = provision_owner(
            cloud.endpoints,
            email="owner@example.org",
            project_id="storage-owner",
            project_number="700000000007",
            bucket="storage-owner-bucket",
        )
        yield cloud, owner


def _store(cloud: MockCloud, owner: OwnerSetup, token: str) -> GcsBlobStore:
    client = make_storage_client(owner.project_id, OwnerCredentials(token), cloud.endpoints.storage)
    return GcsBlobStore(client, owner.bucket)


def test_large_object_uploaded_resumably_and_streamed_back(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    store = _store(cloud, owner, owner.access_token)
    size = RESUMABLE_THRESHOLD + 3 * 1024 * 1024 + 7
    data = hashlib.sha256(b"seed").digest() * (size // 32) + b"x" * (size % 32)
    store.put_stream("cases/big.sealed", io.BytesIO(data), size=len(data))
    store.put_stream("cases/unknown-size.sealed", io.BytesIO(data[:1000]))  # size unknown
    digest = hashlib.sha256()
    with store.open_read("cases/big.sealed") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    assert digest.digest() == hashlib.sha256(data).digest()
    assert store.get_bytes("cases/unknown-size.sealed", 1000) == data[:1000]
    assert list(store.list("cases/")) == ["cases/big.sealed", "cases/unknown-size.sealed"]
    store.delete("cases/unknown-size.sealed")
    assert not store.exists("cases/unknown-size.sealed")
    with pytest.raises(ObjectNotFound):
        store.get_bytes("cases/unknown-size.sealed", 10)


def test_identity_without_a_bucket_binding_cannot_read_or_write(
    mock: tuple[MockCloud, OwnerSetup],
) -> None:
    cloud, owner = mock
    _store(cloud, owner, owner.access_token).put_bytes("secret.sealed", b"ciphertext")
    stranger = _store(cloud, owner, cloud.owner_token("user:stranger@example.org"))
    with pytest.raises(StorageAccessDenied, match=r"storage\.objects\.get"):
        stranger.get_bytes("secret.sealed", 100)
    with pytest.raises(StorageAccessDenied, match=r"storage\.objects\.create"):
        stranger.put_bytes("planted.sealed", b"x")
    with pytest.raises(StorageAccessDenied):
        list(stranger.list())


def test_object_viewer_binding_grants_reads_only(mock: tuple[MockCloud, OwnerSetup]) -> None:
    cloud, owner = mock
    _store(cloud, owner, owner.access_token).put_bytes("shared.sealed", b"for the reader")
    url = f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/iam"
    headers = {"Authorization": f"Bearer {owner.access_token}"}
    policy = requests.get(url, headers=headers, timeout=10).json()
    policy["bindings"].append({"role": "roles/storage.objectViewer", "members": [READER]})
    assert requests.put(url, json=policy, headers=headers, timeout=10).status_code == 200
    stale = requests.put(url, json=policy, headers=headers, timeout=10)
    assert stale.status_code == 412  # the etag moved: concurrent changes are detected
    reader = _store(cloud, owner, cloud.owner_token(READER))
    assert reader.get_bytes("shared.sealed", 100) == b"for the reader"
    with pytest.raises(StorageAccessDenied):
        reader.put_bytes("shared.sealed", b"overwritten")
    with pytest.raises(StorageAccessDenied):
        reader.delete("shared.sealed")
    reader_headers = {"Authorization": f"Bearer {cloud.owner_token(READER)}"}
    assert requests.put(url, json=policy, headers=reader_headers, timeout=10).status_code == 403


def test_request_without_credentials_refused(mock: tuple[MockCloud, OwnerSetup]) -> None:
    cloud, owner = mock
    response = requests.get(f"{cloud.endpoints.storage}/storage/v1/b/{owner.bucket}/o", timeout=10)
    assert response.status_code == 401
