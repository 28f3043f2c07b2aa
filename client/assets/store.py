"""Sealing a prepared dataset or an ONNX model into its owner's bucket (the library behind
``sealbench dataset seal`` / ``sealbench model seal``), in the layout of
:mod:`sealbench.crypto.sealed_asset`.

Order of uploads, chosen so that an interrupted seal resumes with the same key and never leaves
a state the enclave would accept half-done:

1. ``dek.wrapped`` first: a fresh DEK wrapped by the owner's :class:`KeyWrapper` with the AAD
   ``asset_aad(kind, asset_id, digest)``. On resume the existing record is unwrapped (so the
   DEK, and with it every opaque object name, comes back); a record bound to another digest
   or asset id stops the seal.
2. the content objects (``cases/<opaque>.sealed`` and ``meta/<opaque>.sealed``, or
   ``weights.sealed``); an object already present is downloaded, decrypted and verified
   against the manifest, and kept only if it holds exactly the right content.
3. ``manifest.sealed`` last (datasets), so its presence marks a complete upload.

Grouping (``sealed_asset.build_index``): one object per **case folder** (the parent folder of
each file: ``cases/<id>`` in the prepared layout ``data/cases/<id>/<id>-<part>.nii.gz``), files
at the root of ``data/`` (``dataset.json``, ``statistics.json``) in one metadata object.
The dataset's identity is the manifest digest of ``prepared_dir/data``, as the preparation
report states it.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.envelope import (
    DataKey,
    KeyWrapper,
    WrappedKey,
    asset_aad,
    unwrap_key,
    wrap_key,
)
from sealbench.crypto.errors import CryptoError, DigestMismatchError
from sealbench.crypto.manifest import Manifest, build_manifest
from sealbench.crypto.sealed_asset import (
    DEK_OBJECT,
    MANIFEST_OBJECT,
    MAX_WEIGHTS_BYTES,
    WEIGHTS_OBJECT,
    AssetIndex,
    IndexedObject,
    build_index,
    open_bundle,
    open_index,
    seal_bundle,
    seal_index,
    seal_weights_stream,
    verify_weights_stream,
)
from sealbench.platforms import BlobStore, CloudError, ObjectNotFound, join_name

__all__ = [
    "DATA_DIR",
    "ProgressFn",
    "SealReport",
    "SealingError",
    "case_index",
    "seal_dataset",
    "seal_model",
]

_log = logging.getLogger("sealbench.client")

DATA_DIR: Final = "data"
_MAX_WRAPPED: Final = 64 * 1024
_MAX_OBJECT: Final = 1 << 30
_HASH_CHUNK: Final = 1 << 20

#: ``progress(done, total)`` after each object.
ProgressFn = Callable[[int, int], None]


class SealingError(Exception):
    """The asset cannot be sealed at this destination (message names the reason, no secrets)."""


@dataclass(frozen=True)
class SealReport:
    """What a seal did: the asset's identity, and objects uploaded vs. found already correct."""

    asset_id: str
    kind: Literal["dataset", "model"]
    digest: Sha256Digest
    objects: int
    uploaded: int
    reused: int
    resumed_key: bool


def case_index(dek: DataKey, asset_id: str, manifest: Manifest) -> AssetIndex:
    """The asset index with one object per case folder (see the module docstring)."""
    try:  # the reader's own checks: every file in exactly one object, names unique
        return AssetIndex.from_bytes(build_index(dek, asset_id, manifest).to_bytes())
    except CryptoError as exc:
        raise SealingError(f"cannot index the dataset: {exc}") from exc


def _data_key(
    kind: Literal["dataset", "model"],
    asset_id: str,
    digest: Sha256Digest,
    wrapper: KeyWrapper,
    store: BlobStore,
    prefix: str,
) -> tuple[DataKey, bool]:
    """The asset's DEK: unwrapped from an existing ``dek.wrapped`` (resume), else fresh, wrapped
    and stored before anything else."""
    aad = asset_aad(kind, asset_id, digest)
    name = join_name(prefix, DEK_OBJECT)
    try:
        record = store.get_bytes(name, _MAX_WRAPPED)
    except ObjectNotFound:
        dek = DataKey.generate()
        store.put_bytes(name, wrap_key(wrapper, dek, aad).to_bytes())
        return dek, False
    try:
        return unwrap_key(wrapper, WrappedKey.from_bytes(record), aad), True
    except CloudError:
        raise  # the KMS refused or failed: not a statement about the record
    except CryptoError as exc:
        raise SealingError(
            f"{name} already holds a key for another asset or content ({exc}); seal to a new prefix"
        ) from exc


def _present_and_valid(store: BlobStore, name: str, check: Callable[[bytes], object]) -> bool:
    try:
        ciphertext = store.get_bytes(name, _MAX_OBJECT)
    except ObjectNotFound:
        return False
    try:
        check(ciphertext)
    except CryptoError:
        _log.warning("replacing %s: it does not hold the expected content", name)
        return False
    return True


