"""The sealed-asset format: how a prepared dataset or a model is laid out, encrypted, in its
owner's bucket. Pure format logic; storage is injected (a ``put(name, data)`` callable on the
writing side, ciphertext bytes on the reading side; for model weights, streams both ways, so a
model of hundreds of MB is never held whole while sealed and held once, as plaintext, when opened).

Objects of a sealed **dataset** (all under the asset's prefix)::

    dek.wrapped          WrappedKey record (sealbench.crypto.envelope), AAD =
                         asset_aad("dataset", asset_id, manifest_digest)
    manifest.sealed      streaming-AEAD ciphertext of the asset index (below)
    cases/<opaque>.sealed  one object per folder of files (a case): streaming-AEAD ciphertext of
                         a bundle of the files directly in that folder
    meta/<opaque>.sealed   files at the root of the tree (if any), bundled the same way

Objects of a sealed **model**::

    dek.wrapped          AAD = asset_aad("model", asset_id, weights_digest)
    weights.sealed       streaming-AEAD ciphertext of the ONNX bytes

Every object is encrypted with the asset's DEK and the associated data
``canonical_json({"asset_id": …, "format": 1, "object": <object name>})``, so an object moved
to another name or copied from another asset fails authentication.

Object names reveal nothing: ``<opaque>`` is the first 32 hex digits of
HMAC-SHA256(K, group), where K = HKDF-SHA256(DEK, info="sealbench object names v1") and group is
the folder's relative path. Names are therefore stable for a given DEK (so an interrupted upload can
resume) and unlinkable to case identifiers without the key.

The **asset index** (plaintext of ``manifest.sealed``) is canonical JSON::

    {"asset_id": str, "format": 1, "kind": "dataset",
     "manifest": <the canonical manifest, as a JSON object>,
     "objects": [{"files": [relative path, …], "name": object name}, …]}

Every manifest entry appears in exactly one object's ``files``. The reader checks the manifest's
digest against the expected data digest before anything else is trusted.

A **bundle** (plaintext of a case object), all integers big-endian::

    magic  b"SBB1"                       4 bytes
    count  uint16                         number of files
    count x (path_len uint16 ‖ path UTF-8 ‖ size uint64)
    file contents, concatenated in header order

Bundles are verified file by file against the manifest (path, size, SHA-256) and must hold
exactly the files the index lists for that object.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import BinaryIO, Final, Literal, cast

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.envelope import DataKey
from sealbench.crypto.errors import DigestMismatchError, IntegrityError, ManifestError
from sealbench.crypto.manifest import Manifest
from sealbench.crypto.streaming import (
    HEADER_SIZE,
    SEGMENT_SIZE,
    ciphertext_size,
    decrypt_bytes,
    decrypt_stream,
    encrypt_bytes,
    encrypt_stream,
)

__all__ = [
    "DEK_OBJECT",
    "FORMAT_VERSION",
    "MANIFEST_OBJECT",
    "MAX_WEIGHTS_BYTES",
    "WEIGHTS_OBJECT",
    "AssetIndex",
    "IndexedObject",
    "build_index",
    "group_of",
    "object_aad",
    "object_name",
    "open_bundle",
    "open_index",
    "open_weights",
    "open_weights_stream",
    "pack_bundle",
    "seal_bundle",
    "seal_index",
    "seal_weights",
    "seal_weights_stream",
    "verify_weights_stream",
    "weights_ciphertext_size",
    "weights_size",
]

FORMAT_VERSION: Final = 1
DEK_OBJECT: Final = "dek.wrapped"
MANIFEST_OBJECT: Final = "manifest.sealed"
WEIGHTS_OBJECT: Final = "weights.sealed"

_BUNDLE_MAGIC: Final = b"SBB1"
_MAX_INDEX_BYTES: Final = 64 << 20
_MAX_BUNDLE_FILES: Final = 1024
_NAME_INFO: Final = b"sealbench object names v1"
#: Largest model (ONNX bytes) sealed or opened: the platform's cap, which a benchmark's model
#: contract may lower (BraTS: the same 512 MiB, WDBC: 64 MiB) but never raise.
MAX_WEIGHTS_BYTES: Final = 512 << 20
_TAG_SIZE: Final = ciphertext_size(0) - HEADER_SIZE

AssetKind = Literal["dataset", "model"]


@dataclass(frozen=True)
class IndexedObject:
    """One sealed object of a dataset and the manifest paths it carries."""

    name: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class AssetIndex:
    """The plaintext of ``manifest.sealed``."""

    asset_id: str
    manifest: Manifest
    objects: tuple[IndexedObject, ...]

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "asset_id": self.asset_id,
                "format": FORMAT_VERSION,
                "kind": "dataset",
                "manifest": json.loads(self.manifest.to_bytes()),
                "objects": [{"files": list(o.files), "name": o.name} for o in self.objects],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> AssetIndex:
        if len(data) > _MAX_INDEX_BYTES:
            raise ManifestError(f"asset index of {len(data)} bytes exceeds the cap")
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT_VERSION or doc.get("kind") != "dataset":
                raise ManifestError("asset index: unknown format or kind")
            manifest = Manifest.from_bytes(canonical_json(doc["manifest"]))
            objects = tuple(
                IndexedObject(name=str(o["name"]), files=tuple(str(f) for f in o["files"]))
                for o in doc["objects"]
            )
            index = cls(asset_id=str(doc["asset_id"]), manifest=manifest, objects=objects)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError("asset index is malformed") from exc
        index._check_coverage()
        return index

    def _check_coverage(self) -> None:
        listed = [f for o in self.objects for f in o.files]
        expected = sorted(e.path for e in self.manifest.entries)
        if sorted(listed) != expected or len(set(listed)) != len(listed):
            raise ManifestError("asset index does not cover every manifest entry exactly once")
        if len({o.name for o in self.objects}) != len(self.objects):
            raise ManifestError("asset index names an object twice")


def group_of(path: str) -> str:
    """The group (object) a manifest path belongs to: the folder that holds it (a case folder
    such as ``cases/BraTS-GLI-00001-000``), or "" for files at the root of the tree."""
    head, sep, _ = path.rpartition("/")
    return head if sep else ""


def object_name(dek: DataKey, group: str) -> str:
    """The opaque object name of ``group`` under ``dek``."""
    name_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_NAME_INFO).derive(
        dek.secret_bytes()
    )
    tag = hmac.new(name_key, group.encode("utf-8"), hashlib.sha256).hexdigest()[:32]
    return f"{'cases' if group else 'meta'}/{tag}.sealed"


def object_aad(asset_id: str, name: str) -> bytes:
    """Associated data of the object ``name`` of asset ``asset_id``."""
    return canonical_json({"asset_id": asset_id, "format": FORMAT_VERSION, "object": name})


def build_index(dek: DataKey, asset_id: str, manifest: Manifest) -> AssetIndex:
    """Group the manifest's files into objects with opaque names."""
    groups: dict[str, list[str]] = {}
    for entry in manifest.entries:
        groups.setdefault(group_of(entry.path), []).append(entry.path)
    objects = tuple(
        IndexedObject(name=object_name(dek, group), files=tuple(files))
        for group, files in sorted(groups.items())
    )
    index = AssetIndex(asset_id=asset_id, manifest=manifest, objects=objects)
    index._check_coverage()
    return index


