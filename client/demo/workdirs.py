"""Where ``sealbench demo`` keeps its work folders, and ``sealbench demo --clean``.

Each demo run gets a fresh folder ``<root>/<YYYYmmdd-HHMMSS>-<6 hex>`` (about 250 MB at the
full case size: registry, mock TEE state, cases, sealed copies, run records), kept afterwards so
that it can be explored and kept when the demo fails so that it can be inspected. The root is
``$SEALBENCH_DEMO_DIR`` if set, else ``demo/`` under the user's cache directory
(``platformdirs.user_cache_dir("sealbench")``, e.g. ``~/.cache/sealbench/demo``), not the system
temporary directory: the folder holds the mock's INSECURE key material and tokens, so it belongs
to the user (mode 0700) rather than a shared ``/tmp``; it must outlive a reboot or a ``/tmp``
cleaner while someone explores it; and ``/tmp`` is memory-backed on many systems.

A demo folder is recognised by its name and by the marker file ``.sealbench-demo`` the demo
writes into it first; while the demo runs it holds an exclusive ``flock`` on the marker.
:func:`clean` removes exactly the direct children of the root that carry both and whose lock is
free; it leaves everything else (other files, symbolic links, a running demo's folder) alone.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import platformdirs

__all__ = [
    "ENV_DEMO_DIR",
    "MARKER",
    "CleanReport",
    "Removed",
    "claim",
    "clean",
    "demo_root",
    "disk_usage",
    "human_size",
    "is_cleanable",
    "new_workdir",
]

ENV_DEMO_DIR: Final = "SEALBENCH_DEMO_DIR"
MARKER: Final = ".sealbench-demo"
_NAME: Final = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def demo_root(environ: Mapping[str, str]) -> Path:
    """``$SEALBENCH_DEMO_DIR`` of ``environ`` (the caller's environment), else
    ``<user cache dir>/demo``."""
    override = environ.get(ENV_DEMO_DIR)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("sealbench")) / "demo"


def new_workdir(root: Path, now: datetime) -> Path:
    """Create a fresh, private demo folder under ``root`` named after ``now``."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    while True:
        path = root / f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path


@contextmanager
def claim(workdir: Path) -> Iterator[None]:
    """Mark ``workdir`` as a demo folder and hold its lock until the block ends, so that
    :func:`clean` run meanwhile leaves it alone."""
    # Locked under a temporary name, then renamed (the lock follows the file): a clean run
    # never sees the marker of a starting demo unlocked.
    pending = workdir / f"{MARKER}.{secrets.token_hex(4)}"
    fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        pending.replace(workdir / MARKER)
        yield
    finally:
        os.close(fd)  # releases the lock
        pending.unlink(missing_ok=True)


@dataclass(frozen=True)
class Removed:
    path: Path
    size_bytes: int


@dataclass(frozen=True)
class CleanReport:
    root: Path
    removed: tuple[Removed, ...]
    in_use: tuple[Path, ...]
    #: Entries of the root that are not demo folders (left untouched).
    other: tuple[Path, ...]

    @property
    def freed_bytes(self) -> int:
        return sum(r.size_bytes for r in self.removed)


def is_cleanable(workdir: Path, root: Path) -> bool:
    """Whether :func:`clean` of ``root`` would remove ``workdir`` once no demo uses it."""
    return workdir.parent == root.resolve() and _is_demo_folder(workdir)


def _is_demo_folder(path: Path) -> bool:
    if path.is_symlink() or not path.is_dir() or not _NAME.fullmatch(path.name):
        return False
    marker = path / MARKER
    return not marker.is_symlink() and marker.is_file()


def _try_lock(marker: Path) -> int | None:
    """An open descriptor holding the marker's lock, or None while a demo holds it."""
    fd = os.open(marker, os.O_RDWR | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def clean(root: Path) -> CleanReport:
    """Remove every demo folder directly under ``root`` that no running demo holds. (``root``
    itself may be reached through a symbolic link, e.g. a cache directory moved to another
    disk; its entries may not.)"""
    removed: list[Removed] = []
    in_use: list[Path] = []
    other: list[Path] = []
    root = root.resolve()
    entries = sorted(root.iterdir()) if root.is_dir() else []
    for entry in entries:
        if not _is_demo_folder(entry):
            other.append(entry)
            continue
        fd = _try_lock(entry / MARKER)
        if fd is None:
            in_use.append(entry)
            continue
        try:
            size = disk_usage(entry)
            shutil.rmtree(entry)
        finally:
            os.close(fd)
        removed.append(Removed(entry, size))
    return CleanReport(root, tuple(removed), tuple(in_use), tuple(other))


def disk_usage(path: Path) -> int:
    """Bytes of disk the files under ``path`` occupy (symbolic links not followed)."""
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                st = (Path(folder) / name).lstat()
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
    return total


def human_size(size_bytes: int) -> str:
    """``244 MiB``, ``1.2 GiB``, ``12 KiB``."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
