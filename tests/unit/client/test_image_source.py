"""The evaluation image records which checkout it was built from (the digest of the source
manifest, in a label), and a present ``sealbench-eval:latest`` built from other sources, or by a
sealbench that recorded nothing, is refused as stale rather than pinned by a benchmark."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sealbench.client.images.source import (
    LABEL_SOURCE_DIGEST,
    StaleImageError,
    check_built_from,
    source_digest,
    source_files,
    source_manifest,
)
from sealbench.crypto.digest import sha256_digest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A minimal sealbench checkout: metadata, the Dockerfile, two package folders."""
    root = tmp_path / "checkout"
    (root / "docker").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "sealbench"\n[tool.setuptools]\n'
        'package-dir = { "sealbench.crypto" = "crypto", "sealbench.client" = "client" }\n'
    )
    (root / "README.md").write_text("# sealbench\n")
    (root / "docker" / "Dockerfile").write_text("FROM scratch\n")
    for package in ("crypto", "client"):
        (root / package / "sub").mkdir(parents=True)
        (root / package / "__init__.py").write_text(f'"""{package}"""\n')
        (root / package / "sub" / "data.bin").write_bytes(b"\x00\x01")
    return root


def test_manifest_lists_what_the_build_takes(checkout: Path) -> None:
    paths = [entry.path for entry in source_manifest(checkout).entries]
    assert paths == sorted(paths)
    assert set(paths) == {
        "README.md", "docker/Dockerfile", "pyproject.toml",
        "client/__init__.py", "client/sub/data.bin", "crypto/__init__.py", "crypto/sub/data.bin",
    }


def test_bytecode_does_not_change_the_digest(checkout: Path) -> None:
    before = source_digest(checkout)
    (checkout / "client" / "__pycache__").mkdir()
    (checkout / "client" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    (checkout / "crypto" / "stray.pyc").write_bytes(b"cache")
    assert source_digest(checkout) == before


@pytest.mark.parametrize(
    "edit", ["client/__init__.py", "docker/Dockerfile", "pyproject.toml", "crypto/sub/data.bin"]
)
def test_one_changed_byte_changes_the_digest(checkout: Path, edit: str) -> None:
    before = source_digest(checkout)
    with (checkout / edit).open("ab") as handle:
        handle.write(b"\n")
    assert source_digest(checkout) != before


def test_renamed_file_changes_the_digest(checkout: Path) -> None:
    before = source_digest(checkout)
    (checkout / "client" / "sub" / "data.bin").rename(checkout / "client" / "sub" / "other.bin")
    assert source_digest(checkout) != before


def test_the_real_checkout_covers_every_package_and_the_dockerfile() -> None:
    paths = {rel for rel, _ in source_files(REPO)}
    assert {"docker/Dockerfile", "pyproject.toml", "client/images/source.py",
            "enclave/__main__.py"} <= paths
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in paths)


def test_image_built_from_this_checkout_passes(checkout: Path) -> None:
    digest = source_digest(checkout)
    check_built_from("sealbench-eval:latest", {LABEL_SOURCE_DIGEST: digest}, digest)


def test_image_built_from_other_sources_is_stale(checkout: Path) -> None:
    other = sha256_digest(b"other sources")
    with pytest.raises(StaleImageError, match="built from other sources") as caught:
        check_built_from("sealbench-eval:latest", {LABEL_SOURCE_DIGEST: other},
                         source_digest(checkout))
    assert caught.value.exit_code == 3 and "sealbench image build" in str(caught.value.hint)
    assert other in str(caught.value)


def test_image_without_the_label_is_stale(checkout: Path) -> None:
    with pytest.raises(StaleImageError, match="records no source digest"):
        check_built_from("sealbench-eval:latest", {"tee.launch_policy.log_redirect": "always"},
                         source_digest(checkout))


# -- against an engine (a fake one implementing the two calls used) ----------------------------

docker_errors = pytest.importorskip("docker.errors")


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str]


@dataclass
class FakeImages:
    tagged: dict[str, FakeImage] = field(default_factory=dict)

    def get(self, reference: str) -> FakeImage:
        if reference not in self.tagged:
            raise docker_errors.ImageNotFound(f"no such image: {reference}")
        return self.tagged[reference]


@dataclass
class FakeEngine:
    images: FakeImages = field(default_factory=FakeImages)


def _engine_with(labels: dict[str, str]) -> Any:
    engine = FakeEngine()
    engine.images.tagged["sealbench-eval:latest"] = FakeImage(
        str(sha256_digest(b"image config")), labels
    )
    return engine


def test_fresh_local_image_is_returned_when_built_from_the_checkout(checkout: Path) -> None:
    from sealbench.client.images.build import fresh_local_image

    engine = _engine_with({LABEL_SOURCE_DIGEST: source_digest(checkout)})
    found = fresh_local_image(engine, checkout)
    assert found.digest == sha256_digest(b"image config")
    assert found.labels[LABEL_SOURCE_DIGEST] == source_digest(checkout)


def test_stale_local_image_is_refused_after_an_edit(checkout: Path, tmp_path: Path) -> None:
    from sealbench.client.images.build import fresh_local_image

    engine = _engine_with({LABEL_SOURCE_DIGEST: source_digest(checkout)})
    edited = tmp_path / "edited"
    shutil.copytree(checkout, edited)
    (edited / "client" / "__init__.py").write_text('"""edited"""\n')
    with pytest.raises(StaleImageError, match="built from other sources"):
        fresh_local_image(engine, edited)


def test_absent_local_image_says_how_to_build_it(checkout: Path) -> None:
    from sealbench.client.images.build import ImageBuildError, fresh_local_image

    with pytest.raises(ImageBuildError, match="not present") as caught:
        fresh_local_image(FakeEngine(), checkout)  # type: ignore[arg-type]
    assert not isinstance(caught.value, StaleImageError)
    assert "sealbench image build" in str(caught.value.hint)
