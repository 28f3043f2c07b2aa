"""The allocation-free buffer API: same wire format as the rest, reusable output buffers, and a
damaged stream leaves no plaintext in the caller's buffer."""

from __future__ import annotations

import os

import pytest

from sealbench.crypto.errors import IntegrityError
from sealbench.crypto.streaming import (
    ciphertext_size,
    decrypt_bytes,
    decrypt_into,
    encrypt_bytes,
    encrypt_into,
)

KEY = bytes(range(32))
SIZES = [0, 1, 1_048_519, 1_048_520, 1_048_521, 2 * 1_048_576 + 7]


@pytest.mark.parametrize("size", SIZES)
def test_into_round_trip_matches_the_bytes_api(size: int) -> None:
    plaintext = os.urandom(size)
    out = bytearray(ciphertext_size(size) + 5)  # larger buffers are fine
    n = encrypt_into(KEY, plaintext, out, b"ad")
    assert n == ciphertext_size(size)
    assert decrypt_bytes(KEY, bytes(out[:n]), b"ad") == plaintext
    back = bytearray(size)
    assert decrypt_into(KEY, encrypt_bytes(KEY, plaintext, b"ad"), back, b"ad") == size
    assert back == plaintext


def test_one_buffer_reused_across_objects() -> None:
    out = bytearray(ciphertext_size(4096))
    plain = bytearray(4096)
    for i in range(3):
        message = bytes([i]) * 4096
        n = encrypt_into(KEY, message, out, b"")
        decrypt_into(KEY, memoryview(out)[:n], plain, b"")
        assert plain == message


def test_too_small_or_read_only_output_refused() -> None:
    with pytest.raises(ValueError, match="needed"):
        encrypt_into(KEY, b"x" * 100, bytearray(100), b"")
    with pytest.raises(ValueError, match="read-only"):
        encrypt_into(KEY, b"x", memoryview(bytes(ciphertext_size(1))), b"")  # type: ignore[arg-type]


def test_damaged_stream_leaves_no_plaintext_in_the_buffer() -> None:
    plaintext = b"\xa5" * (3 * 1_048_576)
    ciphertext = bytearray(encrypt_bytes(KEY, plaintext, b""))
    ciphertext[-5] ^= 1  # the last segment fails after two have been written
    out = bytearray(len(plaintext))
    with pytest.raises(IntegrityError):
        decrypt_into(KEY, bytes(ciphertext), out, b"")
    assert b"\xa5" not in out
