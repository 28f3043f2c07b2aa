"""Object storage behind one small interface: the :class:`BlobStore` protocol, object-name
validation, a local-directory implementation with atomic writes, and the parser for the storage
URIs (``gs://bucket/prefix``, ``file:///path``) that name where an asset lives.

The Cloud Storage implementation lives in :mod:`sealbench.gcp.gcs` so that this module imports
no cloud SDK.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from sealbench.platforms.errors import (
    InvalidObjectName,
    InvalidStorageUri,
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
)

__all__ = [
    "COPY_CHUNK_SIZE",
    "MAX_OBJECT_NAME_BYTES",
    "BlobStore",
    "LocalBlobStore",
    "StorageLocation",
    "join_name",
    "open_storage_uri",
    "parse_storage_uri",
    "validate_object_name",
    "validate_prefix",
]

#: Cloud Storage's own limit on object names (UTF-8 bytes).
MAX_OBJECT_NAME_BYTES = 1024
#: Bytes copied per read/write when streaming into or out of a store.
COPY_CHUNK_SIZE = 1 << 20
_LOCAL_TMP_DIR = ".sealbench-tmp"


@runtime_checkable
class BlobStore(Protocol):
    """A flat namespace of immutable-once-written objects (a bucket, or a directory).

    Names are validated by :func:`validate_object_name` before any I/O. Writes are atomic: a
    reader sees the old object, or the whole new one, never a partial one.
    """

    def put_stream(self, name: str, src: BinaryIO, size: int | None = None) -> None:
        """Store everything read from ``src`` (``size`` bytes if given) under ``name``."""
        ...

    def put_bytes(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name``."""
        ...

    def open_read(self, name: str) -> AbstractContextManager[BinaryIO]:
        """Open ``name`` for streaming reads (raises :class:`ObjectNotFound`)."""
        ...

    def get_bytes(self, name: str, max_size: int) -> bytes:
        """Read all of ``name``; raises :class:`ObjectTooLarge` above ``max_size`` bytes."""
        ...

    def exists(self, name: str) -> bool:
        """Whether an object called ``name`` exists."""
        ...

    def list(self, prefix: str = "") -> Iterator[str]:
        """Names of the objects that start with ``prefix``, in lexicographic order."""
        ...

    def delete(self, name: str) -> None:
        """Remove ``name`` (raises :class:`ObjectNotFound` if absent)."""
        ...


