"""Our streaming AEAD and Tink's AES256_GCM_HKDF_1MB read each other's ciphertexts.

Sizes straddle both kinds of segment boundary: the first segment holds 1,048,520 plaintext bytes
(its 40-byte header shares the 1 MiB), every later one 1,048,560.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

import pytest
import tink
from tink import streaming_aead

from sealbench.crypto import streaming

FIRST = 1_048_520
LATER = 1_048_560

SIZES = [
    0,
    1,
    FIRST - 1,
    FIRST,
    FIRST + 1,
    FIRST + LATER - 1,
    FIRST + LATER,
    FIRST + LATER + 1,
    3 * 1_048_576 + 123,
]
ADS = [b"", b'{"asset_id":"ds-1","kind":"dataset"}']


@pytest.mark.parametrize("ad", ADS, ids=["no-ad", "with-ad"])
@pytest.mark.parametrize("size", SIZES)
def test_tink_ciphertext_decrypts_with_ours(
    key: bytes, tink_for: Callable[..., Any], size: int, ad: bytes
) -> None:
    plaintext = os.urandom(size)
    ciphertext = tink_for(key).encrypt(plaintext, ad)
    assert len(ciphertext) == streaming.ciphertext_size(size)
    assert streaming.decrypt_bytes(key, ciphertext, ad) == plaintext
    out = io.BytesIO()
    assert streaming.decrypt_stream(key, io.BytesIO(ciphertext), out, ad) == size
    assert out.getvalue() == plaintext


@pytest.mark.parametrize("ad", ADS, ids=["no-ad", "with-ad"])
@pytest.mark.parametrize("size", SIZES)
def test_our_ciphertext_decrypts_with_tink(
    key: bytes, tink_for: Callable[..., Any], size: int, ad: bytes
) -> None:
    plaintext = os.urandom(size)
    from_bytes = streaming.encrypt_bytes(key, plaintext, ad)
    sink = io.BytesIO()
    written = streaming.encrypt_stream(key, io.BytesIO(plaintext), sink, ad)
    from_stream = sink.getvalue()
    assert written == len(from_stream) == len(from_bytes) == streaming.ciphertext_size(size)
    tink_stream = tink_for(key)
    assert tink_stream.decrypt(from_bytes, ad) == plaintext
    assert tink_stream.decrypt(from_stream, ad) == plaintext


def test_key_taken_from_a_tink_keyset_decrypts_tink_output(
    tink_raw_key: Callable[[tink.KeysetHandle], bytes],
) -> None:
    handle = tink.new_keyset_handle(
        streaming_aead.streaming_aead_key_templates.AES256_GCM_HKDF_1MB
    )
    primitive = handle.primitive(streaming_aead.StreamingAead)
    plaintext = os.urandom(FIRST + 7)

    class Sink(io.BytesIO):
        value = b""

        def close(self) -> None:
            self.value = self.getvalue()
            super().close()

    sink = Sink()
    with primitive.new_encrypting_stream(sink, b"ad") as w:
        w.write(plaintext)
    assert streaming.decrypt_bytes(tink_raw_key(handle), sink.value, b"ad") == plaintext


@pytest.mark.parametrize("size", [0, 1, 100, 143, 144, 145, 600, 1000])
def test_small_segments_match_tink(
    key: bytes, tink_for: Callable[..., Any], size: int
) -> None:
    """The internal segment-size parameter produces what Tink produces for that segment size,
    so the property tests that use small segments exercise the real format."""
    scheme = streaming._Scheme(segment_size=200)
    tink_stream = tink_for(key, 200)
    plaintext = os.urandom(size)
    assert tink_stream.decrypt(scheme.encrypt_bytes(key, plaintext, b"x"), b"x") == plaintext
    theirs = tink_stream.encrypt(plaintext, b"x")
    assert scheme.decrypt_bytes(key, theirs, b"x") == plaintext
    assert len(theirs) == scheme.ciphertext_size(size)
