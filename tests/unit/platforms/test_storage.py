"""Object-name validation, the local blob store's atomic writes, and storage URI parsing."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sealbench.platforms.errors import (
    InvalidObjectName,
    InvalidStorageUri,
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
)
from sealbench.platforms.storage import (
    BlobStore,
    LocalBlobStore,
    join_name,
    open_storage_uri,
    parse_storage_uri,
    validate_object_name,
)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "non-empty"),
        ("/etc/passwd", "starts with '/'"),
        ("a/../../etc/passwd", "'..'"),
        ("a/./b", "'.'"),
        ("a//b", "empty path segment"),
        ("a/", "empty path segment"),
        ("a\nb", "non-printable"),
        ("a\x00b", "non-printable"),
        ("a\\..\\b", "backslash"),
        ("x" * 1025, "longer than 1024"),
        (".sealbench-tmp/x", "reserved"),
    ],
)
def test_path_traversal_and_malformed_object_names_rejected(name: str, reason: str) -> None:
    with pytest.raises(InvalidObjectName) as info:
        validate_object_name(name)
    assert reason in str(info.value)


def test_valid_object_names_accepted() -> None:
    for name in ("dek.wrapped", "cases/0001.sealed", "a/b/c-d_e.f", "ü/ñ"):
        assert validate_object_name(name) == name
    assert join_name("assets/ds1/", "cases/1") == "assets/ds1/cases/1"
    assert join_name("assets/ds1", "x") == "assets/ds1/x"


def test_local_store_round_trip(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "bucket")
    assert isinstance(store, BlobStore)
    store.put_bytes("a/b.bin", b"hello")
    store.put_stream("big", io.BytesIO(b"z" * 3_000_000), 3_000_000)
    assert store.get_bytes("a/b.bin", 5) == b"hello"
    with store.open_read("big") as handle:
        assert handle.read() == b"z" * 3_000_000
    assert list(store.list()) == ["a/b.bin", "big"]
    assert list(store.list("a/")) == ["a/b.bin"]
    assert store.exists("big") and not store.exists("nope")
    store.delete("big")
    assert not store.exists("big")
    with pytest.raises(ObjectNotFound):
        store.delete("big")
    with pytest.raises(ObjectNotFound):
        store.get_bytes("big", 10)


def test_oversized_object_rejected_by_bounded_read(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put_bytes("x", b"123456")
    with pytest.raises(ObjectTooLarge):
        store.get_bytes("x", 5)


class _FailingSource(io.RawIOBase):
    def __init__(self) -> None:
        self.sent = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.sent:
            raise OSError("network went away")
        self.sent += 1
        return b"partial data"


def test_interrupted_upload_leaves_no_partial_object(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put_bytes("obj", b"old complete version")
    with pytest.raises(StorageError):
        store.put_stream("obj", _FailingSource())  # type: ignore[arg-type]
    assert store.get_bytes("obj", 100) == b"old complete version"
    assert list(store.list()) == ["obj"]
    assert os.listdir(tmp_path / ".sealbench-tmp") == []


def test_truncated_source_with_declared_size_leaves_no_object(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(StorageError) as info:
        store.put_stream("obj", io.BytesIO(b"short"), size=100)
    assert "5 of 100" in str(info.value)
    assert not store.exists("obj")


def test_symlink_escape_from_store_rejected(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = LocalBlobStore(tmp_path / "bucket")
    (tmp_path / "bucket" / "link").symlink_to(outside)
    for name in ("link/x", "link/new-dir/x"):
        with pytest.raises(InvalidObjectName):
            store.put_bytes(name, b"escape")
    assert list(outside.iterdir()) == []


def test_storage_uris_parsed() -> None:
    gs = parse_storage_uri("gs://hospital-data/assets/ds1")
    assert (gs.scheme, gs.bucket, gs.prefix) == ("gs", "hospital-data", "assets/ds1/")
    assert parse_storage_uri("gs://hospital-data").prefix == ""
    local = parse_storage_uri("file:///srv/sealbench/assets")
    assert (local.scheme, local.path, local.prefix) == ("file", Path("/srv/sealbench/assets"), "")


def test_storage_uris_open_the_right_store(tmp_path: Path) -> None:
    store, prefix = open_storage_uri(tmp_path.as_uri())
    assert isinstance(store, LocalBlobStore) and prefix == ""
    opened: list[str] = []

    def gcs(bucket: str) -> BlobStore:
        opened.append(bucket)
        return LocalBlobStore(tmp_path / bucket)

    store, prefix = open_storage_uri("gs://hospital-data/assets/ds1", gcs)
    assert opened == ["hospital-data"] and prefix == "assets/ds1/"


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/x",
        "gs://Bad_Bucket/x",
        "gs://b/x",
        "gs://bucket/../x",
        "gs://bucket/x?generation=1",
        "file://remote-host/path",
        "file:relative/path",
        "/no/scheme",
    ],
)
def test_malformed_storage_uris_rejected(uri: str) -> None:
    with pytest.raises(InvalidStorageUri):
        parse_storage_uri(uri)


def test_gs_location_needs_a_client() -> None:
    with pytest.raises(InvalidStorageUri):
        parse_storage_uri("gs://hospital-data/x").open()
