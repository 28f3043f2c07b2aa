"""Canonical manifests: every change to a tree changes the digest, equal trees give equal
digests, and anything a manifest cannot honestly describe is refused."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench.crypto.errors import DigestMismatchError, ManifestError
from sealbench.crypto.manifest import Manifest, ManifestEntry, build_manifest


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


BASE = {
    "cases/BraTS-001/t1.nii.gz": b"t1" * 1000,
    "cases/BraTS-001/seg.nii.gz": b"labels",
    "cases/BraTS-002/t1.nii.gz": b"t1-two",
    "dataset.json": b'{"name": "x"}',
    "empty.txt": b"",
}


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "base", BASE)


def digest_of(files: dict[str, bytes], root: Path) -> str:
    return build_manifest(make_tree(root, files)).digest


def test_manifest_lists_relative_paths_sizes_and_hashes(base: Path) -> None:
    manifest = build_manifest(base)
    assert [e.path for e in manifest.entries] == sorted(BASE)
    entry = manifest.entry("dataset.json")
    assert entry.size == len(BASE["dataset.json"])
    assert entry.sha256 == "sha256:" + hashlib.sha256(BASE["dataset.json"]).hexdigest()
    assert manifest.digest == "sha256:" + hashlib.sha256(manifest.to_bytes()).hexdigest()
    assert manifest.total_size == sum(len(v) for v in BASE.values())


def test_identical_trees_give_identical_digests(tmp_path: Path, base: Path) -> None:
    other = tmp_path / "other"
    for rel in reversed(sorted(BASE)):  # created in another order
        path = other / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(BASE[rel])
        os.utime(path, (12345, 12345))
    (other / "an-empty-dir").mkdir()
    assert build_manifest(other).digest == build_manifest(base).digest


def test_renamed_file_changes_digest(tmp_path: Path, base: Path) -> None:
    files = dict(BASE)
    files["dataset2.json"] = files.pop("dataset.json")
    assert digest_of(files, tmp_path / "t") != build_manifest(base).digest


def test_moved_file_changes_digest(tmp_path: Path, base: Path) -> None:
    files = dict(BASE)
    files["cases/BraTS-002/seg.nii.gz"] = files.pop("cases/BraTS-001/seg.nii.gz")
    assert digest_of(files, tmp_path / "t") != build_manifest(base).digest


def test_added_file_changes_digest(tmp_path: Path, base: Path) -> None:
    assert digest_of({**BASE, ".hidden": b""}, tmp_path / "t") != build_manifest(base).digest


def test_removed_file_changes_digest(tmp_path: Path, base: Path) -> None:
    files = dict(BASE)
    del files["empty.txt"]
    assert digest_of(files, tmp_path / "t") != build_manifest(base).digest


def test_one_changed_byte_changes_digest(tmp_path: Path, base: Path) -> None:
    files = dict(BASE)
    data = bytearray(files["cases/BraTS-001/t1.nii.gz"])
    data[1234] ^= 0x01
    files["cases/BraTS-001/t1.nii.gz"] = bytes(data)
    assert digest_of(files, tmp_path / "t") != build_manifest(base).digest


def test_large_file_is_streamed_with_progress(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 5)
    root = make_tree(tmp_path / "big", {"weights.onnx": data})
    seen: list[int] = []
    manifest = build_manifest(root, progress=seen.append)
    assert sum(seen) == len(data)
    assert max(seen) <= 1 << 20
    assert manifest.entry("weights.onnx").sha256 == "sha256:" + hashlib.sha256(data).hexdigest()


# -- refusals -----------------------------------------------------------------------------------


def test_symlinked_file_refused(base: Path) -> None:
    (base / "cases" / "link.nii.gz").symlink_to(base / "dataset.json")
    with pytest.raises(ManifestError, match=re.escape("cases/link.nii.gz")):
        build_manifest(base)


def test_symlinked_directory_refused(tmp_path: Path, base: Path) -> None:
    outside = make_tree(tmp_path / "outside", {"secret.txt": b"x"})
    (base / "cases" / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ManifestError, match="cases/escape"):
        build_manifest(base)


def test_dangling_symlink_refused(base: Path) -> None:
    (base / "nowhere").symlink_to(base / "does-not-exist")
    with pytest.raises(ManifestError, match="nowhere"):
        build_manifest(base)


def test_symlinked_root_refused(tmp_path: Path, base: Path) -> None:
    link = tmp_path / "root-link"
    link.symlink_to(base, target_is_directory=True)
    with pytest.raises(ManifestError, match="symbolic link"):
        build_manifest(link)


def test_fifo_refused(base: Path) -> None:
    os.mkfifo(base / "cases" / "pipe")
    with pytest.raises(ManifestError, match="cases/pipe"):
        build_manifest(base)


def test_socket_refused(base: Path) -> None:
    path = base / "s.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        with pytest.raises(ManifestError, match=re.escape("s.sock")):
            build_manifest(base)


def test_root_that_is_a_file_refused(base: Path) -> None:
    with pytest.raises(ManifestError, match="not a directory"):
        build_manifest(base / "dataset.json")


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../up", "a/../b", "a/./b", "./a", "a//b", "a/", "a\\b", "a\nb", "a/.."],
)
def test_unsafe_paths_refused(path: str) -> None:
    with pytest.raises(ManifestError):
        ManifestEntry(path, 0, "sha256:" + "0" * 64)  # type: ignore[arg-type]


def test_bad_entries_refused() -> None:
    digest = "sha256:" + "0" * 64
    with pytest.raises(ManifestError):
        ManifestEntry("a", -1, digest)  # type: ignore[arg-type]
    with pytest.raises(ManifestError):
        ManifestEntry("a", True, digest)  # type: ignore[arg-type]
    with pytest.raises(ManifestError):
        ManifestEntry("a", 1, "sha256:XYZ")  # type: ignore[arg-type]
    a = ManifestEntry("a", 1, digest)  # type: ignore[arg-type]
    b = ManifestEntry("b", 1, digest)  # type: ignore[arg-type]
    with pytest.raises(ManifestError, match="out of order"):
        Manifest((b, a))
    with pytest.raises(ManifestError, match="duplicated"):
        Manifest((a, a))


# -- parsing ------------------------------------------------------------------------------------


def test_from_bytes_round_trip(base: Path) -> None:
    manifest = build_manifest(base)
    parsed = Manifest.from_bytes(manifest.to_bytes())
    assert parsed == manifest
    assert parsed.digest == manifest.digest


@pytest.mark.parametrize(
    "document",
    [
        b"",
        b"[]",
        b'{"entries":[],"format":"sealbench-manifest"}',
        b'{"entries":[],"format":"sealbench-manifest","version":2}',
        b'{"entries":[],"format":"sealbench-manifest","version":true}',
        b'{"entries":[],"format":"other","version":1}',
        b'{"entries":{},"format":"sealbench-manifest","version":1}',
        b'{"entries":[],"extra":1,"format":"sealbench-manifest","version":1}',
        b'{ "entries":[],"format":"sealbench-manifest","version":1}',
        b'{"entries":[{"path":"a","sha256":"sha256:' + b"0" * 64 + b'","size":-1}],'
        b'"format":"sealbench-manifest","version":1}',
        b'{"entries":[{"path":"a","sha256":"sha256:' + b"0" * 64 + b'","size":1.0}],'
        b'"format":"sealbench-manifest","version":1}',
        b'{"entries":[{"path":"../a","sha256":"sha256:' + b"0" * 64 + b'","size":1}],'
        b'"format":"sealbench-manifest","version":1}',
        b'{"entries":[{"path":"a","sha256":"md5:00","size":1}],'
        b'"format":"sealbench-manifest","version":1}',
        b'{"entries":[{"path":"b","sha256":"sha256:' + b"0" * 64 + b'","size":1},'
        b'{"path":"a","sha256":"sha256:' + b"0" * 64 + b'","size":1}],'
        b'"format":"sealbench-manifest","version":1}',
        b'{"entries":[],"format":"sealbench-manifest","version":1,"version":1}',
    ],
)
def test_malformed_manifest_rejected(document: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_bytes(document)


def test_oversized_manifest_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    from sealbench.crypto import manifest as module

    monkeypatch.setattr(module, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(ManifestError, match="larger"):
        Manifest.from_bytes(b" " * 101)


def test_verify_checks_content_and_path(base: Path) -> None:
    manifest = build_manifest(base)
    manifest.verify("dataset.json", BASE["dataset.json"])
    with pytest.raises(DigestMismatchError):
        manifest.verify("dataset.json", BASE["dataset.json"] + b" ")
    with pytest.raises(DigestMismatchError):
        manifest.verify("empty.txt", b"\x00")
    with pytest.raises(ManifestError, match="no file"):
        manifest.verify("missing.json", b"")


safe_component = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
safe_path = st.lists(safe_component, min_size=1, max_size=4).map("/".join)
entries = st.dictionaries(
    safe_path,
    st.tuples(st.integers(0, 1 << 40), st.binary(min_size=32, max_size=32)),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(entries)
def test_to_bytes_from_bytes_round_trip(raw: dict[str, tuple[int, bytes]]) -> None:
    manifest = Manifest.from_entries(
        [
            ManifestEntry(path, size, "sha256:" + digest.hex())  # type: ignore[arg-type]
            for path, (size, digest) in raw.items()
        ]
    )
    data = manifest.to_bytes()
    parsed = Manifest.from_bytes(data)
    assert parsed == manifest
    assert parsed.to_bytes() == data
    assert [e.path.encode() for e in parsed.entries] == sorted(p.encode() for p in raw)
