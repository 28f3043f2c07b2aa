"""The demo is a room of the library (issue 26): its modules import no module of the CLI (the
rendering both share, so that its leaderboard is what ``sealbench benchmark leaderboard``
prints, is the room below, :mod:`sealbench.client.views`; issue 45) and read no environment;
the CLI's ``sealbench demo`` is its only entry point and the only one that reads the
environment."""

from __future__ import annotations

import ast
from pathlib import Path

import sealbench.client.demo

DEMO = Path(sealbench.client.demo.__file__).resolve().parent
def _modules() -> list[Path]:
    found = sorted(DEMO.glob("*.py"))
    assert {p.name for p in found} >= {"flow.py", "plugins.py", "workdirs.py"}
    return found


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value))
    return names


def _is_cli(name: str) -> bool:
    return name == "sealbench.client.cli" or name.startswith("sealbench.client.cli.")


def test_the_demo_imports_no_command_module() -> None:
    for path in _modules():
        names = _imports(ast.parse(path.read_text()))
        # "from sealbench.client.cli import run" adds sealbench.client.cli.run
        bad = {n for n in names if _is_cli(n)}
        assert not bad, f"{path.name} imports {sorted(bad)}: call the library instead"


def test_the_demo_reads_no_environment() -> None:
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                raise AssertionError(f"{path.name}:{node.lineno} reads os.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                names = {alias.name for alias in node.names}
                assert not names & {"environ", "getenv"}, f"{path.name} imports {names}"
            if isinstance(node, ast.Name) and node.id in ("scoped_environ", "session"):
                raise AssertionError(f"{path.name}:{node.lineno} uses {node.id}")


def test_the_walk_would_see_a_command_import() -> None:
    tree = ast.parse("from sealbench.client.cli import run as x\n"
                     "import os\nos.environ.get('X')\n")
    assert "sealbench.client.cli.run" in _imports(tree)
    assert any(isinstance(n, ast.Attribute) and n.attr == "environ" for n in ast.walk(tree))


def test_the_cli_entry_point_is_the_commands() -> None:
    from sealbench.client.cli import app

    commands = {c.name: c.callback for c in app.registered_commands}
    assert commands["demo"].__module__ == "sealbench.client.cli.demo"
