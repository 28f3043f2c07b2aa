"""The one atomic private-file write every package uses (crypto/files.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sealbench.crypto import files
from sealbench.crypto.files import write_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_is_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_private(tmp_path / "key", b"secret")
    finally:
        os.umask(old)
    assert (tmp_path / "key").read_bytes() == b"secret"
    assert _mode(tmp_path / "key") == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key"]  # no temporary file left


def test_an_explicit_mode_is_kept(tmp_path: Path) -> None:
    write_private(tmp_path / "public", b"x", mode=0o644)
    assert _mode(tmp_path / "public") == 0o644


def test_overwrite_replaces_and_no_overwrite_refuses(tmp_path: Path) -> None:
    target = tmp_path / "key"
    write_private(target, b"one")
    write_private(target, b"two")
    assert target.read_bytes() == b"two"
    with pytest.raises(FileExistsError):
        write_private(target, b"three", overwrite=False)
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "key"
    write_private(target, b"old")

    def fail(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", fail)
    with pytest.raises(OSError, match="No space"):
        write_private(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"untouched")
    folder = tmp_path / "keys"
    folder.mkdir()
    (folder / "key").symlink_to(outside)
    write_private(folder / "key", b"secret")  # replaces the link itself, not its target
    assert outside.read_bytes() == b"untouched"
    assert not (folder / "key").is_symlink()
    assert (folder / "key").read_bytes() == b"secret"
