"""The packages depend on each other one way, from the ground up (docs/architecture.md,
"Layers"): ``crypto`` → ``contract`` → ``benchmarks`` and the platform interfaces
(``platforms``) → the platform implementations (``gcp``, ``mocktee``) → ``enclave`` and
``server`` → ``client``. Every import between packages is read from the source (module level,
inside functions, under ``TYPE_CHECKING``, and ``importlib.import_module`` with a literal name)
and must follow an edge of :data:`MAY_IMPORT`; :data:`MAY_IMPORT` itself must have no cycle.

Inside the client the same rule holds one size smaller (docs/architecture.md, "The client's
rooms"): its sub-packages are rooms on floors (``cli`` → ``demo`` → ``views`` → ``runs`` →
``assets`` → ``registry`` → ``images``), the modules at its top are the ground floor every room
stands on, and every import between rooms must follow an edge of :data:`CLIENT_MAY_IMPORT`.

Which *implementation* a core names is a separate rule, held by test_platform_seam.py: the
enclave, the server and the client reach a platform through its entry point, never by name.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from itertools import pairwise
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


#: The modules at the client's top: the ground floor of its rooms (errors, optional extras, the
#: ``--tee`` backends, the benchmark plug-ins, pins in words, the ``benchmark init`` template).
#: Every room may import them; they import no room. A new top-level module is placed here or in
#: a room, deliberately.
CLIENT_GROUND = "(ground)"
CLIENT_GROUND_MODULES = frozenset(
    {"__init__", "errors", "extras", "backends", "plugins", "pin_words", "processes", "scaffold"}
)

#: Which rooms of the client (its sub-packages) each room may import (besides itself): each
#: floor imports only the floors below it. The documented direction.
CLIENT_MAY_IMPORT: dict[str, frozenset[str]] = {
    CLIENT_GROUND: frozenset(),
    # building images and naming the image a benchmark pins
    "images": frozenset({CLIENT_GROUND}),
    # talking to the registry: the API, profiles, definitions, governance, the audit log
    "registry": frozenset({"images", CLIENT_GROUND}),
    # an owner's assets: prepare, seal, grants, policies, the result key
    "assets": frozenset({"registry", "images", CLIENT_GROUND}),
    # confidential runs: spec, launch, records, outcome, results, pooling, the inbox
    "runs": frozenset({"assets", "registry", "images", CLIENT_GROUND}),
    # what the commands and the demo print
    "views": frozenset({"runs", "assets", "registry", "images", CLIENT_GROUND}),
    # the demo, on the library (never on a command)
    "demo": frozenset({"views", "runs", "assets", "registry", "images", CLIENT_GROUND}),
    # the commands: the only room that imports the demo (``sealbench demo``)
    "cli": frozenset({"demo", "views", "runs", "assets", "registry", "images", CLIENT_GROUND}),
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
            found.add(node.module)
            # the names may be modules: from sealbench import client, from
            # sealbench.client import plugins (a name that is not adds nothing to where it is)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
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


# -- the client's rooms -------------------------------------------------------------------------

CLIENT = REPO / "client"


def room_of(module: str) -> str | None:
    """The client room ``module`` (a ``sealbench.client.*`` name) is in: its sub-package, or
    :data:`CLIENT_GROUND` for a module at the client's top; None outside the client (and for
    the package itself); the first name otherwise, which no room holds."""
    parts = module.split(".")
    if parts[:2] != ["sealbench", "client"] or len(parts) < 3:
        return None
    return CLIENT_GROUND if parts[2] in CLIENT_GROUND_MODULES else parts[2]


def room_of_file(path: Path) -> str:
    first = path.relative_to(CLIENT).parts
    return first[0] if len(first) > 1 else room_of(f"sealbench.client.{path.stem}") or "?"


def upward_imports(room: str, source: str) -> list[str]:
    """The imports in ``source`` (a module of ``room``) of another room that ``room`` may not
    import (:data:`CLIENT_MAY_IMPORT`)."""
    return sorted(
        module for module in imports_of(source)
        if (target := room_of(module)) is not None and target != room
        and target not in CLIENT_MAY_IMPORT[room]
    )


def test_every_room_of_the_client_has_a_place_on_a_floor() -> None:
    rooms = {p.name for p in CLIENT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(CLIENT_MAY_IMPORT) - {CLIENT_GROUND}
    assert {p.stem for p in CLIENT.glob("*.py")} == CLIENT_GROUND_MODULES


def test_the_client_s_floors_have_no_cycle() -> None:
    order = list(TopologicalSorter(CLIENT_MAY_IMPORT).static_order())
    assert order[0] == CLIENT_GROUND and order[-1] == "cli"
    # each floor may import every floor below it, and only those: a line, not a tree
    for below, above in pairwise(order):
        assert CLIENT_MAY_IMPORT[above] == CLIENT_MAY_IMPORT[below] | {below}


def test_every_import_between_the_client_s_rooms_follows_the_floors() -> None:
    against = {
        str(path.relative_to(REPO)): bad
        for path in sorted(CLIENT.rglob("*.py"))
        if (bad := upward_imports(room_of_file(path), path.read_text()))
    }
    assert against == {}, "\n".join(f"{p} imports {', '.join(b)}" for p, b in against.items())


@pytest.mark.parametrize(
    ("room", "source"),
    [
        # the edges issue 45 removed, and one of each kind
        ("registry", "from sealbench.client.runs.records import RunRecord"),
        ("assets", "def f():\n    from sealbench.client.runs.launch import run_evaluations"),
        ("demo", "from sealbench.client.cli.render import print_table"),
        ("runs", "from sealbench.client import cli"),
        ("images", "import sealbench.client.registry.api"),
        (CLIENT_GROUND, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from sealbench.client.registry.api import RegistryClient"),
        ("views", "import importlib\nimportlib.import_module('sealbench.client.demo.flow')"),
    ],
)
def test_an_import_up_a_floor_is_reported(room: str, source: str) -> None:
    assert upward_imports(room, source) != []


@pytest.mark.parametrize(
    ("room", "source"),
    [
        ("cli", "from sealbench.client.demo import flow"),
        ("runs", "from sealbench.client.registry.api import RegistryClient"),
        ("registry", "from sealbench.client import plugins"),
        ("images", "from sealbench.client.backends import TeeBackend"),
        ("assets", "from sealbench.client.assets.grants import lag_notice"),
    ],
)
def test_an_import_down_or_within_a_room_is_not(room: str, source: str) -> None:
    assert upward_imports(room, source) == []
