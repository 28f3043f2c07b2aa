"""The streamed model-weights functions write and read exactly the ``weights.sealed`` bytes of
the whole-buffer ones (existing sealed models still open), and every damage to a multi-segment
object fails with the same errors as before."""

from __future__ import annotations

import io
import os

import pytest

from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.envelope import DataKey
from sealbench.crypto.errors import DigestMismatchError, IntegrityError
from sealbench.crypto.sealed_asset import (
    open_weights,
    open_weights_stream,
    seal_weights,
    seal_weights_stream,
    verify_weights_stream,
    weights_ciphertext_size,
    weights_size,
)
from sealbench.crypto.streaming import HEADER_SIZE, SEGMENT_SIZE

WEIGHTS = os.urandom(3 * SEGMENT_SIZE + 12_345)  # four segments


@pytest.fixture(scope="module")
def dek() -> DataKey:
    return DataKey.generate()


def _seal(dek: DataKey, weights: bytes = WEIGHTS, asset_id: str = "m-1") -> bytes:
    out = io.BytesIO()
    n = seal_weights_stream(dek, asset_id, io.BytesIO(weights), out, sha256_digest(weights))
    assert n == len(out.getvalue()) == weights_ciphertext_size(len(weights))
    return out.getvalue()


def _open(dek: DataKey, ct: bytes, asset_id: str = "m-1", size: int | None = None) -> bytes:
    return open_weights_stream(
        dek, asset_id, io.BytesIO(ct), len(ct) if size is None else size, sha256_digest(WEIGHTS)
    )


def test_streamed_seal_opens_with_the_whole_buffer_reader(dek: DataKey) -> None:
    assert open_weights(dek, "m-1", _seal(dek), sha256_digest(WEIGHTS)) == WEIGHTS


def test_existing_sealed_weights_open_streamed(dek: DataKey) -> None:
    ct = seal_weights(dek, "m-1", WEIGHTS)
    assert _open(dek, ct) == WEIGHTS
    verify_weights_stream(dek, "m-1", io.BytesIO(ct), sha256_digest(WEIGHTS))


@pytest.mark.parametrize(
    "size",
    [0, 1, SEGMENT_SIZE - HEADER_SIZE - 16, SEGMENT_SIZE - HEADER_SIZE - 15, 2 * SEGMENT_SIZE],
)
def test_round_trip_at_segment_boundaries(dek: DataKey, size: int) -> None:
    weights = os.urandom(size)
    ct = _seal(dek, weights)
    assert weights_size(len(ct)) == size
    assert open_weights_stream(dek, "m-1", io.BytesIO(ct), len(ct), sha256_digest(weights)) == (
        weights
    )


@pytest.mark.parametrize("cut", [1, 16, SEGMENT_SIZE, SEGMENT_SIZE + 1])
def test_truncated_multi_segment_weights_rejected(dek: DataKey, cut: int) -> None:
    ct = _seal(dek)[:-cut]
    with pytest.raises(IntegrityError) as info:
        _open(dek, ct)
    assert type(info.value) is IntegrityError
    with pytest.raises(IntegrityError):
        verify_weights_stream(dek, "m-1", io.BytesIO(ct), sha256_digest(WEIGHTS))


def test_stream_shorter_than_its_announced_size_rejected(dek: DataKey) -> None:
    ct = _seal(dek)
    cut = ct[: HEADER_SIZE + 2 * SEGMENT_SIZE]  # ends on a segment boundary
    with pytest.raises(IntegrityError):
        open_weights_stream(dek, "m-1", io.BytesIO(cut), len(ct), sha256_digest(WEIGHTS))


def test_bytes_appended_after_the_announced_size_rejected(dek: DataKey) -> None:
    ct = _seal(dek)
    with pytest.raises(IntegrityError):
        open_weights_stream(
            dek, "m-1", io.BytesIO(ct + b"\0" * 100), len(ct), sha256_digest(WEIGHTS)
        )


def test_byte_flipped_in_the_middle_of_large_weights_rejected(dek: DataKey) -> None:
    ct = bytearray(_seal(dek))
    ct[len(ct) // 2] ^= 0x01
    with pytest.raises(IntegrityError) as info:
        _open(dek, bytes(ct))
    assert type(info.value) is IntegrityError  # authentication, not the digest check


def test_weights_of_another_asset_rejected(dek: DataKey) -> None:
    with pytest.raises(IntegrityError):
        _open(dek, _seal(dek, asset_id="m-2"))


def test_weights_under_another_key_rejected(dek: DataKey) -> None:
    with pytest.raises(IntegrityError):
        _open(DataKey.generate(), _seal(dek))


def test_authentic_weights_of_another_model_rejected_by_digest(dek: DataKey) -> None:
    ct = _seal(dek, b"other weights")
    with pytest.raises(DigestMismatchError):
        _open(dek, ct)
    with pytest.raises(DigestMismatchError):
        verify_weights_stream(dek, "m-1", io.BytesIO(ct), sha256_digest(WEIGHTS))


def test_impossible_ciphertext_size_rejected_before_reading() -> None:
    for size in (0, HEADER_SIZE + 15, SEGMENT_SIZE + 15, 2 * SEGMENT_SIZE + 16):
        with pytest.raises(IntegrityError):
            weights_size(size)


def test_weights_changed_after_hashing_refused(dek: DataKey) -> None:
    changed = bytearray(WEIGHTS)
    changed[SEGMENT_SIZE * 2] ^= 0x01
    with pytest.raises(DigestMismatchError):
        seal_weights_stream(
            dek, "m-1", io.BytesIO(bytes(changed)), io.BytesIO(), sha256_digest(WEIGHTS)
        )


def test_weights_grown_past_the_cap_refused(dek: DataKey) -> None:
    with pytest.raises(DigestMismatchError):
        seal_weights_stream(
            dek, "m-1", io.BytesIO(WEIGHTS), io.BytesIO(), sha256_digest(WEIGHTS[:100]), 100
        )
