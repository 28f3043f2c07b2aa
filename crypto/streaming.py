"""Streaming AEAD for files of any size: Tink's ``AES256_GCM_HKDF_1MB`` wire format, bit for bit.

Datasets and model weights are encrypted with this module before they leave their owner. The
format is Tink's "AES-GCM-HKDF streaming" (Tink documentation, "Streaming AEAD", and
``docs/WIRE-FORMAT.md`` of the Tink repository, section "Streaming AEAD"), implemented on
``cryptography``'s :class:`~cryptography.hazmat.primitives.ciphers.aead.AESGCM`, so that a
stream written here decrypts with Tink's ``StreamingAead`` and vice versa (tested both ways).

Parameters (Tink template ``AES256_GCM_HKDF_1MB``): 32-byte key, HKDF-SHA256, derived key size
32, ciphertext segment size 1,048,576 bytes, 16-byte GCM tag, 12-byte nonce.

Byte layout of a ciphertext::

    ciphertext = header ‖ segment_0 ‖ segment_1 ‖ … ‖ segment_{n-1}         (n ≥ 1)

    header (40 bytes)
      offset  0, 1 byte    header length, always 0x28 (= 40); any other value is rejected
      offset  1, 32 bytes  salt, random per stream
      offset 33, 7 bytes   nonce prefix, random per stream

    stream key  = HKDF-SHA256(ikm = key, salt = salt, info = associated data, length = 32)

    segment_i   = AES-256-GCM(stream key, nonce_i, plaintext chunk_i, no associated data)
                = ciphertext chunk_i ‖ 16-byte tag
    nonce_i     = nonce prefix (7) ‖ uint32 big-endian i (4) ‖ last (1)
                  last = 0x01 for segment_{n-1}, 0x00 for every other segment

    sizes       segment_0 holds at most 1,048,576 - 40 - 16 = 1,048,520 plaintext bytes (its
                ciphertext is at most 1,048,536 bytes, so header + segment_0 ≤ 1 MiB); every
                later segment holds at most 1,048,560 plaintext bytes (ciphertext ≤ 1,048,576).
                Every segment but the last is full. An empty plaintext is one last segment that
                is only a tag; a plaintext that fills segments exactly ends with a full segment
                flagged last (no empty trailer).

What the construction gives and :func:`decrypt_stream` checks: the associated data enters the key
derivation (wrong AD or key fails the first tag); the counter in each nonce pins a segment's
position (reordering, dropping or duplicating fails); the last flag pins the end (truncation at a
segment boundary fails, since the new final segment was encrypted with ``last = 0``; bytes after
the true last segment fail, since it is then decrypted with ``last = 0``). Every failure raises
the same opaque :class:`~sealbench.crypto.errors.IntegrityError` (no oracle).

Decryption releases plaintext segment by segment, before the end of the stream is authenticated;
the stream form therefore may leave partial plaintext in ``dst`` on failure (the caller discards
it), and the path form writes to a temporary file in the destination's directory, fsyncs it, and
renames it into place only after the last segment authenticated, removing it on any failure.

Memory is bounded whatever the size: one input and one output segment buffer, reused for the
whole stream; reads from the source are at most one segment (plus one lookahead byte) long.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Final, TypeAlias

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealbench.crypto.errors import IntegrityError, KeyFormatError

__all__ = [
    "HEADER_SIZE",
    "KEY_SIZE",
    "SEGMENT_SIZE",
    "ciphertext_size",
    "decrypt_bytes",
    "decrypt_file",
    "decrypt_into",
    "decrypt_stream",
    "encrypt_bytes",
    "encrypt_file",
    "encrypt_into",
    "encrypt_stream",
]

ReadableBuffer: TypeAlias = bytes | bytearray | memoryview
WritableBuffer: TypeAlias = bytearray | memoryview

KEY_SIZE: Final = 32
SEGMENT_SIZE: Final = 1_048_576
HEADER_SIZE: Final = 40

_SALT_SIZE: Final = 32
_PREFIX_SIZE: Final = 7
_TAG_SIZE: Final = 16
_MAX_SEGMENTS: Final = 1 << 32

_Reader = Callable[[memoryview], int]


def _reader(src: BinaryIO) -> _Reader:
    """A function that fills a buffer from ``src`` completely, or up to the end of the stream, and
    returns how many bytes it put there. Uses ``readinto`` when the stream has it (no copy)."""
    readinto: Callable[[memoryview], int | None] | None = getattr(src, "readinto", None)

    if readinto is not None:
        into = readinto

        def fill(buf: memoryview) -> int:
            got = 0
            size = len(buf)
            while got < size:
                n = into(buf[got:])
                if n is None:
                    raise ValueError("non-blocking sources are not supported")
                if n == 0:
                    break
                got += n
            return got

        return fill

    def fill_by_read(buf: memoryview) -> int:
        got = 0
        size = len(buf)
        while got < size:
            chunk = src.read(size - got)
            if not chunk:
                break
            buf[got : got + len(chunk)] = chunk
            got += len(chunk)
        return got

    return fill_by_read


class _Scheme:
    """The AES-GCM-HKDF streaming construction for one ciphertext segment size.

    The public functions use Tink's 1 MiB; tests use small segments to reach every segment
    boundary cheaply. Nothing else about the format depends on the segment size.
    """

    def __init__(self, segment_size: int = SEGMENT_SIZE) -> None:
        if segment_size < HEADER_SIZE + _TAG_SIZE + 1:
            raise ValueError(f"segment size must be at least 57 bytes, received {segment_size}")
        self.segment_size = segment_size
        self.first_plain = segment_size - HEADER_SIZE - _TAG_SIZE
        self.plain = segment_size - _TAG_SIZE

    # --- sizes -----------------------------------------------------------------------------

    def segment_count(self, plaintext_size: int) -> int:
        if plaintext_size <= self.first_plain:
            return 1
        return 1 + -(-(plaintext_size - self.first_plain) // self.plain)

    def ciphertext_size(self, plaintext_size: int) -> int:
        if plaintext_size < 0:
            raise ValueError(f"plaintext size must be non-negative, received {plaintext_size}")
        return HEADER_SIZE + plaintext_size + _TAG_SIZE * self.segment_count(plaintext_size)

    # --- keys and nonces -------------------------------------------------------------------

    @staticmethod
    def _stream_cipher(key: bytes, salt: bytes, associated_data: bytes) -> AESGCM:
        if len(key) != KEY_SIZE:
            raise KeyFormatError(f"expected a {KEY_SIZE}-byte key, received {len(key)} bytes")
        hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_SIZE, salt=salt, info=associated_data)
        return AESGCM(hkdf.derive(key))

    @staticmethod
    def _nonces(prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(non-last nonce, last nonce) for segment 0, 1, 2, …"""
        for i in range(_MAX_SEGMENTS):
            counter = prefix + i.to_bytes(4, "big")
            yield counter + b"\x00", counter + b"\x01"
        raise ValueError("stream exceeds 2**32 segments")

    def _new_header(self, key: bytes, associated_data: bytes) -> tuple[bytes, AESGCM, bytes]:
        salt = os.urandom(_SALT_SIZE)
        prefix = os.urandom(_PREFIX_SIZE)
        header = bytes([HEADER_SIZE]) + salt + prefix
        return header, self._stream_cipher(key, salt, associated_data), prefix

    def _open_header(
        self, key: bytes, header: bytes | memoryview, ad: bytes
    ) -> tuple[AESGCM, bytes]:
        if len(header) != HEADER_SIZE or header[0] != HEADER_SIZE:
            raise IntegrityError()
        salt = bytes(header[1 : 1 + _SALT_SIZE])
        prefix = bytes(header[1 + _SALT_SIZE : HEADER_SIZE])
        return self._stream_cipher(key, salt, ad), prefix

    # --- streams ---------------------------------------------------------------------------

    def encrypt_stream(self, key: bytes, src: BinaryIO, dst: BinaryIO, ad: bytes) -> int:
        header, aead, prefix = self._new_header(key, ad)
        fill = _reader(src)
        # One byte of lookahead tells whether a full chunk is the last one; the byte is carried
        # to the front of the buffer for the next chunk. The chunk is sealed right after it is
        # read, while it is still in cache.
        buf = memoryview(bytearray(self.plain + 1))
        out = memoryview(bytearray(self.segment_size))
        dst.write(header)
        written = HEADER_SIZE
        full, have = self.first_plain, 0
        for mid, last in self._nonces(prefix):
            have += fill(buf[have : full + 1])
            is_last = have <= full
            n = have if is_last else full
            end = n + _TAG_SIZE
            aead.encrypt_into(last if is_last else mid, buf[:n], None, out[:end])
            dst.write(out[:end])
            written += end
            if is_last:
                return written
            buf[0] = buf[full]
            full, have = self.plain, 1
        raise AssertionError("unreachable")  # pragma: no cover

    def decrypt_stream(self, key: bytes, src: BinaryIO, dst: BinaryIO, ad: bytes) -> int:
        fill = _reader(src)
        header = memoryview(bytearray(HEADER_SIZE))
        if fill(header) != HEADER_SIZE:
            raise IntegrityError()
        aead, prefix = self._open_header(key, header, ad)
        # Same one-byte lookahead as encryption: a segment is last iff nothing follows it.
        buf = memoryview(bytearray(self.segment_size + 1))
        out = memoryview(bytearray(self.plain))
        written = 0
        full, have = self.segment_size - HEADER_SIZE, 0
        for mid, last in self._nonces(prefix):
            have += fill(buf[have : full + 1])
            is_last = have <= full
            n = have if is_last else full
            if n < _TAG_SIZE:
                raise IntegrityError()
            end = n - _TAG_SIZE
            try:
                aead.decrypt_into(last if is_last else mid, buf[:n], None, out[:end])
            except InvalidTag:
                # Deliberately unchained and uniform: the caller learns only "not authentic".
                raise IntegrityError() from None
            dst.write(out[:end])
            written += end
            if is_last:
                return written
            buf[0] = buf[full]
            full, have = self.segment_size, 1
        raise AssertionError("unreachable")  # pragma: no cover

    # --- whole buffers (no lookahead needed: the length is known) --------------------------

    def encrypt_into(
        self, key: bytes, plaintext: ReadableBuffer, out: WritableBuffer, ad: bytes
    ) -> int:
        header, aead, prefix = self._new_header(key, ad)
        src = memoryview(plaintext).cast("B")
        size = len(src)
        count = self.segment_count(size)
        total = self.ciphertext_size(size)
        with memoryview(out).cast("B") as dst:
            _check_room(dst, total)
            dst[:HEADER_SIZE] = header
            p, c, full = 0, HEADER_SIZE, self.first_plain
            for i, (mid, last) in zip(range(count), self._nonces(prefix), strict=False):
                n = min(full, size - p)
                end = c + n + _TAG_SIZE
                aead.encrypt_into(last if i == count - 1 else mid, src[p : p + n], None, dst[c:end])
                p, c, full = p + n, end, self.plain
        return total

    def decrypt_into(
        self, key: bytes, ciphertext: ReadableBuffer, out: WritableBuffer, ad: bytes
    ) -> int:
        src = memoryview(ciphertext).cast("B")
        aead, prefix = self._open_header(key, src[:HEADER_SIZE], ad)
        bounds = self._segment_bounds(len(src))
        size = len(src) - HEADER_SIZE - _TAG_SIZE * len(bounds)
        with memoryview(out).cast("B") as dst:
            _check_room(dst, size)
            p = n = 0
            try:
                for i, ((start, end), (mid, last)) in enumerate(
                    zip(bounds, self._nonces(prefix), strict=False)
                ):
                    n = end - start - _TAG_SIZE
                    nonce = last if i == len(bounds) - 1 else mid
                    aead.decrypt_into(nonce, src[start:end], None, dst[p : p + n])
                    p += n
            except InvalidTag:
                # Fail closed: the caller's buffer keeps no plaintext of a damaged stream, neither
                # the segments that did authenticate nor the failing one (decrypt_into has
                # already written its unauthenticated plaintext when it checks the tag).
                dst[: p + n] = bytes(p + n)
                raise IntegrityError() from None
        return size

    def encrypt_bytes(self, key: bytes, plaintext: bytes, ad: bytes) -> bytes:
        buf = _sized_buffer(self.ciphertext_size(len(plaintext)))
        with buf.getbuffer() as dst:
            self.encrypt_into(key, plaintext, dst, ad)
        return buf.getvalue()

    def decrypt_bytes(self, key: bytes, ciphertext: bytes, ad: bytes) -> bytes:
        bounds = self._segment_bounds(len(ciphertext))
        buf = _sized_buffer(len(ciphertext) - HEADER_SIZE - _TAG_SIZE * len(bounds))
        with buf.getbuffer() as dst:
            self.decrypt_into(key, ciphertext, dst, ad)
        return buf.getvalue()

    def _segment_bounds(self, total: int) -> list[tuple[int, int]]:
        """Split a ciphertext of ``total`` bytes into segments exactly as the stream decoder
        does (greedy full segments, then a final one of at least a tag), or reject it."""
        bounds: list[tuple[int, int]] = []
        start, full = HEADER_SIZE, self.segment_size - HEADER_SIZE
        while True:
            end = min(start + full, total)
            if end - start < _TAG_SIZE:
                raise IntegrityError()
            bounds.append((start, end))
            if end == total:
                return bounds
            start, full = end, self.segment_size