def seal_dataset(
    prepared_dir: Path,
    *,
    asset_id: str,
    key_wrapper: KeyWrapper,
    store: BlobStore,
    prefix: str,
    progress: ProgressFn | None = None,
) -> SealReport:
    """Seal ``prepared_dir/data`` (a prepared dataset) under ``prefix`` of ``store``."""
    data = Path(prepared_dir) / DATA_DIR
    if not data.is_dir():
        raise SealingError(f"{prepared_dir} is not a prepared dataset (no {DATA_DIR}/ folder)")
    try:
        manifest = build_manifest(data)
    except CryptoError as exc:
        raise SealingError(f"cannot describe {data}: {exc}") from exc
    try:
        dek, resumed = _data_key("dataset", asset_id, manifest.digest, key_wrapper, store, prefix)
        index = case_index(dek, asset_id, manifest)
        total = len(index.objects) + 1
        uploaded = reused = 0
        for done, obj in enumerate(index.objects, start=1):
            name = join_name(prefix, obj.name)

            def check(ciphertext: bytes, obj: IndexedObject = obj) -> object:
                return open_bundle(dek, index, obj, ciphertext)

            if resumed and _present_and_valid(store, name, check):
                reused += 1
            else:
                store.put_bytes(name, seal_bundle(dek, asset_id, obj, _reader(data, manifest)))
                uploaded += 1
            if progress is not None:
                progress(done, total)
        name = join_name(prefix, MANIFEST_OBJECT)

        def check_index(ciphertext: bytes) -> object:
            return open_index(dek, asset_id, ciphertext, manifest.digest)

        if resumed and _present_and_valid(store, name, check_index):
            reused += 1
        else:
            store.put_bytes(name, seal_index(dek, index))
            uploaded += 1
        if progress is not None:
            progress(total, total)
    except CloudError as exc:
        raise SealingError(f"upload to {store!r} failed: {exc}") from exc
    return SealReport(asset_id, "dataset", manifest.digest, total, uploaded, reused, resumed)


def _reader(root: Path, manifest: Manifest) -> Callable[[str], bytes]:
    def read(path: str) -> bytes:
        content = (root / path).read_bytes()
        try:
            manifest.verify(path, content)
        except CryptoError as exc:
            raise SealingError(f"{path} changed while sealing; prepare again") from exc
        return content

    return read


def seal_model(
    onnx_path: Path,
    *,
    asset_id: str,
    key_wrapper: KeyWrapper,
    store: BlobStore,
    prefix: str,
    progress: ProgressFn | None = None,
) -> SealReport:
    """Seal the ONNX file ``onnx_path`` as ``weights.sealed`` under ``prefix`` of ``store``.

    Streams: the file is hashed, then encrypted segment by segment into a ciphertext file in a
    private temporary directory (hashed again as it is read, so a file changed in between is
    refused), which is uploaded with its size and removed. Memory stays a few MiB whatever the
    model's size (up to :data:`MAX_WEIGHTS_BYTES`)."""
    path = Path(onnx_path)
    digest = _model_digest(path)
    try:
        dek, resumed = _data_key("model", asset_id, digest, key_wrapper, store, prefix)
        name = join_name(prefix, WEIGHTS_OBJECT)
        if resumed and _weights_present_and_valid(store, name, dek, asset_id, digest):
            uploaded, reused = 0, 1
        else:
            _upload_weights(path, store, name, dek, asset_id, digest)
            uploaded, reused = 1, 0
    except CloudError as exc:
        raise SealingError(f"upload to {store!r} failed: {exc}") from exc
    if progress is not None:
        progress(1, 1)
    return SealReport(asset_id, "model", digest, 1, uploaded, reused, resumed)


def _model_digest(path: Path) -> Sha256Digest:
    """Digest of the model file, read in chunks and at most one byte past the cap."""
    if path.stat().st_size > MAX_WEIGHTS_BYTES:
        raise SealingError(f"{path} is larger than the {MAX_WEIGHTS_BYTES}-byte model cap")
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while block := f.read(min(_HASH_CHUNK, MAX_WEIGHTS_BYTES + 1 - size)):
            h.update(block)
            size += len(block)
    if size > MAX_WEIGHTS_BYTES:
        raise SealingError(f"{path} is larger than the {MAX_WEIGHTS_BYTES}-byte model cap")
    return Sha256Digest("sha256:" + h.hexdigest())


def _upload_weights(
    path: Path, store: BlobStore, name: str, dek: DataKey, asset_id: str, digest: Sha256Digest
) -> None:
    """Encrypt ``path`` to a temporary ciphertext file (not secret, but removed in all cases),
    then upload it whole. Nothing is uploaded unless the plaintext read is the one ``digest``
    (and the data key) describes, and the store commits an object only once all of it arrived."""
    with tempfile.TemporaryDirectory(prefix="sealbench-seal-") as tmp:  # mode 0700
        sealed = Path(tmp) / WEIGHTS_OBJECT
        with path.open("rb") as src, sealed.open("xb") as out:
            try:
                size = seal_weights_stream(dek, asset_id, src, out, digest)
            except DigestMismatchError as exc:
                raise SealingError(
                    f"{path} changed while sealing (it no longer hashes to {digest}); seal again"
                ) from exc
        with sealed.open("rb") as ciphertext:
            store.put_stream(name, ciphertext, size)


def _weights_present_and_valid(
    store: BlobStore, name: str, dek: DataKey, asset_id: str, digest: Sha256Digest
) -> bool:
    """Whether ``name`` exists and holds these weights, checked by streaming decryption into a
    hash (the object is never loaded whole)."""
    try:
        with store.open_read(name) as src:
            verify_weights_stream(dek, asset_id, src, digest)
    except ObjectNotFound:
        return False
    except CryptoError:
        _log.warning("replacing %s: it does not hold the expected content", name)
        return False
    return True
