"""Every way of damaging a streaming-AEAD ciphertext is rejected with the one opaque
IntegrityError, by the bytes, stream and file forms alike, and the file form commits nothing.

The ciphertext under attack has four real (1 MiB) segments: 3 MiB + 123 bytes of plaintext.
"""

from __future__ import annotations

import io
import itertools
import os
from pathlib import Path

import pytest

from sealbench.crypto import streaming
from sealbench.crypto.errors import IntegrityError

AD = b'{"asset_id":"ds-1","kind":"dataset"}'
PLAINTEXT_SIZE = 3 * 1_048_576 + 123
SEG = streaming.SEGMENT_SIZE
H = streaming.HEADER_SIZE
# Ciphertext offsets where segment i starts: header ‖ seg0 (1 MiB - 40) ‖ seg1 ‖ seg2 ‖ seg3.
STARTS = [H, SEG, 2 * SEG, 3 * SEG]


@pytest.fixture(scope="module")
def sample() -> tuple[bytes, bytes, bytes]:
    key = os.urandom(32)
    plaintext = os.urandom(PLAINTEXT_SIZE)
    return key, plaintext, streaming.encrypt_bytes(key, plaintext, AD)


def segments(ciphertext: bytes) -> list[bytes]:
    bounds = [*STARTS, len(ciphertext)]
    return [ciphertext[a:b] for a, b in itertools.pairwise(bounds)]


def assert_rejected(
    key: bytes, ciphertext: bytes, tmp_path: Path, ad: bytes = AD
) -> None:
    """All three decryption forms raise the same opaque error; no output file is committed and
    no temporary file is left behind."""
    with pytest.raises(IntegrityError) as from_bytes:
        streaming.decrypt_bytes(key, ciphertext, ad)
    with pytest.raises(IntegrityError) as from_stream:
        streaming.decrypt_stream(key, io.BytesIO(ciphertext), io.BytesIO(), ad)
    src = tmp_path / "asset.enc"
    src.write_bytes(ciphertext)
    dst = tmp_path / "asset.nii.gz"
    with pytest.raises(IntegrityError) as from_file:
        streaming.decrypt_file(key, src, dst, ad)
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asset.enc"]
    messages = {str(e.value) for e in (from_bytes, from_stream, from_file)}
    assert messages == {str(IntegrityError())}, "errors must not differ by failure (no oracle)"


def test_untampered_sample_decrypts(sample: tuple[bytes, bytes, bytes], tmp_path: Path) -> None:
    key, plaintext, ciphertext = sample
    assert len(segments(ciphertext)) == 4
    src, dst = tmp_path / "a.enc", tmp_path / "a.out"
    src.write_bytes(ciphertext)
    streaming.decrypt_file(key, src, dst, AD)
    assert dst.read_bytes() == plaintext


TRUNCATIONS = {
    "empty": 0,
    "inside-header": 20,
    "header-only": H,
    "one-byte-into-segment0": H + 1,
    "mid-segment0": SEG // 2,
    "segment1-boundary": SEG,
    "mid-segment1": SEG + SEG // 2,
    "segment2-boundary": 2 * SEG,
    "mid-segment2": 2 * SEG + 1000,
    "segment3-boundary": 3 * SEG,
    "inside-last-tag": streaming.ciphertext_size(PLAINTEXT_SIZE) - 8,
    "last-byte-removed": -1,
}


@pytest.mark.parametrize("cut", TRUNCATIONS.values(), ids=TRUNCATIONS.keys())
def test_truncated_stream_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, cut: int
) -> None:
    key, _, ciphertext = sample
    truncated = ciphertext[:cut]
    assert len(truncated) < len(ciphertext)
    assert_rejected(key, truncated, tmp_path)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_truncated_at_segment_boundary_rejected_even_when_well_formed(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, count: int
) -> None:
    """Dropping the tail at a boundary leaves a well-formed prefix whose final segment was
    sealed with last = 0: the last flag catches it."""
    key, _, ciphertext = sample
    assert_rejected(key, ciphertext[:H] + b"".join(segments(ciphertext)[:count]), tmp_path)


def test_swapped_segments_rejected(sample: tuple[bytes, bytes, bytes], tmp_path: Path) -> None:
    key, _, ciphertext = sample
    s = segments(ciphertext)
    assert len(s[1]) == len(s[2])
    assert_rejected(key, ciphertext[:H] + s[0] + s[2] + s[1] + s[3], tmp_path)