def validate_object_name(name: str) -> str:
    """Return ``name`` if it is a safe object name, else raise :class:`InvalidObjectName`.

    Rules: non-empty; at most :data:`MAX_OBJECT_NAME_BYTES` UTF-8 bytes; printable characters
    only (no control characters, no newlines); no backslash; no leading ``/``; no empty, ``.`` or
    ``..`` segment (so no ``//`` and no trailing ``/``); not inside the local store's reserved
    temporary directory.
    """
    if not isinstance(name, str) or not name:
        raise InvalidObjectName(str(name), "must be a non-empty string")
    if len(name.encode("utf-8", errors="surrogatepass")) > MAX_OBJECT_NAME_BYTES:
        raise InvalidObjectName(name, f"longer than {MAX_OBJECT_NAME_BYTES} UTF-8 bytes")
    if not name.isprintable():
        raise InvalidObjectName(name, "contains a control or non-printable character")
    if "\\" in name:
        raise InvalidObjectName(name, "contains a backslash")
    if name.startswith("/"):
        raise InvalidObjectName(name, "starts with '/'")
    segments = name.split("/")
    for segment in segments:
        if segment == "":
            raise InvalidObjectName(name, "has an empty path segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise InvalidObjectName(name, f"has a {segment!r} path segment")
    if segments[0] == _LOCAL_TMP_DIR:
        raise InvalidObjectName(name, f"{_LOCAL_TMP_DIR!r} is reserved")
    return name


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is empty, a valid name, or a valid name followed by ``/``."""
    if prefix == "":
        return prefix
    validate_object_name(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def join_name(prefix: str, name: str) -> str:
    """``prefix`` + ``name`` with exactly one ``/`` between them, validated."""
    validate_prefix(prefix)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return validate_object_name(prefix + name)


class LocalBlobStore:
    """A :class:`BlobStore` over a local directory. Writes go to a temporary file in a reserved
    directory under ``root``, are fsynced, then renamed into place, so they are atomic."""

    def __init__(self, root: Path) -> None:
        self._root = root
        root.mkdir(parents=True, exist_ok=True)
        self._tmp = root / _LOCAL_TMP_DIR
        self._tmp.mkdir(exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self._root)!r})"

    @property
    def root(self) -> Path:
        return self._root

    def _path(self, name: str) -> Path:
        validate_object_name(name)
        path = self._root.joinpath(*name.split("/"))
        # Refuse to follow symlinks out of the store (resolve() follows every existing link,
        # including intermediate directories that do exist).
        if not path.parent.resolve().is_relative_to(self._root.resolve()):
            raise InvalidObjectName(name, "resolves outside the store")
        if path.is_symlink():
            raise InvalidObjectName(name, "is a symbolic link")
        return path

    def put_stream(self, name: str, src: BinaryIO, size: int | None = None) -> None:
        path = self._path(name)
        tmp = self._tmp / f"{secrets.token_hex(8)}.partial"
        written = 0
        try:
            with tmp.open("xb") as out:
                while True:
                    want = COPY_CHUNK_SIZE if size is None else min(COPY_CHUNK_SIZE, size - written)
                    if want == 0:
                        break
                    chunk = src.read(want)
                    if not chunk:
                        break
                    out.write(chunk)
                    written += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            if size is not None and written != size:
                raise StorageError(f"{name}: source ended after {written} of {size} bytes")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.replace(path)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise StorageError(f"cannot write {name} under {self._root}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)

    def put_bytes(self, name: str, data: bytes) -> None:
        import io

        self.put_stream(name, io.BytesIO(data), len(data))

    @contextlib.contextmanager
    def _open(self, name: str) -> Iterator[BinaryIO]:
        path = self._path(name)
        try:
            handle = path.open("rb")
        except FileNotFoundError as exc:
            raise ObjectNotFound(name, repr(self)) from exc
        except OSError as exc:
            raise StorageError(f"cannot read {name}: {exc}") from exc
        with handle:
            yield handle

    def open_read(self, name: str) -> AbstractContextManager[BinaryIO]:
        return self._open(name)

    def get_bytes(self, name: str, max_size: int) -> bytes:
        with self._open(name) as handle:
            # read(n) allocates n bytes up front: ask for what the file holds (one more byte
            # tells a file that grew past the cap), never the cap itself, so a 1 GiB cap does
            # not reserve 1 GiB under the enclave's address-space limit
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(min(size, max_size) + 1)
            if size < len(data) <= max_size:  # it grew while read: the rest, still capped
                data += handle.read(max_size + 1 - len(data))
        if len(data) > max_size:
            raise ObjectTooLarge(name, max_size)
        return data

    def exists(self, name: str) -> bool:
        return self._path(name).is_file()

    def list(self, prefix: str = "") -> Iterator[str]:
        validate_prefix(prefix)
        names: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self._root):
            rel_dir = Path(dirpath).relative_to(self._root)
            if rel_dir == Path():
                dirnames[:] = [d for d in dirnames if d != _LOCAL_TMP_DIR]
            for filename in filenames:
                rel = (rel_dir / filename).as_posix() if rel_dir != Path() else filename
                if rel.startswith(prefix):
                    names.append(rel)
        yield from sorted(names)

    def delete(self, name: str) -> None:
        path = self._path(name)
        try:
            path.unlink()
        except FileNotFoundError as exc:
            raise ObjectNotFound(name, repr(self)) from exc
        except OSError as exc:
            raise StorageError(f"cannot delete {name}: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class StorageLocation:
    """A parsed storage URI: ``scheme`` ``gs`` with ``bucket``, or ``file`` with ``path``;
    ``prefix`` is the object-name prefix inside it ("" or ending with ``/``)."""

    scheme: Literal["gs", "file"]
    bucket: str | None
    path: Path | None
    prefix: str

    def open(self, gcs_store: Callable[[str], BlobStore] | None = None) -> tuple[BlobStore, str]:
        """Return ``(store, prefix)``. ``gcs_store(bucket)`` builds the store for ``gs://``
        locations (for example ``lambda b: GcsBlobStore(client, b)``)."""
        if self.scheme == "file":
            assert self.path is not None
            return LocalBlobStore(self.path), self.prefix
        if gcs_store is None:
            raise InvalidStorageUri("a gs:// location needs a Cloud Storage client to open it")
        assert self.bucket is not None
        return gcs_store(self.bucket), self.prefix


def parse_storage_uri(uri: str) -> StorageLocation:
    """Parse ``gs://bucket[/prefix]`` or ``file:///absolute/path`` (raises InvalidStorageUri).

    For ``file://`` URIs the whole path is the store root and the prefix is empty.
    """
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise InvalidStorageUri(f"{uri!r}: storage URIs take no query or fragment")
    if parts.scheme == "gs":
        bucket = parts.netloc
        if not _valid_bucket(bucket):
            raise InvalidStorageUri(f"{uri!r}: {bucket!r} is not a valid bucket name")
        prefix = parts.path.lstrip("/")
        if prefix:
            try:
                validate_prefix(prefix)
            except InvalidObjectName as exc:
                raise InvalidStorageUri(f"{uri!r}: bad prefix: {exc.reason}") from exc
            if not prefix.endswith("/"):
                prefix += "/"
        return StorageLocation("gs", bucket, None, prefix)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidStorageUri(f"{uri!r}: file URIs must be local (file:///path)")
        path = Path(unquote(parts.path))
        if not path.is_absolute():
            raise InvalidStorageUri(f"{uri!r}: file URIs need an absolute path")
        return StorageLocation("file", None, path, "")
    raise InvalidStorageUri(f"{uri!r}: expected gs://bucket/prefix or file:///path")


def _valid_bucket(bucket: str) -> bool:
    if not 3 <= len(bucket) <= 63:
        return False
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
    return set(bucket) <= allowed and bucket[0].isalnum() and bucket[-1].isalnum()


def open_storage_uri(
    uri: str, gcs_store: Callable[[str], BlobStore] | None = None
) -> tuple[BlobStore, str]:
    """Parse ``uri`` and return ``(store, prefix)``; ``gs://`` needs ``gcs_store(bucket)``."""
    return parse_storage_uri(uri).open(gcs_store)
