"""The wheel is a working distribution: built from a copy of the sources, installed into a fresh
virtual environment with its core dependencies, it imports from that environment (not from this
checkout) and round-trips data through the streaming AEAD. Every subpackage ships ``py.typed``.

Needs the package index (or pip's cache) for the core dependencies of the fresh environment.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]

pytestmark = pytest.mark.slow

ROUND_TRIP = """
import io, json, os, sys
from sealbench.crypto import streaming
key = os.urandom(32)
plaintext = os.urandom(3 * 1024 * 1024 + 7)
ciphertext = streaming.encrypt_bytes(key, plaintext, b"ad")
out = io.BytesIO()
streaming.decrypt_stream(key, io.BytesIO(ciphertext), out, b"ad")
print(json.dumps({"file": streaming.__file__, "ok": out.getvalue() == plaintext,
                  "prefix": sys.prefix}))
"""


@pytest.fixture(scope="module")
def wheel(sealbench_wheel: Path) -> Path:
    """The session's wheel (``tests/integration/conftest.py``), built from a copy of the
    sources."""
    return sealbench_wheel


def test_wheel_ships_every_subpackage_with_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGE_DIRS:
        path = package.replace(".", "/")
        assert f"{path}/__init__.py" in names, package
        assert f"{path}/py.typed" in names, package
    assert "sealbench/crypto/streaming.py" in names
    assert "sealbench/__init__.py" not in names, "sealbench is a namespace package"


def test_wheel_installs_into_fresh_venv_and_round_trips(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(wheel)],
        check=True,
        timeout=600,
    )
    result = subprocess.run(
        [str(python), "-I", "-c", ROUND_TRIP],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    report = json.loads(result.stdout)
    assert report["ok"] is True
    module_file = Path(report["file"]).resolve()
    assert module_file.is_relative_to(env_dir.resolve()), module_file
    assert not module_file.is_relative_to(REPO)
    assert Path(report["prefix"]).resolve() == env_dir.resolve()
