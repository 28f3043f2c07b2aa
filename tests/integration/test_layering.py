"""The packages depend on each other one way, from the ground up (docs/architecture.md,
"Layers"): ``crypto`` → ``contract`` → ``benchmarks`` and the platform interfaces
(``platforms``) → the platform implementations (``gcp``, ``mocktee``) → ``enclave`` and
``server`` → ``client``. Every import between packages is read from the source (module level,
inside functions, under ``TYPE_CHECKING``, and ``importlib.import_module`` with a literal name)
and must follow an edge of :data:`MAY_IMPORT`; :data:`MAY_IMPORT` itself must have no cycle.

Which *implementation* a core names is a separate rule, held by test_platform_seam.py: the
enclave, the server and the client reach a platform through its entry point, never by name.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Which packages each package may import (besides itself). The documented direction.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "crypto": frozenset(),
    "contract": frozenset({"crypto"}),
    "benchmarks": frozenset({"contract", "crypto"}),
    "platforms": frozenset({"contract", "crypto"}),
    "gcp": frozenset({"platforms", "contract", "crypto"}),
    # the mock imitates Confidential Space: it reuses Google's claim schema and CEL rendering
    "mocktee": frozenset({"gcp", "platforms", "contract", "crypto"}),
    "enclave": frozenset({"benchmarks", "platforms", "contract", "crypto"}),
    "server": frozenset({"benchmarks", "platforms", "contract", "crypto"}),
    # the client reaches Google's code only through the platforms' entry points (issue 26)
    "client": frozenset(
        {"server", "enclave", "mocktee", "benchmarks", "platforms", "contract", "crypto"}
    ),
}


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "sealbench":
        return parts[1]
    return None


def imports_of(source: str) -> set[str]:
    """Every ``sealbench.*`` module a source file imports, in any form."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "sealbench":  # from sealbench import client
                found.update(f"sealbench.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return {m for m in found if m.startswith("sealbench.")}


def edges() -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> the files that make the edge."""
    out: dict[tuple[str, str], list[str]] = {}
    for package in MAY_IMPORT:
        for path in sorted((REPO / package).rglob("*.py")):
            for module in imports_of(path.read_text()):
                target = _package_of(module)
                if target is not None and target != package:
                    out.setdefault((package, target), []).append(
                        f"{path.relative_to(REPO)} imports {module}"
                    )
    return out


def test_every_top_level_package_has_a_place_in_the_layers() -> None:
    on_disk = {
        p.name for p in REPO.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    assert on_disk == set(MAY_IMPORT)


def test_the_documented_direction_has_no_cycle() -> None:
    try:
        order = list(TopologicalSorter(MAY_IMPORT).static_order())
    except CycleError as exc:  # pragma: no cover - the failure message
        pytest.fail(f"the layers have a cycle: {exc.args[1]}")
    assert order[0] == "crypto" and order[-1] == "client"


def test_every_import_between_packages_follows_the_direction() -> None:
    against = {
        edge: files for edge, files in edges().items() if edge[1] not in MAY_IMPORT[edge[0]]
    }
    assert against == {}, "\n".join(
        f"{a} -> {b}:\n  " + "\n  ".join(files) for (a, b), files in sorted(against.items())
    )


def test_the_packages_have_no_cycle_in_fact() -> None:
    graph: dict[str, set[str]] = {p: set() for p in MAY_IMPORT}
    for importer, imported in edges():
        graph[importer].add(imported)
    TopologicalSorter(graph).prepare()  # raises CycleError on any cycle


@pytest.mark.parametrize(
    "source",
    [
        "from sealbench.client.cli import app",
        "from sealbench import client",
        "import sealbench.client.cli",
        "def f():\n    from sealbench.client import cli",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sealbench.client import cli",
        "import importlib\nimportlib.import_module('sealbench.client.cli')",
        "from importlib import import_module\nimport_module('sealbench.client.cli')",
    ],
)
def test_the_scan_sees_every_form_of_import(source: str) -> None:
    assert {_package_of(m) for m in imports_of(source)} == {"client"}


def test_an_import_against_the_direction_is_reported() -> None:
    # crypto importing the client: the edge the rule must catch
    modules = imports_of("from sealbench.client.cli import app\n")
    assert any(_package_of(m) not in MAY_IMPORT["crypto"] for m in modules)
