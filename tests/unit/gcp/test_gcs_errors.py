"""GcsBlobStore translates google-cloud-storage's checksum failures into
:class:`~sealbench.platforms.errors.ObjectCorrupted` naming the object. A fake HTTP transport (a
``requests`` adapter) stands in for Cloud Storage, so the library's own CRC32C validation runs."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import google_crc32c
import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage  # type: ignore[attr-defined]
from urllib3 import HTTPResponse

import sealbench.platforms
from sealbench.gcp.gcs import GcsBlobStore
from sealbench.platforms.errors import ObjectCorrupted, StorageError

BUCKET = "hospital-sealed"
NAME = "datasets/7/cases/3f9a1c.sealed"
STORED = b"sealed ciphertext of one case"


def _crc32c(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


@dataclass
class FakeGcs(requests.adapters.HTTPAdapter):
    """One object; ``served`` is what a download returns, with the checksum of ``STORED``
    (an object altered at rest), and a finished upload is answered with ``upload_crc32c``."""

    served: bytes = STORED
    upload_crc32c: str | None = None
    paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def send(self, request: Any, *args: Any, **kwargs: Any) -> requests.Response:
        path = unquote(urlsplit(request.url).path)
        self.paths.append(f"{request.method} {path}")
        status = 200
        if path.startswith("/download/"):
            body, headers = self.served, {"x-goog-hash": f"crc32c={_crc32c(STORED)}"}
        elif request.method == "POST" and path.startswith("/upload/"):  # start a resumable upload
            body, headers = b"", {"Location": f"{request.url}&upload_id=u1"}
        elif request.method == "DELETE":
            body, headers, status = b"", {}, 204
        else:
            crc = self.upload_crc32c if path.startswith("/upload/") else None
            body = json.dumps(
                {
                    "bucket": BUCKET,
                    "name": NAME,
                    "size": str(len(STORED)),
                    "generation": "1",
                    "crc32c": crc or _crc32c(STORED),
                }
            ).encode()
            headers = {"Content-Type": "application/json"}
        raw = HTTPResponse(
            body=io.BytesIO(body), headers=headers, status=status, preload_content=False
        )
        return self.build_response(request, raw)


def _store(fake: FakeGcs) -> GcsBlobStore:
    session = requests.Session()
    session.mount("https://", fake)
    client = storage.Client(
        project="p",
        credentials=AnonymousCredentials(),
        _http=session,
        client_options={"api_endpoint": "https://storage.test.invalid"},
    )
    return GcsBlobStore(client, BUCKET)


def test_object_altered_at_rest_reported_as_corrupted_not_foreign_error() -> None:
    fake = FakeGcs(served=STORED[:5] + bytes([STORED[5] ^ 0x01]) + STORED[6:])
    with pytest.raises(ObjectCorrupted) as info:
        _store(fake).get_bytes(NAME, 1 << 20)
    assert info.value.name == NAME and info.value.action == "read"
    assert str(info.value) == (
        f"object {NAME} in gs://{BUCKET} failed its integrity check on read: "
        "its bytes do not match the store's checksum"
    )
    assert type(info.value.__cause__).__name__ == "DataCorruption"
    assert "sealed ciphertext" not in str(info.value)  # never the contents
    assert any(p.startswith("GET /download/") for p in fake.paths)  # the real download ran


def test_intact_object_read() -> None:
    assert _store(FakeGcs()).get_bytes(NAME, 1 << 20) == STORED


def test_upload_received_altered_reported_as_corrupted() -> None:
    # A resumable upload (size unknown): the library compares the store's CRC32C of the
    # finished object with the bytes it sent.
    fake = FakeGcs(upload_crc32c=_crc32c(b"something else"))
    with pytest.raises(ObjectCorrupted) as info:
        _store(fake).put_stream(NAME, io.BytesIO(STORED))
    assert info.value.action == "upload" and NAME in str(info.value)
    assert type(info.value.__cause__).__name__ == "DataCorruption"


def test_object_corrupted_is_a_public_storage_error() -> None:
    assert issubclass(ObjectCorrupted, StorageError)
    assert "ObjectCorrupted" in sealbench.platforms.__all__
    assert sealbench.platforms.ObjectCorrupted is ObjectCorrupted
