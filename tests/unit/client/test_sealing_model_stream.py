"""Sealing a model streams it: the object is the same ``weights.sealed`` as before, no ciphertext
file outlives the seal, a model changed while it is sealed is refused with nothing uploaded, and
a resumed seal verifies what is present without loading it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from sealbench.client.assets.store import SealingError, seal_model
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import (
    DataKey,
    InsecureInMemoryKeyWrapper,
    WrappedKey,
    asset_aad,
    unwrap_key,
)
from sealbench.crypto.sealed_asset import MAX_WEIGHTS_BYTES, open_weights
from sealbench.crypto.streaming import SEGMENT_SIZE
from sealbench.platforms import LocalBlobStore

KEY = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
WEIGHTS = os.urandom(2 * SEGMENT_SIZE + 777)


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the seal's temporary ciphertext goes, to check that nothing is left there."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def _dek(store: LocalBlobStore, wrapper: InsecureInMemoryKeyWrapper, digest: str) -> DataKey:
    record = WrappedKey.from_bytes(store.get_bytes("dek.wrapped", 1 << 16))
    return unwrap_key(wrapper, record, asset_aad("model", "m-1", digest))  # type: ignore[arg-type]


def test_sealed_model_opens_and_no_ciphertext_is_left(tmp_path: Path, private_tmp: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(WEIGHTS)
    wrapper = InsecureInMemoryKeyWrapper(KEY)
    store = LocalBlobStore(tmp_path / "b")
    report = seal_model(model, asset_id="m-1", key_wrapper=wrapper, store=store, prefix="")
    assert report.digest == sha256_digest(WEIGHTS) and report.uploaded == 1
    dek = _dek(store, wrapper, report.digest)
    ct = store.get_bytes("weights.sealed", 1 << 30)
    assert open_weights(dek, "m-1", ct, report.digest) == WEIGHTS
    assert list(private_tmp.iterdir()) == []


class _ChangesModelWhenKeyStored(LocalBlobStore):
    """A bucket whose ``dek.wrapped`` upload is when someone rewrites the model file (after it
    was hashed, before it is encrypted)."""

    def __init__(self, root: Path, model: Path) -> None:
        super().__init__(root)
        self.model = model

    def put_bytes(self, name: str, data: bytes) -> None:
        super().put_bytes(name, data)
        changed = bytearray(self.model.read_bytes())
        changed[SEGMENT_SIZE + 5] ^= 0x01
        self.model.write_bytes(bytes(changed))


def test_model_changed_while_sealing_refused_and_nothing_uploaded(
    tmp_path: Path, private_tmp: Path
) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(WEIGHTS)
    store = _ChangesModelWhenKeyStored(tmp_path / "b", model)
    with pytest.raises(SealingError, match="changed while sealing"):
        seal_model(
            model,
            asset_id="m-1",
            key_wrapper=InsecureInMemoryKeyWrapper(KEY),
            store=store,
            prefix="",
        )
    assert not store.exists("weights.sealed")
    assert list(private_tmp.iterdir()) == []


def test_resume_keeps_valid_weights_and_replaces_damaged_ones(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(WEIGHTS)
    wrapper = InsecureInMemoryKeyWrapper(KEY)
    store = LocalBlobStore(tmp_path / "b")
    seal_model(model, asset_id="m-1", key_wrapper=wrapper, store=store, prefix="")
    sealed = store.root / "weights.sealed"
    before = sealed.read_bytes()
    again = seal_model(model, asset_id="m-1", key_wrapper=wrapper, store=store, prefix="")
    assert again.resumed_key and again.reused == 1 and again.uploaded == 0
    assert sealed.read_bytes() == before
    damaged = bytearray(before)
    damaged[len(damaged) // 2] ^= 0x01
    sealed.write_bytes(bytes(damaged))
    third = seal_model(model, asset_id="m-1", key_wrapper=wrapper, store=store, prefix="")
    assert third.uploaded == 1 and third.reused == 0
    dek = _dek(store, wrapper, third.digest)
    assert open_weights(dek, "m-1", sealed.read_bytes(), third.digest) == WEIGHTS


def test_model_over_the_cap_refused_before_reading(tmp_path: Path) -> None:
    model = tmp_path / "huge.onnx"
    with model.open("wb") as f:  # sparse: costs no disk
        f.truncate(MAX_WEIGHTS_BYTES + 1)
    store = LocalBlobStore(tmp_path / "b")
    with pytest.raises(SealingError, match="model cap"):
        seal_model(
            model,
            asset_id="m-1",
            key_wrapper=InsecureInMemoryKeyWrapper(KEY),
            store=store,
            prefix="",
        )
    assert list(store.list()) == []
