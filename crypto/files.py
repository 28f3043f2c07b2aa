"""Writing a file that holds a secret (or must never be seen half-written): the one way every
package does it.

The bytes go to a temporary name in the same directory, created exclusively (``O_EXCL``, no
symlink followed) with the final mode from the start, are fsynced, and only then appear under
the final name: by atomic rename, or by hard link when an existing file must never be replaced
(``FileExistsError``). The directory is fsynced after, so the name survives a crash. No moment
exists where the final name holds a partial file or looser permissions; on any failure the
temporary file is removed and the final name is untouched.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["write_private"]

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_private(
    path: Path | str,
    data: bytes,
    *,
    mode: int = 0o600,
    overwrite: bool = True,
    owner_uid: int | None = None,
) -> None:
    """Write ``data`` to ``path`` atomically with ``mode`` (0600 unless told otherwise).

    ``overwrite=False`` refuses to replace an existing file (``FileExistsError``) instead of
    renaming over it. ``owner_uid`` hands the file to that user before it appears under its
    name (the mock launcher gives its token file to the workload's user)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, _FLAGS, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # the umask may have narrowed the mode
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if owner_uid is not None:
            os.chown(tmp, owner_uid, -1)
        if overwrite:
            tmp.replace(path)
        else:
            path.hardlink_to(tmp)
            tmp.unlink()
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse to open a directory
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
