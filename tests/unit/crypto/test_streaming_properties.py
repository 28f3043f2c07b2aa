"""Property tests: round trips over random sizes, segment sizes and read/write chunkings, and
random damage always rejected. Small segments (the internal segment-size parameter, whose
output Tink accepts, see test_streaming_interop) reach many segment boundaries cheaply."""

from __future__ import annotations

import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealbench.crypto import streaming
from sealbench.crypto.errors import IntegrityError

KEY = os.urandom(32)
SEGMENT_SIZES = st.sampled_from([57, 58, 64, 100, 256, 1000])
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class ChunkedReader(io.RawIOBase):
    """A source that hands out at most the next chunk size per read, as pipes and sockets do."""

    def __init__(self, data: bytes, chunks: list[int]) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._chunks = chunks or [1]
        self._i = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        limit = self._chunks[self._i % len(self._chunks)]
        self._i += 1
        n = min(len(buffer), limit, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


class ReadOnlySource:
    """A minimal source without readinto (only read), like some file-like adapters."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = data
        self._pos = 0
        self._chunk = chunk

    def read(self, n: int = -1) -> bytes:
        n = min(n, self._chunk)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


@PROPERTY_SETTINGS
@given(
    segment=SEGMENT_SIZES,
    plaintext=st.binary(max_size=3000),
    ad=st.binary(max_size=64),
    chunks=st.lists(st.integers(1, 300), max_size=8),
)
def test_round_trip_with_any_size_and_chunking(
    segment: int, plaintext: bytes, ad: bytes, chunks: list[int]
) -> None:
    scheme = streaming._Scheme(segment)
    sink = io.BytesIO()
    written = scheme.encrypt_stream(KEY, ChunkedReader(plaintext, chunks), sink, ad)
    ciphertext = sink.getvalue()
    assert written == len(ciphertext) == scheme.ciphertext_size(len(plaintext))
    out = io.BytesIO()
    assert scheme.decrypt_stream(KEY, ChunkedReader(ciphertext, chunks), out, ad) == len(plaintext)
    assert out.getvalue() == plaintext
    assert scheme.decrypt_bytes(KEY, ciphertext, ad) == plaintext
    assert scheme.decrypt_bytes(KEY, scheme.encrypt_bytes(KEY, plaintext, ad), ad) == plaintext


@PROPERTY_SETTINGS
@given(
    segment=SEGMENT_SIZES,
    plaintext=st.binary(max_size=2000),
    chunk=st.integers(1, 500),
)
def test_sources_without_readinto_round_trip(segment: int, plaintext: bytes, chunk: int) -> None:
    scheme = streaming._Scheme(segment)
    sink = io.BytesIO()
    scheme.encrypt_stream(KEY, ReadOnlySource(plaintext, chunk), sink, b"")  # type: ignore[arg-type]
    out = io.BytesIO()
    scheme.decrypt_stream(KEY, ReadOnlySource(sink.getvalue(), chunk), out, b"")  # type: ignore[arg-type]
    assert out.getvalue() == plaintext


@PROPERTY_SETTINGS
@given(segment=SEGMENT_SIZES, size=st.integers(0, 3000), data=st.data())
def test_any_bit_flip_rejected(segment: int, size: int, data: st.DataObject) -> None:
    scheme = streaming._Scheme(segment)
    ciphertext = bytearray(scheme.encrypt_bytes(KEY, os.urandom(size), b"ad"))
    position = data.draw(st.integers(0, len(ciphertext) - 1), label="position")
    ciphertext[position] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    with pytest.raises(IntegrityError):
        scheme.decrypt_bytes(KEY, bytes(ciphertext), b"ad")
    with pytest.raises(IntegrityError):
        scheme.decrypt_stream(KEY, io.BytesIO(ciphertext), io.BytesIO(), b"ad")


@PROPERTY_SETTINGS
@given(segment=SEGMENT_SIZES, size=st.integers(0, 3000), data=st.data())
def test_any_truncation_or_extension_rejected(
    segment: int, size: int, data: st.DataObject
) -> None:
    scheme = streaming._Scheme(segment)
    ciphertext = scheme.encrypt_bytes(KEY, os.urandom(size), b"ad")
    cut = data.draw(st.integers(0, len(ciphertext) - 1), label="cut")
    extra = data.draw(st.binary(min_size=1, max_size=2 * segment), label="extra")
    for damaged in (ciphertext[:cut], ciphertext + extra):
        with pytest.raises(IntegrityError):
            scheme.decrypt_bytes(KEY, damaged, b"ad")
        with pytest.raises(IntegrityError):
            scheme.decrypt_stream(KEY, io.BytesIO(damaged), io.BytesIO(), b"ad")


@given(segment=SEGMENT_SIZES, size=st.integers(0, 20_000))
def test_ciphertext_size_predicts_encrypted_length(segment: int, size: int) -> None:
    scheme = streaming._Scheme(segment)
    assert len(scheme.encrypt_bytes(KEY, bytes(size), b"")) == scheme.ciphertext_size(size)
