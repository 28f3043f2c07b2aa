"""The cores never import a TEE platform implementation (STYLE: seams for what varies).

Every Python module of ``crypto/``, ``enclave/``, ``server/`` and ``client/`` is parsed, and each
import in it (``import``, ``from … import``, at any depth, under ``TYPE_CHECKING`` too, and
``importlib.import_module``/``__import__`` with a literal name) is checked against the
implementation modules: the modules the ``sealbench.platforms`` entry points name, and the
private (``_``-prefixed) modules of their package those import. Only the entry points (pyproject)
name them; the cores reach a platform through :mod:`sealbench.platforms.platform`."""

from __future__ import annotations

import ast
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from sealbench.platforms.platform import PLATFORM_GROUP

REPO = Path(__file__).resolve().parents[2]
CORES = ("crypto", "enclave", "server", "client")


def _imports(source: str) -> set[str]:
    """Every module name ``source`` imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in {"import_module", "__import__"} and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def _source_of(module: str) -> Path:
    package, _, name = module.removeprefix("sealbench.").rpartition(".")
    return REPO / package.replace(".", "/") / f"{name}.py"


def implementation_modules() -> frozenset[str]:
    found: set[str] = set()
    for ep in entry_points(group=PLATFORM_GROUP):
        module = ep.value.partition(":")[0]
        found.add(module)
        package = module.rpartition(".")[0]
        for imported in _imports(_source_of(module).read_text()):
            if imported.startswith(f"{package}._") and _source_of(imported).exists():
                found.add(imported)
    return frozenset(found)


def violations(source: str, forbidden: frozenset[str]) -> list[str]:
    return sorted(name for name in _imports(source) if name in forbidden)


def test_the_entry_points_name_both_implementations_and_their_private_modules() -> None:
    forbidden = implementation_modules()
    assert {
        "sealbench.gcp.confidential_space",
        "sealbench.gcp._cs_claims",
        "sealbench.gcp._cs_cel",
        "sealbench.mocktee.platform",
    } <= forbidden


@pytest.mark.parametrize(
    "source",
    [
        "from sealbench.gcp.confidential_space import AttestationPolicy",
        "from sealbench.gcp import confidential_space",
        "import sealbench.mocktee.platform as p",
        "def f():\n    from sealbench.gcp._cs_cel import render_condition",
        "if TYPE_CHECKING:\n    from sealbench.mocktee.platform import InsecureMockPlatform",
        "importlib.import_module('sealbench.gcp.confidential_space')",
    ],
)
def test_the_scan_sees_every_form_of_import(source: str) -> None:
    assert violations(source, implementation_modules())


@pytest.mark.parametrize("core", CORES)
def test_core_imports_no_platform_implementation(core: str) -> None:
    forbidden = implementation_modules()
    files = sorted((REPO / core).rglob("*.py"))
    assert files, f"nothing to scan under {core}/"
    found = {
        str(path.relative_to(REPO)): bad
        for path in files
        if (bad := violations(path.read_text(encoding="utf-8"), forbidden))
    }
    assert not found, f"platform implementations imported by a core (use the registry): {found}"
