"""Canonical manifests: the one digest that names a directory tree (a prepared dataset, a model).

A manifest lists every regular file under a root by relative POSIX path, size and SHA-256, so
its digest changes when any file is renamed, moved, added, removed or altered by one byte, and
two trees with the same files give the same digest whatever their mtimes or creation order.
Directories are not listed (an empty directory contributes nothing). Symlinks (to files or
directories), FIFOs, sockets and devices are refused with :class:`ManifestError` naming the
path, so a manifest never describes something other than the bytes that were hashed.

Format, version 1 — the canonical JSON (:func:`sealbench.crypto.canonical.canonical_json`:
sorted keys, no whitespace, UTF-8) of::

    {"entries": [{"path": "<rel/posix/path>", "sha256": "sha256:<64 hex>", "size": <int>}, ...],
     "format": "sealbench-manifest",
     "version": 1}

``entries`` are sorted by the UTF-8 bytes of ``path``, which are unique, relative, non-empty,
use ``/`` as the only separator and contain no empty, ``.`` or ``..`` component, no backslash
and no control character. The manifest digest is ``sha256:`` + SHA-256 of exactly those bytes.
:meth:`Manifest.from_bytes` accepts only this canonical encoding (anything that would re-encode
differently is refused), at most :data:`MAX_MANIFEST_BYTES` long, so one manifest has one digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Final

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, parse_digest, sha256_digest
from sealbench.crypto.errors import DigestMismatchError, ManifestError

__all__ = [
    "FORMAT",
    "MAX_MANIFEST_BYTES",
    "MAX_PATH_LENGTH",
    "VERSION",
    "Manifest",
    "ManifestEntry",
    "build_manifest",
    "check_relative_path",
]

FORMAT: Final = "sealbench-manifest"
VERSION: Final = 1
#: Largest manifest document accepted (about 300 000 files).
MAX_MANIFEST_BYTES: Final = 64 * 1024 * 1024
MAX_PATH_LENGTH: Final = 4096
_CHUNK: Final = 1 << 20
_MAX_SIZE: Final = 1 << 62


def _shown(path: str) -> str:
    return repr(path if len(path) <= 120 else path[:119] + "…")


def check_relative_path(path: str) -> str:
    """Return ``path`` if it is a safe relative POSIX path as manifests require, else raise
    :class:`ManifestError` naming it."""
    if not isinstance(path, str) or not path:
        raise ManifestError("manifest path: expected a non-empty relative path, received ''")
    if len(path) > MAX_PATH_LENGTH:
        raise ManifestError(f"manifest path {_shown(path)}: longer than {MAX_PATH_LENGTH}")
    if path.startswith("/"):
        raise ManifestError(f"manifest path {_shown(path)}: absolute paths are refused")
    if "\\" in path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise ManifestError(
            f"manifest path {_shown(path)}: backslashes and control characters are refused"
        )
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise ManifestError(
                f"manifest path {_shown(path)}: empty, '.' and '..' components are refused"
            )
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError(f"manifest path {_shown(path)}: not valid UTF-8") from None
    return path


@dataclass(frozen=True)
class ManifestEntry:
    """One regular file: relative POSIX path, size in bytes, SHA-256 of its content."""

    path: str
    size: int
    sha256: Sha256Digest

    def __post_init__(self) -> None:
        check_relative_path(self.path)
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise ManifestError(f"manifest entry {_shown(self.path)}: size must be an integer")
        if not 0 <= self.size < _MAX_SIZE:
            raise ManifestError(f"manifest entry {_shown(self.path)}: size out of range")
        try:
            parse_digest(self.sha256)
        except ValueError as exc:
            raise ManifestError(f"manifest entry {_shown(self.path)}: {exc}") from None

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class Manifest:
    """A versioned, canonical list of :class:`ManifestEntry`, sorted by path bytes."""

    entries: tuple[ManifestEntry, ...]

    def __post_init__(self) -> None:
        previous: bytes | None = None
        for entry in self.entries:
            key = entry.path.encode("utf-8")
            if previous is not None and key <= previous:
                what = "duplicated" if key == previous else "out of order"
                raise ManifestError(f"manifest path {_shown(entry.path)} is {what}")
            previous = key

    @classmethod
    def from_entries(cls, entries: Iterator[ManifestEntry] | list[ManifestEntry]) -> Manifest:
        """Sort ``entries`` into canonical order (duplicates still raise)."""
        return cls(tuple(sorted(entries, key=lambda e: e.path.encode("utf-8"))))

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "entries": [entry.to_json() for entry in self.entries],
                "format": FORMAT,
                "version": VERSION,
            }
        )

    @cached_property
    def digest(self) -> Sha256Digest:
        """``sha256:`` + SHA-256 of :meth:`to_bytes`."""
        return sha256_digest(self.to_bytes())

    @property
    def total_size(self) -> int:
        return sum(entry.size for entry in self.entries)

    @cached_property
    def _by_path(self) -> dict[str, ManifestEntry]:
        return {entry.path: entry for entry in self.entries}

    def entry(self, path: str) -> ManifestEntry:
        try:
            return self._by_path[path]
        except KeyError:
            raise ManifestError(f"manifest has no file {_shown(path)}") from None

    def verify(self, path: str, data: bytes) -> None:
        """Raise unless ``data`` is exactly the content the manifest lists for ``path``."""
        entry = self.entry(path)
        received = sha256_digest(data)
        if len(data) != entry.size or received != entry.sha256:
            raise DigestMismatchError(f"file {_shown(path)}", entry.sha256, received)

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse a canonical version-1 manifest or raise :class:`ManifestError`."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest larger than {MAX_MANIFEST_BYTES} bytes")
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ManifestError("manifest is not UTF-8 JSON") from None
        if not isinstance(doc, dict) or set(doc) != {"entries", "format", "version"}:
            raise ManifestError("manifest must be an object with entries, format and version")
        if doc["format"] != FORMAT:
            raise ManifestError(f"manifest format: expected {FORMAT!r}")
        version = doc["version"]
        if isinstance(version, bool) or version != VERSION:
            raise ManifestError(f"manifest version: expected {VERSION}, received {version!r}")
        raw_entries = doc["entries"]
        if not isinstance(raw_entries, list):
            raise ManifestError("manifest entries must be an array")
        entries = []
        for raw in raw_entries:
            if not isinstance(raw, dict) or set(raw) != {"path", "sha256", "size"}:
                raise ManifestError("manifest entry must be an object with path, sha256, size")
            if not isinstance(raw["path"], str) or not isinstance(raw["sha256"], str):
                raise ManifestError("manifest entry path and sha256 must be strings")
            entries.append(ManifestEntry(raw["path"], raw["size"], Sha256Digest(raw["sha256"])))
        manifest = cls(tuple(entries))
        if manifest.to_bytes() != data:
            raise ManifestError("manifest is not in canonical encoding")
        return manifest


def _hash_file(path: Path, rel: str, progress: Callable[[int], None] | None) -> ManifestEntry:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ManifestError(f"cannot open {_shown(rel)}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(f"{_shown(rel)} is not a regular file")
        h = hashlib.sha256()
        size = 0
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
            if progress is not None:
                progress(n)
        if size != os.fstat(f.fileno()).st_size or size != st.st_size:
            raise ManifestError(f"{_shown(rel)} changed while it was being hashed")
    return ManifestEntry(rel, size, Sha256Digest("sha256:" + h.hexdigest()))


def _walk(root: Path) -> Iterator[tuple[Path, str]]:
    """Yield (path, relative path) of every regular file; iterative, so depth is unbounded."""
    pending: list[tuple[Path, str]] = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as it:
            children = list(it)
        for child in children:
            name = child.name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise ManifestError(f"{_shown(prefix + name)}: file name is not UTF-8") from None
            rel = check_relative_path(prefix + name)
            if child.is_symlink():
                raise ManifestError(f"{_shown(rel)} is a symbolic link; manifests refuse links")
            if child.is_dir(follow_symlinks=False):
                pending.append((Path(child.path), rel + "/"))
            elif child.is_file(follow_symlinks=False):
                yield Path(child.path), rel
            else:
                raise ManifestError(f"{_shown(rel)} is not a regular file (fifo, socket or device)")


def build_manifest(root: Path, progress: Callable[[int], None] | None = None) -> Manifest:
    """Describe every regular file under ``root``, hashing each in 1 MiB chunks (constant
    memory per file). ``progress`` is called with the number of bytes just hashed."""
    root = Path(root)
    if root.is_symlink():
        raise ManifestError(f"manifest root {_shown(str(root))} is a symbolic link")
    if not root.is_dir():
        raise ManifestError(f"manifest root {_shown(str(root))} is not a directory")
    return Manifest.from_entries([_hash_file(path, rel, progress) for path, rel in _walk(root)])