def seal_index(dek: DataKey, index: AssetIndex) -> bytes:
    """Ciphertext of ``manifest.sealed``."""
    return encrypt_bytes(
        dek.secret_bytes(), index.to_bytes(), object_aad(index.asset_id, MANIFEST_OBJECT)
    )


def open_index(
    dek: DataKey, asset_id: str, ciphertext: bytes, expected_digest: Sha256Digest
) -> AssetIndex:
    """Decrypt and parse ``manifest.sealed``; raise unless it is this asset's and its manifest
    digest is ``expected_digest``."""
    plaintext = decrypt_bytes(dek.secret_bytes(), ciphertext, object_aad(asset_id, MANIFEST_OBJECT))
    index = AssetIndex.from_bytes(plaintext)
    if index.asset_id != asset_id:
        raise IntegrityError("the asset index belongs to another asset")
    if index.manifest.digest != expected_digest:
        raise DigestMismatchError("dataset manifest", expected_digest, index.manifest.digest)
    return index


def pack_bundle(files: Iterable[tuple[str, bytes]]) -> bytes:
    """Serialise ``(path, content)`` pairs as a bundle."""
    items = list(files)
    if len(items) > _MAX_BUNDLE_FILES:
        raise ManifestError(f"a bundle holds at most {_MAX_BUNDLE_FILES} files")
    header = [_BUNDLE_MAGIC, struct.pack(">H", len(items))]
    for path, content in items:
        raw = path.encode("utf-8")
        header.append(struct.pack(">H", len(raw)) + raw + struct.pack(">Q", len(content)))
    return b"".join(header + [content for _, content in items])


def seal_bundle(
    dek: DataKey, asset_id: str, obj: IndexedObject, read: Callable[[str], bytes]
) -> bytes:
    """Ciphertext of one case object; ``read(path)`` returns a file's plaintext."""
    plaintext = pack_bundle((path, read(path)) for path in obj.files)
    return encrypt_bytes(dek.secret_bytes(), plaintext, object_aad(asset_id, obj.name))