def _check_room(out: memoryview, needed: int) -> None:
    if out.readonly:
        raise ValueError("the output buffer is read-only")
    if len(out) < needed:
        raise ValueError(f"the output buffer holds {len(out)} bytes; {needed} are needed")


def _sized_buffer(size: int) -> io.BytesIO:
    """An in-memory buffer of exactly ``size`` bytes whose ``getbuffer()`` view is filled in
    place; ``getvalue()`` then hands over the same memory as ``bytes`` without a copy (CPython),
    which matters at GiB sizes."""
    buf = io.BytesIO()
    if size:
        buf.seek(size - 1)
        buf.write(b"\0")
    return buf


_TINK_1MB: Final = _Scheme(SEGMENT_SIZE)


def ciphertext_size(plaintext_size: int) -> int:
    """Size in bytes of the ciphertext of a plaintext of ``plaintext_size`` bytes."""
    return _TINK_1MB.ciphertext_size(plaintext_size)


def encrypt_stream(key: bytes, src: BinaryIO, dst: BinaryIO, associated_data: bytes = b"") -> int:
    """Encrypt everything readable from ``src`` into ``dst``; return the bytes written."""
    return _TINK_1MB.encrypt_stream(key, src, dst, associated_data)


def decrypt_stream(key: bytes, src: BinaryIO, dst: BinaryIO, associated_data: bytes = b"") -> int:
    """Decrypt the ciphertext readable from ``src`` into ``dst``; return the plaintext size.

    Raises :class:`IntegrityError` for any damage. ``dst`` may then hold partial plaintext, which
    the caller must discard (use :func:`decrypt_file` to have that done for you).
    """
    return _TINK_1MB.decrypt_stream(key, src, dst, associated_data)


