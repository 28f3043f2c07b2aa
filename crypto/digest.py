"""SHA-256 digests as sealbench writes them everywhere: ``"sha256:" + 64 lowercase hex``.

Hashing is streamed in bounded chunks so that files of any size use constant memory.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import BinaryIO, NewType

__all__ = ["Sha256Digest", "parse_digest", "sha256_digest", "sha256_file", "sha256_stream"]

Sha256Digest = NewType("Sha256Digest", str)

_PREFIX = "sha256:"
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_CHUNK = 1 << 20


def sha256_digest(data: bytes) -> Sha256Digest:
    """Digest of ``data``."""
    return Sha256Digest(_PREFIX + hashlib.sha256(data).hexdigest())


def sha256_stream(src: BinaryIO, chunk: int = _CHUNK) -> Sha256Digest:
    """Digest of everything readable from ``src``, read ``chunk`` bytes at a time."""
    h = hashlib.sha256()
    while block := src.read(chunk):
        h.update(block)
    return Sha256Digest(_PREFIX + h.hexdigest())


def sha256_file(path: Path) -> Sha256Digest:
    """Digest of the file at ``path``."""
    with path.open("rb") as f:
        return sha256_stream(f)


def parse_digest(value: str) -> Sha256Digest:
    """Return ``value`` as a :data:`Sha256Digest` or raise ``ValueError`` saying what shape was
    expected. Only the shape is shown back, never more than a short prefix of the value."""
    if not isinstance(value, str) or not _DIGEST_RE.fullmatch(value):
        shown = value[:16] + "…" if isinstance(value, str) and len(value) > 16 else value
        raise ValueError(f"expected a digest 'sha256:<64 lowercase hex>', received {shown!r}")
    return Sha256Digest(value)
