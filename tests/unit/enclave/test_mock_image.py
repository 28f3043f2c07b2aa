"""The mock backend's image digest follows the enclave's code: one changed byte, an added or a
renamed file changes it; byte-code caches do not."""

from __future__ import annotations

from pathlib import Path

from sealbench.crypto.manifest import Manifest
from sealbench.mocktee.image import package_entries


def _digest(root: Path) -> str:
    return Manifest.from_entries(package_entries("enclave", root)).digest


def test_digest_changes_with_the_code_and_ignores_bytecode(tmp_path: Path) -> None:
    root = tmp_path / "enclave"
    root.mkdir()
    (root / "steps.py").write_bytes(b"STEP = 1\n")
    base = _digest(root)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "steps.cpython-311.pyc").write_bytes(b"\x00" * 16)
    (root / "old.pyc").write_bytes(b"\x00")
    assert _digest(root) == base
    (root / "steps.py").write_bytes(b"STEP = 2\n")
    assert _digest(root) != base
    (root / "steps.py").write_bytes(b"STEP = 1\n")
    (root / "steps.py").rename(root / "stages.py")
    assert _digest(root) != base


def test_linked_files_are_hashed_by_content(tmp_path: Path) -> None:
    source = tmp_path / "src.py"
    source.write_bytes(b"X = 1\n")
    linked, copied = tmp_path / "a" / "enclave", tmp_path / "b" / "enclave"
    linked.mkdir(parents=True)
    copied.mkdir(parents=True)
    (linked / "m.py").symlink_to(source)
    (copied / "m.py").write_bytes(b"X = 1\n")
    assert _digest(linked) == _digest(copied)

