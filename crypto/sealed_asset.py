"""The sealed-asset format: how a prepared dataset or a model is laid out, encrypted, in its
owner's bucket. Pure format logic; storage is injected (a ``put(name, data)`` callable on the
writing side, ciphertext bytes on the reading side).

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
import json
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.envelope import DataKey
from sealbench.crypto.errors import DigestMismatchError, IntegrityError, ManifestError
from sealbench.crypto.manifest import Manifest
from sealbench.crypto.streaming import decrypt_bytes, encrypt_bytes

__all__ = [
    "DEK_OBJECT",
    "FORMAT_VERSION",
    "MANIFEST_OBJECT",
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
    "pack_bundle",
    "seal_bundle",
    "seal_index",
    "seal_weights",
]

FORMAT_VERSION: Final = 1
DEK_OBJECT: Final = "dek.wrapped"
MANIFEST_OBJECT: Final = "manifest.sealed"
WEIGHTS_OBJECT: Final = "weights.sealed"

_BUNDLE_MAGIC: Final = b"SBB1"
_MAX_INDEX_BYTES: Final = 64 << 20
_MAX_BUNDLE_FILES: Final = 1024
_NAME_INFO: Final = b"sealbench object names v1"

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
