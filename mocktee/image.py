"""The mock backend's image digest: what an evaluation "image" is when the enclave runs as a
local process.

It is the digest of a canonical :class:`~sealbench.crypto.manifest.Manifest` over every file of
the installed packages the enclave imports — ``sealbench.enclave``, ``sealbench.crypto``,
``sealbench.platforms`` and ``sealbench.benchmarks`` (the shipped ONNX models included) — with paths
``sealbench/<package>/<relative path>``, each entry's size and SHA-256 of the file's content
(symbolic links, as a strict editable install makes, are followed). ``__pycache__`` folders and
``*.pyc`` files are left out: they are derived from the sources. Changing one byte of that code
changes the digest, so key owners' policies written for one version of the code do not release
keys to another, as with a real image digest.

The benchmark's **aggregator** (issue 27) is a second workload of the same code, started with
another fixed command (``python -m sealbench.enclave.aggregate``): as with two images built from
one tree with different entry points, its digest differs from the evaluation's,
:func:`aggregator_image_digest`, the SHA-256 of the canonical JSON ``{"code": <evaluation
digest>, "entry": "sealbench.enclave.aggregate"}``. A key owner's grant for one never admits the
other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.manifest import Manifest, ManifestEntry

__all__ = [
    "AGGREGATOR_MODULE",
    "EVALUATION_MODULE",
    "IMAGE_PACKAGES",
    "MockImage",
    "aggregator_image_digest",
    "enclave_image_digest",
    "image_manifest",
    "mock_aggregator_image",
    "mock_image",
    "package_entries",
]

IMAGE_PACKAGES: Final = ("enclave", "contract", "crypto", "platforms", "gcp", "benchmarks")
#: The module each mock "image" runs (its fixed command, ``python -m <module>``).
EVALUATION_MODULE: Final = "sealbench.enclave"
AGGREGATOR_MODULE: Final = "sealbench.enclave.aggregate"


def package_entries(package: str, root: Path) -> list[ManifestEntry]:
    """Manifest entries ``sealbench/<package>/<path>`` of every file under ``root`` (links
    followed; ``__pycache__`` and ``*.pyc`` left out)."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            if filename.endswith(".pyc"):
                continue
            path = Path(dirpath) / filename
            content = path.read_bytes()
            entries.append(
                ManifestEntry(
                    path=f"sealbench/{package}/{path.relative_to(root).as_posix()}",
                    size=len(content),
                    sha256=Sha256Digest("sha256:" + hashlib.sha256(content).hexdigest()),
                )
            )
    return entries


def _entries(package: str) -> list[ManifestEntry]:
    spec = importlib.util.find_spec(f"sealbench.{package}")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"sealbench.{package} is not installed")
    return [
        entry
        for location in spec.submodule_search_locations
        for entry in package_entries(package, Path(location))
    ]


def image_manifest(packages: tuple[str, ...] = IMAGE_PACKAGES) -> Manifest:
    """The manifest the digest is taken over."""
    return Manifest.from_entries([e for p in packages for e in _entries(p)])


def enclave_image_digest() -> Sha256Digest:
    """The mock image digest of the installed enclave code (see the module docstring)."""
    return image_manifest().digest


def aggregator_image_digest(code: Sha256Digest | None = None) -> Sha256Digest:
    """The mock digest of the aggregator "image" over the same code (module docstring);
    ``code`` is the evaluation digest when the caller already has it."""
    code = code or enclave_image_digest()
    document = canonical_json({"code": code, "entry": AGGREGATOR_MODULE})
    return Sha256Digest("sha256:" + hashlib.sha256(document).hexdigest())


@dataclass(frozen=True)
class MockImage:
    """The mock backend's evaluation image: a reference naming the digest, and the digest."""

    reference: str
    digest: Sha256Digest


def mock_image() -> MockImage:
    """The image the mock backend runs now (reference ``sealbench.local/evaluation@<digest>``)."""
    digest = enclave_image_digest()
    return MockImage(f"sealbench.local/evaluation@{digest}", digest)


def mock_aggregator_image() -> MockImage:
    """The aggregator the mock backend runs now (``sealbench.local/aggregator@<digest>``)."""
    digest = aggregator_image_digest()
    return MockImage(f"sealbench.local/aggregator@{digest}", digest)
