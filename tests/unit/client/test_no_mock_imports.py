"""The mock is another implementation behind the same interfaces, picked in a few places only:
no module under ``client/`` imports a mock class (``InsecureMock*``, or a ``Mock*`` class of the
mock cloud) by name except the entry points and selection modules listed here, each with why.
A new import anywhere else (a CLI command reaching for the mock's owner cloud, say) fails."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import sealbench.client

CLIENT = Path(sealbench.client.__file__).resolve().parent
_MOCKISH = re.compile(r"^(Insecure)?Mock[A-Z]\w*$")

#: module (relative to client/) → the mock classes it may name, and why.
ALLOWED: dict[str, frozenset[str]] = {
    # entry point: 'sealbench mock-tee up' runs the mock
    "cli/mock_tee.py": frozenset({"MockCloud"}),
    # entry point: 'sealbench demo' runs the whole mock cloud locally
    "demo/flow.py": frozenset({"MockCloud", "MockEndpoints"}),
    # the mock backends' image (a digest of the enclave's code), what a mock benchmark pins
    "runs/launchers/__init__.py": frozenset({"MockImage"}),
}


def _is_mock_class(module: str, name: str) -> bool:
    if not _MOCKISH.match(name):
        return False
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return True  # cannot tell: a mock-named import is reported
    defined_in = getattr(value, "__module__", "")
    return inspect.isclass(value) and (
        name.startswith("InsecureMock") or "mock" in defined_in.split(".")[-1]
        or defined_in.startswith("sealbench.mocktee")
    )


def _package_of(path: Path) -> str:
    parts = path.relative_to(CLIENT).with_suffix("").parts
    return ".".join(("sealbench", "client", *parts[:-1]))


def mock_imports(path: Path) -> set[str]:
    """The mock classes ``path`` imports by name (at any depth, TYPE_CHECKING included)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(path).split(".")
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base
                                                                              else []))
            found |= {a.name for a in node.names if _is_mock_class(base, a.name)}
        elif isinstance(node, ast.Attribute) and _MOCKISH.match(node.attr):
            found.add(node.attr)
    return found


def test_only_entry_points_and_selection_modules_import_mock_classes() -> None:
    offenders = {}
    for path in sorted(CLIENT.rglob("*.py")):
        name = path.relative_to(CLIENT).as_posix()
        extra = mock_imports(path) - ALLOWED.get(name, frozenset())
        if extra:
            offenders[name] = sorted(extra)
    assert offenders == {}


def test_the_scan_sees_an_import_of_the_mock_owner_cloud(tmp_path: Path) -> None:
    command = CLIENT / "cli" / "assets.py"
    source = command.read_text() + (
        "\n\ndef _x() -> None:\n"
        "    from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud\n"
        "    from sealbench.mocktee import MockCloud, provision_owner\n"
    )
    copy = tmp_path / "assets.py"
    copy.write_text(source)
    assert mock_imports(copy) == {"InsecureMockOwnerCloud", "MockCloud"}
    assert mock_imports(command) == set()
