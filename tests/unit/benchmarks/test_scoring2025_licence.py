"""The official BraTS 2025 evaluator (``BraTS_evaluation``, ``panoptica``: AGPL-3.0) is a test
oracle only: no shipped module imports it, and neither the core dependencies nor the extras the
evaluation image installs (``docker/Dockerfile``) name it; the dev extra does, so ``make test``
runs the conformance test against it."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[3]
ORACLE_MODULES = frozenset({"brats_evaluation", "panoptica", "cc3d"})
ORACLE_DISTRIBUTIONS = frozenset({"brats-evaluation", "panoptica"})
SHIPPED = ("crypto", "cloud", "mocktee", "server", "enclave", "benchmarks", "client")


def _imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                roots.add(node.args[0].value.split(".")[0])
    return roots


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert found, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def _extras(requirement: str) -> list[str]:
    found = re.search(r"\[([^\]]*)\]", requirement)
    return [e.strip() for e in found.group(1).split(",")] if found else []


def test_no_shipped_module_imports_the_official_evaluator() -> None:
    offenders = [
        str(path.relative_to(ROOT)) for package in SHIPPED
        for path in sorted((ROOT / package).rglob("*.py"))
        if _imported_roots(path.read_text(encoding="utf-8")) & ORACLE_MODULES]
    assert offenders == []


def test_the_scan_sees_an_import_of_the_oracle() -> None:
    assert _imported_roots("from panoptica import Panoptica_Evaluator\nimport cc3d\n") == {
        "panoptica", "cc3d"}
    assert "brats_evaluation" in _imported_roots(
        "import importlib\nimportlib.import_module('brats_evaluation.evaluation')\n")


def _image_requirements(project: dict[str, object]) -> set[str]:
    """The distributions the image's ``pip install 'sealbench[...]'`` line brings in directly:
    the core dependencies and every extra it names (extras naming extras followed)."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    named = re.findall(r"sealbench\[([^\]]+)\]", dockerfile)
    assert named, "the Dockerfile installs sealbench with extras"
    optional = project["optional-dependencies"]
    assert isinstance(optional, dict)
    pending = [e.strip() for group in named for e in group.split(",")]
    seen: set[str] = set()
    names = {_name(r) for r in project["dependencies"]}  # type: ignore[union-attr]
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in optional[extra]:
            if _name(requirement) == "sealbench":
                pending += _extras(requirement)
            else:
                names.add(_name(requirement))
    return names


def test_the_image_install_set_excludes_the_official_evaluator() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    image = _image_requirements(project)
    assert "onnxruntime" in image  # the scan reads the image's extras
    assert image & ORACLE_DISTRIBUTIONS == set()
    plugins = ROOT / "docker" / "plugins.txt"
    if plugins.exists():
        listed = {_name(line) for line in plugins.read_text(encoding="utf-8").splitlines()
                  if line.strip() and not line.lstrip().startswith("#")}
        assert listed & ORACLE_DISTRIBUTIONS == set()


def test_the_dev_extra_installs_the_oracle_for_the_tests() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = {_name(r) for r in project["optional-dependencies"]["dev"]}
    assert dev >= ORACLE_DISTRIBUTIONS
    for extra, requirements in project["optional-dependencies"].items():
        if extra != "dev":
            assert {_name(r) for r in requirements} & ORACLE_DISTRIBUTIONS == set(), extra
