"""The public streaming API: constants, sizes, key checks and the atomic file form."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from sealbench.crypto import streaming
from sealbench.crypto.errors import IntegrityError, KeyFormatError


def test_constants_are_tinks_aes256_gcm_hkdf_1mb() -> None:
    assert (streaming.KEY_SIZE, streaming.SEGMENT_SIZE, streaming.HEADER_SIZE) == (
        32,
        1_048_576,
        40,
    )


@pytest.mark.parametrize(
    ("size", "overhead"),
    [(0, 56), (1, 56), (1_048_520, 56), (1_048_521, 72), (3 * 1_048_576 + 123, 104)],
)
def test_ciphertext_size_matches_tinks_overhead(size: int, overhead: int) -> None:
    assert streaming.ciphertext_size(size) == size + overhead


def test_ciphertext_size_rejects_negative() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        streaming.ciphertext_size(-1)


def test_header_layout(key: bytes) -> None:
    first = streaming.encrypt_bytes(key, b"x")
    second = streaming.encrypt_bytes(key, b"x")
    assert first[0] == 40
    assert first[1:40] != second[1:40], "salt and nonce prefix are fresh per stream"


@pytest.mark.parametrize("bad", [b"", b"k" * 16, b"k" * 31, b"k" * 33])
def test_key_of_wrong_length_refused(bad: bytes) -> None:
    with pytest.raises(KeyFormatError, match="32-byte"):
        streaming.encrypt_bytes(bad, b"data")
    with pytest.raises(KeyFormatError, match="32-byte"):
        streaming.decrypt_bytes(bad, streaming.encrypt_bytes(os.urandom(32), b"data"))


def test_stream_functions_report_bytes_written(key: bytes) -> None:
    plaintext = os.urandom(2_000_000)
    sink = io.BytesIO()
    assert streaming.encrypt_stream(key, io.BytesIO(plaintext), sink, b"a") == len(sink.getvalue())
    out = io.BytesIO()
    assert streaming.decrypt_stream(key, io.BytesIO(sink.getvalue()), out, b"a") == len(plaintext)
    assert out.getvalue() == plaintext


def test_file_round_trip_leaves_only_the_outputs(key: bytes, tmp_path: Path) -> None:
    plaintext = os.urandom(2 * 1_048_576 + 5)
    (tmp_path / "in.bin").write_bytes(plaintext)
    streaming.encrypt_file(key, tmp_path / "in.bin", tmp_path / "in.enc", b"ad")
    streaming.decrypt_file(key, tmp_path / "in.enc", tmp_path / "out.bin", b"ad")
    assert (tmp_path / "out.bin").read_bytes() == plaintext
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.bin", "in.enc", "out.bin"]


def test_decrypted_file_is_private_to_its_owner(key: bytes, tmp_path: Path) -> None:
    (tmp_path / "in.enc").write_bytes(streaming.encrypt_bytes(key, b"patient data"))
    streaming.decrypt_file(key, tmp_path / "in.enc", tmp_path / "out.bin")
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o600


def test_decrypt_file_overwrites_only_on_success(key: bytes, tmp_path: Path) -> None:
    (tmp_path / "in.enc").write_bytes(streaming.encrypt_bytes(key, b"new"))
    (tmp_path / "out.bin").write_bytes(b"old")
    streaming.decrypt_file(key, tmp_path / "in.enc", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == b"new"


def test_missing_source_leaves_nothing(key: bytes, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        streaming.decrypt_file(key, tmp_path / "absent.enc", tmp_path / "out.bin")
    assert list(tmp_path.iterdir()) == []


def test_encrypt_file_failure_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "in.bin").write_bytes(b"data")
    with pytest.raises(KeyFormatError):
        streaming.encrypt_file(b"short", tmp_path / "in.bin", tmp_path / "in.enc")
    assert [p.name for p in tmp_path.iterdir()] == ["in.bin"]


def test_partial_plaintext_of_failed_stream_is_not_the_whole(key: bytes) -> None:
    """The stream form may release authenticated leading segments before failing; it must
    still fail, which is why decrypt_file exists."""
    ciphertext = streaming.encrypt_bytes(key, os.urandom(3 * 1_048_576))
    out = io.BytesIO()
    with pytest.raises(IntegrityError):
        streaming.decrypt_stream(key, io.BytesIO(ciphertext[:-1]), out)
    assert len(out.getvalue()) < 3 * 1_048_576


def test_segment_size_below_minimum_refused() -> None:
    with pytest.raises(ValueError, match="57"):
        streaming._Scheme(56)