def open_bundle(
    dek: DataKey, index: AssetIndex, obj: IndexedObject, ciphertext: bytes
) -> Mapping[str, bytes]:
    """Decrypt one case object and verify every file against the manifest. Returns the files
    by manifest path. Any mismatch raises (an :class:`IntegrityError` subclass)."""
    plaintext = decrypt_bytes(dek.secret_bytes(), ciphertext, object_aad(index.asset_id, obj.name))
    files = _unpack_bundle(plaintext)
    if tuple(files) != obj.files:
        raise IntegrityError(f"object {obj.name} does not hold the files its index lists")
    for path, content in files.items():
        index.manifest.verify(path, content)
    return files


def _unpack_bundle(data: bytes) -> dict[str, bytes]:
    view = memoryview(data)
    try:
        if bytes(view[:4]) != _BUNDLE_MAGIC:
            raise IntegrityError("bundle: bad magic")
        (count,) = struct.unpack_from(">H", view, 4)
        pos = 6
        header: list[tuple[str, int]] = []
        for _ in range(count):
            (plen,) = struct.unpack_from(">H", view, pos)
            path = bytes(view[pos + 2 : pos + 2 + plen]).decode("utf-8")
            (size,) = struct.unpack_from(">Q", view, pos + 2 + plen)
            header.append((path, size))
            pos += 2 + plen + 8
    except (struct.error, UnicodeDecodeError) as exc:
        raise IntegrityError("bundle: malformed header") from exc
    files: dict[str, bytes] = {}
    for path, size in header:
        if pos + size > len(data) or path in files:
            raise IntegrityError("bundle: malformed body")
        files[path] = bytes(view[pos : pos + size])
        pos += size
    if pos != len(data):
        raise IntegrityError("bundle: trailing bytes")
    return files


def seal_weights(dek: DataKey, asset_id: str, weights: bytes) -> bytes:
    """Ciphertext of ``weights.sealed``."""
    return encrypt_bytes(dek.secret_bytes(), weights, object_aad(asset_id, WEIGHTS_OBJECT))


def open_weights(
    dek: DataKey, asset_id: str, ciphertext: bytes, expected_digest: Sha256Digest
) -> bytes:
    """Decrypt ``weights.sealed`` and check the weights hash to ``expected_digest``."""
    weights = decrypt_bytes(dek.secret_bytes(), ciphertext, object_aad(asset_id, WEIGHTS_OBJECT))
    actual = sha256_digest(weights)
    if actual != expected_digest:
        raise DigestMismatchError("model weights", expected_digest, actual)
    return weights


# -- model weights, streamed -------------------------------------------------------------------
#
# Same object, same bytes as seal_weights/open_weights (the streaming AEAD's format does not
# depend on how the plaintext is fed to it); only the memory differs: a model of hundreds of MB
# is never held whole on the sealing side, and held exactly once (the plaintext) when opened.


def weights_ciphertext_size(plaintext_size: int) -> int:
    """Size of ``weights.sealed`` for weights of ``plaintext_size`` bytes."""
    return ciphertext_size(plaintext_size)


def weights_size(ciphertext_bytes: int) -> int:
    """The plaintext size of a ``weights.sealed`` of ``ciphertext_bytes`` bytes, or
    :class:`IntegrityError` if no ciphertext has that size (so it cannot be authentic)."""
    if ciphertext_bytes <= SEGMENT_SIZE:
        segments = 1
    else:
        segments = 1 + -(-(ciphertext_bytes - SEGMENT_SIZE) // SEGMENT_SIZE)
    size = ciphertext_bytes - HEADER_SIZE - _TAG_SIZE * segments
    if size < 0 or ciphertext_size(size) != ciphertext_bytes:
        raise IntegrityError()
    return size


class _HashingReader:
    """Reads at most ``limit`` bytes of ``src`` and hashes what it hands out."""

    def __init__(self, src: BinaryIO, limit: int) -> None:
        self._src = src
        self._left = limit
        self.hash = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        data = self._src.read(want) if want else b""
        self._took(data)
        return data

    def readinto(self, buf: memoryview) -> int:
        view = memoryview(buf).cast("B")[: self._left]
        readinto = getattr(self._src, "readinto", None)
        if readinto is None:
            data = self._src.read(len(view))
            view[: len(data)] = data
            n = len(data)
        else:
            n = readinto(view) or 0
        self._took(view[:n])
        return n

    def _took(self, data: bytes | memoryview) -> None:
        self.hash.update(data)
        self.count += len(data)
        self._left -= len(data)


class _Sink:
    """A write-only destination for :func:`decrypt_stream` that hashes what it receives and
    either drops it (``view`` None) or copies it into ``view``, refusing to run past its end."""

    def __init__(self, view: memoryview | None, limit: int) -> None:
        self._view = view
        self._limit = limit
        self.hash = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes | memoryview) -> int:
        n = len(data)
        end = self.count + n
        if end > self._limit:
            raise IntegrityError()  # more plaintext than the object's size allows
        if self._view is not None:
            self._view[self.count : end] = data
        self.hash.update(data)
        self.count = end
        return n

    def digest(self) -> Sha256Digest:
        return Sha256Digest("sha256:" + self.hash.hexdigest())