def encrypt_into(
    key: bytes, plaintext: ReadableBuffer, out: WritableBuffer, associated_data: bytes = b""
) -> int:
    """Encrypt ``plaintext`` into the caller's writable buffer ``out`` (at least
    :func:`ciphertext_size` bytes) without allocating; return the ciphertext size. For callers
    that reuse one buffer across many objects."""
    return _TINK_1MB.encrypt_into(key, plaintext, out, associated_data)


def decrypt_into(
    key: bytes, ciphertext: ReadableBuffer, out: WritableBuffer, associated_data: bytes = b""
) -> int:
    """Decrypt ``ciphertext`` into the caller's writable buffer ``out`` without allocating;
    return the plaintext size. Raises :class:`IntegrityError` for any damage, after zeroing
    whatever plaintext it had written into ``out``."""
    return _TINK_1MB.decrypt_into(key, ciphertext, out, associated_data)


def encrypt_bytes(key: bytes, plaintext: bytes, associated_data: bytes = b"") -> bytes:
    """Encrypt ``plaintext`` held in memory."""
    return _TINK_1MB.encrypt_bytes(key, plaintext, associated_data)


def decrypt_bytes(key: bytes, ciphertext: bytes, associated_data: bytes = b"") -> bytes:
    """Decrypt ``ciphertext`` held in memory; raises :class:`IntegrityError`."""
    return _TINK_1MB.decrypt_bytes(key, ciphertext, associated_data)


def encrypt_file(key: bytes, src: Path, dst: Path, associated_data: bytes = b"") -> None:
    """Encrypt the file ``src`` to ``dst``, which appears only once complete."""
    with src.open("rb") as fin, _committed(dst) as fout:
        _TINK_1MB.encrypt_stream(key, fin, fout, associated_data)


def decrypt_file(key: bytes, src: Path, dst: Path, associated_data: bytes = b"") -> None:
    """Decrypt the file ``src`` to ``dst``. ``dst`` appears only after the last segment has
    authenticated; on :class:`IntegrityError` (or any other failure) nothing is left behind."""
    with src.open("rb") as fin, _committed(dst) as fout:
        _TINK_1MB.decrypt_stream(key, fin, fout, associated_data)


@contextlib.contextmanager
def _committed(dst: Path) -> Iterator[BinaryIO]:
    """A temporary file (mode 0600) beside ``dst``, fsynced and renamed to ``dst`` if the block
    succeeds, removed if it raises."""
    directory = dst.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".partial", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
