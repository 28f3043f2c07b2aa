"""Which sources an evaluation image was built from, so that a present ``sealbench-eval:latest``
is reused only when it was built from this checkout.

The build records the digest of the **source manifest** in the image label
:data:`LABEL_SOURCE_DIGEST`. The source manifest is a canonical
:class:`~sealbench.crypto.manifest.Manifest` (relative path, size, SHA-256 of each file) of what
the build takes from the checkout: ``pyproject.toml``, ``README.md``, ``docker/Dockerfile`` and
every file of the package folders of ``[tool.setuptools] package-dir``, without ``__pycache__``
folders and ``*.pyc`` files (:func:`source_files`; the build copies exactly these). Changing one
byte of any of them changes the digest; the build's other inputs (the wheels of the ``enclave``
and ``gcp`` extras from the package index, the base image) are not covered.

:func:`check_built_from` raises :class:`StaleImageError` when an image's label is absent or names
another digest. No Docker SDK is needed here.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from sealbench.client.errors import ConfigError
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.manifest import Manifest, ManifestEntry

__all__ = [
    "LABEL_SOURCE_DIGEST",
    "StaleImageError",
    "check_built_from",
    "source_digest",
    "source_files",
    "source_manifest",
]

#: The image label holding :func:`source_digest` of the checkout the image was built from.
LABEL_SOURCE_DIGEST: Final = "org.sealbench.source-manifest-digest"
_TOP_FILES: Final = ("pyproject.toml", "README.md", "docker/Dockerfile")
_SKIPPED_DIRS: Final = frozenset({"__pycache__"})
_SKIPPED_SUFFIX: Final = ".pyc"


class StaleImageError(ConfigError):
    """The present evaluation image was not built from this checkout (exit 3)."""

    default_hint = "rebuild it from this checkout with 'sealbench image build'"


def _package_folders(source: Path) -> list[str]:
    pyproject = tomllib.loads((source / "pyproject.toml").read_text())
    package_dirs: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    return sorted(set(package_dirs.values()))


def source_files(source: Path) -> Iterator[tuple[str, Path]]:
    """``(relative POSIX path, file)`` of every file the image build takes from ``source``."""
    for name in _TOP_FILES:
        yield name, source / name
    for folder in _package_folders(source):
        root = source / folder
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
            for filename in sorted(filenames):
                if not filename.endswith(_SKIPPED_SUFFIX):
                    path = Path(dirpath) / filename
                    yield path.relative_to(source).as_posix(), path


def source_manifest(source: Path) -> Manifest:
    """The source manifest of the checkout ``source`` (see the module docstring)."""
    entries = []
    for rel, path in source_files(source):
        content = path.read_bytes()
        digest = Sha256Digest("sha256:" + hashlib.sha256(content).hexdigest())
        entries.append(ManifestEntry(path=rel, size=len(content), sha256=digest))
    return Manifest.from_entries(entries)


def source_digest(source: Path) -> Sha256Digest:
    """The digest :data:`LABEL_SOURCE_DIGEST` records: of :func:`source_manifest`."""
    return source_manifest(source).digest


def check_built_from(
    reference: str, labels: Mapping[str, str], expected: Sha256Digest
) -> None:
    """Raise :class:`StaleImageError` unless the image ``reference`` with ``labels`` records
    the source digest ``expected``."""
    recorded = labels.get(LABEL_SOURCE_DIGEST)
    if recorded is None:
        raise StaleImageError(
            f"the evaluation image {reference} records no source digest (label "
            f"{LABEL_SOURCE_DIGEST}): it was built by an older sealbench, from unknown sources"
        )
    if recorded != expected:
        raise StaleImageError(
            f"the evaluation image {reference} was built from other sources (source digest "
            f"{recorded}) than this checkout ({expected})"
        )