def _zero(view: memoryview) -> None:
    """Overwrite ``view`` with zeros, one segment at a time (no allocation of its size)."""
    zeros = bytes(min(SEGMENT_SIZE, len(view)))
    for start in range(0, len(view), SEGMENT_SIZE):
        end = min(start + SEGMENT_SIZE, len(view))
        view[start:end] = zeros[: end - start]


def seal_weights_stream(
    dek: DataKey,
    asset_id: str,
    src: BinaryIO,
    dst: BinaryIO,
    expected_digest: Sha256Digest,
    max_size: int = MAX_WEIGHTS_BYTES,
) -> int:
    """Encrypt the weights readable from ``src`` as ``weights.sealed`` into ``dst``, one segment
    at a time, hashing them as they are read; return the ciphertext size.

    Raises :class:`DigestMismatchError` if what was read is not the ``expected_digest`` the data
    key is bound to (the file changed after it was hashed), or holds more than ``max_size``
    bytes; ``dst`` then holds a useless ciphertext that the caller discards.
    """
    reader = _HashingReader(src, max_size + 1)
    written = encrypt_stream(
        dek.secret_bytes(), cast(BinaryIO, reader), dst, object_aad(asset_id, WEIGHTS_OBJECT)
    )
    actual = Sha256Digest("sha256:" + reader.hash.hexdigest())
    if reader.count > max_size or actual != expected_digest:
        raise DigestMismatchError("model weights", expected_digest, actual)
    return written


def verify_weights_stream(
    dek: DataKey,
    asset_id: str,
    src: BinaryIO,
    expected_digest: Sha256Digest,
    max_size: int = MAX_WEIGHTS_BYTES,
) -> None:
    """Check that the ``weights.sealed`` readable from ``src`` authenticates and holds weights
    of ``expected_digest`` (at most ``max_size`` bytes), keeping no plaintext; raises
    :class:`IntegrityError` (or :class:`DigestMismatchError`) otherwise."""
    sink = _Sink(None, max_size)
    decrypt_stream(
        dek.secret_bytes(), src, cast(BinaryIO, sink), object_aad(asset_id, WEIGHTS_OBJECT)
    )
    actual = sink.digest()
    if actual != expected_digest:
        raise DigestMismatchError("model weights", expected_digest, actual)


def open_weights_stream(
    dek: DataKey,
    asset_id: str,
    src: BinaryIO,
    ciphertext_bytes: int,
    expected_digest: Sha256Digest,
) -> bytes:
    """Decrypt the ``weights.sealed`` of ``ciphertext_bytes`` bytes readable from ``src`` and
    return the weights, checked against ``expected_digest``.

    The plaintext buffer is allocated once, at the size the ciphertext's size implies, and each
    segment is decrypted and hashed straight into it as it is read; the ciphertext is never held
    whole, and the returned ``bytes`` are that same buffer (no copy). The caller bounds
    ``ciphertext_bytes`` before calling. A stream that is shorter or longer than
    ``ciphertext_bytes``, damaged, or sealed for another asset raises :class:`IntegrityError`, a
    digest other than ``expected_digest`` :class:`DigestMismatchError`; the buffer is then zeroed
    before it is released.
    """
    size = weights_size(ciphertext_bytes)
    buf = io.BytesIO()
    if size:
        buf.seek(size - 1)
        buf.write(b"\0")
    with buf.getbuffer() as view:
        sink = _Sink(view, size)
        try:
            decrypt_stream(
                dek.secret_bytes(),
                src,
                cast(BinaryIO, sink),
                object_aad(asset_id, WEIGHTS_OBJECT),
            )
            if sink.count != size:
                raise IntegrityError()
            actual = sink.digest()
            if actual != expected_digest:
                raise DigestMismatchError("model weights", expected_digest, actual)
        except BaseException:
            _zero(view[: sink.count])  # fail closed: no plaintext left behind
            raise
    # CPython hands over the BytesIO's own bytes object here (no copy) once no view is held.
    return buf.getvalue()