def test_dropped_segment_rejected(sample: tuple[bytes, bytes, bytes], tmp_path: Path) -> None:
    key, _, ciphertext = sample
    s = segments(ciphertext)
    assert_rejected(key, ciphertext[:H] + s[0] + s[2] + s[3], tmp_path)


def test_duplicated_segment_rejected(sample: tuple[bytes, bytes, bytes], tmp_path: Path) -> None:
    key, _, ciphertext = sample
    s = segments(ciphertext)
    assert_rejected(key, ciphertext[:H] + s[0] + s[1] + s[1] + s[2] + s[3], tmp_path)


def test_segment_from_another_stream_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    """Same key and AD, another stream: a fresh salt means a fresh stream key."""
    key, plaintext, ciphertext = sample
    other = streaming.encrypt_bytes(key, plaintext, AD)
    s, t = segments(ciphertext), segments(other)
    assert_rejected(key, ciphertext[:H] + s[0] + t[1] + s[2] + s[3], tmp_path)


@pytest.mark.parametrize("offset", [1, 20, 33, 39], ids=["salt-first", "salt", "prefix", "end"])
def test_bit_flip_in_header_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, offset: int
) -> None:
    key, _, ciphertext = sample
    flipped = bytearray(ciphertext)
    flipped[offset] ^= 0x01
    assert_rejected(key, bytes(flipped), tmp_path)


@pytest.mark.parametrize("length_byte", [0, 39, 41, 0xFF])
def test_header_length_byte_other_than_40_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, length_byte: int
) -> None:
    key, _, ciphertext = sample
    assert_rejected(key, bytes([length_byte]) + ciphertext[1:], tmp_path)


@pytest.mark.parametrize(
    "offset", [H, SEG // 2, SEG + 5, 3 * SEG + 1], ids=["seg0-first", "seg0", "seg1", "seg3"]
)
def test_bit_flip_in_body_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, offset: int
) -> None:
    key, _, ciphertext = sample
    flipped = bytearray(ciphertext)
    flipped[offset] ^= 0x80
    assert_rejected(key, bytes(flipped), tmp_path)


@pytest.mark.parametrize("segment", [0, 1, 3])
def test_bit_flip_in_tag_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, segment: int
) -> None:
    key, _, ciphertext = sample
    end = [*STARTS[1:], len(ciphertext)][segment]
    flipped = bytearray(ciphertext)
    flipped[end - 1] ^= 0x01
    assert_rejected(key, bytes(flipped), tmp_path)


@pytest.mark.parametrize("wrong", [b"", AD + b" ", b'{"asset_id":"ds-2","kind":"dataset"}'])
def test_wrong_associated_data_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, wrong: bytes
) -> None:
    key, _, ciphertext = sample
    assert_rejected(key, ciphertext, tmp_path, ad=wrong)


def test_wrong_key_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, other_key: bytes
) -> None:
    _, _, ciphertext = sample
    assert_rejected(other_key, ciphertext, tmp_path)


@pytest.mark.parametrize("garbage", [b"\x00", os.urandom(16), os.urandom(SEG)], ids=len)
def test_trailing_garbage_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path, garbage: bytes
) -> None:
    key, _, ciphertext = sample
    assert_rejected(key, ciphertext + garbage, tmp_path)


def test_trailing_valid_segment_rejected(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    """Appending the final segment again (a well-formed tail) still fails."""
    key, _, ciphertext = sample
    assert_rejected(key, ciphertext + segments(ciphertext)[-1], tmp_path)


def test_empty_plaintext_without_tag_rejected(key: bytes, tmp_path: Path) -> None:
    ciphertext = streaming.encrypt_bytes(key, b"")
    assert len(ciphertext) == H + 16
    assert_rejected(key, ciphertext[:H], tmp_path, ad=b"")
    assert_rejected(key, ciphertext[:-1], tmp_path, ad=b"")


def test_failed_decryption_keeps_existing_destination(
    sample: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    key, _, ciphertext = sample
    src, dst = tmp_path / "a.enc", tmp_path / "a.out"
    src.write_bytes(ciphertext[:-1])
    dst.write_bytes(b"previous result")
    with pytest.raises(IntegrityError):
        streaming.decrypt_file(key, src, dst, AD)
    assert dst.read_bytes() == b"previous result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.enc", "a.out"]
