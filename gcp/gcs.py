"""The :class:`~sealbench.platforms.storage.BlobStore` over Google Cloud Storage
(``google-cloud-storage``): streaming downloads, resumable chunked uploads for large objects,
endpoint and credentials injected, every call bounded by a named timeout. Used unchanged against
the mock's storage emulator (only ``api_endpoint`` differs).

Whole-object transfers are checked with CRC32C: a download whose bytes do not match the checksum
the store keeps (an object altered at rest or in transit) raises
:class:`~sealbench.platforms.errors.ObjectCorrupted` naming the object, as does an upload that the
store received altered. Ranged reads (:meth:`GcsBlobStore.open_read`) carry no whole-object
checksum; their callers authenticate what they read. When the library's own cleanup of a
corrupted resumable upload fails (``objectCreator`` may not delete), the error is still
:class:`~sealbench.platforms.errors.ObjectCorrupted`, the refused cleanup noted in its message."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, BinaryIO, NoReturn, cast

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage  # type: ignore[attr-defined]
from google.cloud.storage.exceptions import DataCorruption  # type: ignore[import-untyped]

from sealbench.gcp.credentials import safe_auth_reason
from sealbench.gcp.failures import perimeter_violation
from sealbench.platforms.errors import (
    CredentialError,
    ObjectCorrupted,
    ObjectNotFound,
    ObjectTooLarge,
    ServicePerimeterDenied,
    StorageAccessDenied,
    StorageError,
)
from sealbench.platforms.storage import validate_object_name, validate_prefix

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = [
    "DOWNLOAD_CHUNK_SIZE",
    "GCS_TIMEOUT_S",
    "RESUMABLE_THRESHOLD",
    "UPLOAD_CHUNK_SIZE",
    "GcsBlobStore",
    "make_storage_client",
]

#: Seconds allowed for each HTTP request to Cloud Storage (connect + read of one request).
GCS_TIMEOUT_S = 120.0
#: Objects at or above this size (or of unknown size) use a resumable upload.
RESUMABLE_THRESHOLD = 8 * 1024 * 1024
#: Bytes sent per resumable-upload request (a multiple of 256 KiB, as Cloud Storage requires).
UPLOAD_CHUNK_SIZE = 16 * 1024 * 1024
#: Bytes fetched per ranged request when streaming a download.
DOWNLOAD_CHUNK_SIZE = 8 * 1024 * 1024


def make_storage_client(
    project: str | None,
    credentials: Credentials | None,
    api_endpoint: str | None = None,
) -> storage.Client:
    """Build a ``storage.Client``; ``api_endpoint`` (e.g. ``http://127.0.0.1:9023``) points it
    at an emulator or the mock while keeping the credentials in use."""
    options = {"api_endpoint": api_endpoint} if api_endpoint else None
    return storage.Client(project=project, credentials=credentials, client_options=options)


class GcsBlobStore:
    """A :class:`BlobStore` over one Cloud Storage bucket."""

    def __init__(self, client: storage.Client, bucket: str) -> None:
        self._client = client
        self._bucket = client.bucket(bucket)
        self._where = f"gs://{bucket}"

    def __repr__(self) -> str:
        return f"GcsBlobStore({self._where!r})"

    def _blob(self, name: str) -> storage.Blob:
        return self._bucket.blob(validate_object_name(name))

    def _translate(self, exc: Exception, name: str, action: str) -> NoReturn:
        if isinstance(exc, DataCorruption):
            raise ObjectCorrupted(name, self._where, action) from exc
        corruption = exc.__context__
        if isinstance(corruption, DataCorruption):
            # google-cloud-storage deletes a resumable upload that failed its checksum; when that
            # cleanup fails (a write-only objectCreator grant may not delete), its error would
            # hide the corruption. The corruption is the error; the failed cleanup is noted.
            detail = exc.message if isinstance(exc, gexc.GoogleAPIError) and hasattr(
                exc, "message") else type(exc).__name__
            raise ObjectCorrupted(
                name, self._where, action,
                cleanup=f"the corrupted object could not be deleted afterwards: {detail}",
            ) from corruption
        if isinstance(exc, gexc.NotFound):
            raise ObjectNotFound(name, self._where) from exc
        reference = perimeter_violation(exc)
        if reference is not None:  # no grant admits it: never a refusal to wait out
            raise ServicePerimeterDenied(service="storage.googleapis.com", resource=self._where,
                                         reference=reference) from exc
        if isinstance(exc, gexc.Forbidden | gexc.Unauthorized):
            raise StorageAccessDenied(
                f"permission denied to {action} {name} in {self._where}: {exc.message}"
            ) from exc
        if isinstance(exc, auth_exc.GoogleAuthError):
            raise CredentialError(f"no credential to {action} {name} in {self._where} "
                                  f"({safe_auth_reason(exc)})") from exc
        raise StorageError(f"cannot {action} {name} in {self._where}: {exc}") from exc

    def put_stream(self, name: str, src: BinaryIO, size: int | None = None) -> None:
        blob = self._blob(name)
        if size is None or size >= RESUMABLE_THRESHOLD:
            blob.chunk_size = UPLOAD_CHUNK_SIZE
        try:
            blob.upload_from_file(src, size=size, timeout=GCS_TIMEOUT_S, checksum="crc32c")
        except (
            gexc.GoogleAPIError,
            auth_exc.GoogleAuthError,
            DataCorruption,
            OSError,
            ValueError,
        ) as exc:
            self._translate(exc, name, "upload")

    def put_bytes(self, name: str, data: bytes) -> None:
        self.put_stream(name, io.BytesIO(data), len(data))

    @contextlib.contextmanager
    def _open(self, name: str) -> Iterator[BinaryIO]:
        blob = self._blob(name)
        try:
            blob.reload(timeout=GCS_TIMEOUT_S)
            reader = blob.open(
                "rb",
                chunk_size=DOWNLOAD_CHUNK_SIZE,
                if_generation_match=blob.generation,
                timeout=GCS_TIMEOUT_S,
            )
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, OSError) as exc:
            self._translate(exc, name, "read")
        try:
            with reader:
                yield cast(BinaryIO, reader)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, DataCorruption) as exc:
            self._translate(exc, name, "read")

    def open_read(self, name: str) -> AbstractContextManager[BinaryIO]:
        return self._open(name)

    def get_bytes(self, name: str, max_size: int) -> bytes:
        blob = self._blob(name)
        try:
            blob.reload(timeout=GCS_TIMEOUT_S)
            if blob.size is not None and blob.size > max_size:
                raise ObjectTooLarge(name, max_size)
            data: bytes = blob.download_as_bytes(
                if_generation_match=blob.generation, timeout=GCS_TIMEOUT_S, checksum="crc32c"
            )
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, DataCorruption, OSError) as exc:
            self._translate(exc, name, "read")
        if len(data) > max_size:
            raise ObjectTooLarge(name, max_size)
        return data

    def exists(self, name: str) -> bool:
        blob = self._blob(name)
        try:
            return bool(blob.exists(timeout=GCS_TIMEOUT_S))
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, OSError) as exc:
            self._translate(exc, name, "stat")

    def list(self, prefix: str = "") -> Iterator[str]:
        validate_prefix(prefix)
        try:
            for blob in self._client.list_blobs(
                self._bucket, prefix=prefix or None, timeout=GCS_TIMEOUT_S
            ):
                yield str(blob.name)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, OSError) as exc:
            self._translate(exc, prefix, "list")

    def delete(self, name: str) -> None:
        blob = self._blob(name)
        try:
            blob.delete(timeout=GCS_TIMEOUT_S)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, OSError) as exc:
            self._translate(exc, name, "delete")
