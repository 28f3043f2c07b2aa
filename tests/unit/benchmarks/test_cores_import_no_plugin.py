"""The cores (enclave, registry server, client) speak only the benchmark interface: none of
their modules imports a benchmark plug-in (``sealbench.benchmarks.<name>``) by name, statically
or through ``importlib``; they obtain plug-ins from :mod:`sealbench.benchmarks.registry`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
CORES = ("enclave", "server", "client")
#: What a core may import from ``sealbench.benchmarks``.
# release: the seam's own mechanism (the one door a figure takes out), no plug-in;
# onnx_safety and limits: the enclave's own checks of any plug-in's model and cases (a model is
# exactly its bytes; the per-case guard), no plug-in either; results: a result document read
# through whichever plug-in its pin names; pooling: the aggregator's computation over whichever
# plug-in the pin names (issue 27), no plug-in either; seeded_noise: the release's keyed noise
# source for the aggregator (issue 40), part of the release mechanism, no plug-in; planning:
# what a release spec's noise lets a board read (issue 41), arithmetic on the release, no plug-in
ALLOWED = frozenset({"sealbench.benchmarks", "sealbench.benchmarks.interface",
                     "sealbench.benchmarks.registry", "sealbench.benchmarks.release",
                     "sealbench.benchmarks.results", "sealbench.benchmarks.pooling",
                     "sealbench.benchmarks.onnx_safety", "sealbench.benchmarks.limits",
                     "sealbench.benchmarks.seeded_noise", "sealbench.benchmarks.planning"})


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "sealbench.benchmarks":
                found += [(node.lineno, f"sealbench.benchmarks.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def offenders(folder: Path, root: Path = ROOT) -> list[str]:
    out = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imports(tree):
            if module.startswith("sealbench.benchmarks") and module not in ALLOWED:
                out.append(f"{path.relative_to(root)}:{line} imports {module}")
    return out


@pytest.mark.parametrize("core", CORES)
def test_core_imports_no_benchmark_plugin(core: str) -> None:
    assert offenders(ROOT / core) == []


def test_the_scan_finds_a_plugin_import(tmp_path: Path) -> None:
    (tmp_path / "static.py").write_text("from sealbench.benchmarks.brats import aggregate\n")
    (tmp_path / "dynamic.py").write_text(
        "import importlib\nimportlib.import_module('sealbench.benchmarks.wdbc.plugin')\n")
    (tmp_path / "parent.py").write_text("from sealbench.benchmarks import brats\n")
    (tmp_path / "fine.py").write_text("from sealbench.benchmarks.interface import Benchmark\n")
    found = offenders(tmp_path, tmp_path)
    assert [f.split(" imports ")[1] for f in found] == [
        "sealbench.benchmarks.wdbc.plugin", "sealbench.benchmarks.brats",
        "sealbench.benchmarks.brats"]
