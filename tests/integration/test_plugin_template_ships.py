"""The plug-in ``sealbench benchmark init`` makes is complete for a newcomer:

- it declares every package its code and its own tests import (sealbench's ``enclave`` extra,
  and its ``test`` extra for the rest), so its tests run in a fresh environment made from its
  declarations alone, where a template whose tests imported an undeclared package (``onnx``)
  failed;
- installed, it ships its definition: ``benchmark definition export NAME`` writes it and
  ``benchmark definition ls`` lists it (it said "[Errno 2] No such file or directory"), and its
  own tests (the definition's among them) pass.

The fresh environment is the third-party plug-in test's (``plugin_python``: a new virtual
environment seeing this one's packages, the plug-in's wheel installed in it alone)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from sealbench.client.scaffold import package_name, scaffold_plugin

NAME = "knee-seg"


def _plugin_python() -> Callable[..., str]:
    spec = importlib.util.spec_from_file_location(
        "third_party_plugin_helpers", Path(__file__).with_name("test_third_party_plugin.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    helper: Callable[..., str] = module.plugin_python
    return helper


def _canonical(requirement: str) -> str:
    """The distribution a requirement names (``onnx>=1.16`` -> ``onnx``), normalised."""
    name = re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported(root: Path) -> set[str]:
    """The top-level modules the package's code and tests import (absolute imports)."""
    found: set[str] = set()
    for path in [*root.glob("src/**/*.py"), *root.glob("tests/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def _sealbench_requires(extra: str) -> set[str]:
    """What ``sealbench[extra]`` installs: its base requirements and the extra's."""
    names = set()
    for requirement in requires("sealbench") or ():
        marker = requirement.partition(";")[2]
        if "extra ==" not in marker or re.search(rf"extra == ['\"]{extra}['\"]", marker):
            names.add(_canonical(requirement))
    return names


def test_template_declares_what_its_code_and_tests_import(tmp_path: Path) -> None:
    root = scaffold_plugin(NAME, tmp_path)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = {_canonical(r) for r in project["dependencies"]}
    assert declared == {"sealbench"}
    assert "sealbench[enclave]" in project["dependencies"]
    tests_extra = {_canonical(r) for r in project["optional-dependencies"]["test"]}
    assert "pytest" in tests_extra  # what runs them
    installed = _sealbench_requires("enclave") | tests_extra | {"sealbench"}
    owners = packages_distributions()
    own = {package_name(NAME)}
    for module in sorted(_imported(root) - set(sys.stdlib_module_names) - own - {"__future__"}):
        distributions = {_canonical(d) for d in owners.get(module, ())}
        assert distributions & installed, (
            f"the template imports {module} (from {sorted(distributions)}), which neither "
            "sealbench[enclave] nor its test extra installs")


def test_installed_template_ships_its_definition_and_passes_its_own_tests(
        tmp_path: Path) -> None:
    source = scaffold_plugin(NAME, tmp_path)
    python = _plugin_python()(tmp_path / "env", source)
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(source / "tests")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout
    exported = subprocess.run([python, "-m", "sealbench.client.cli", "benchmark", "definition",
                               "export", NAME], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
    assert exported.returncode == 0, exported.stdout[-2000:] + exported.stderr[-2000:]
    definition = json.loads(exported.stdout)
    assert definition["plugin"] == f"{NAME}/1" and definition["name"] == NAME
    assert definition["format"] == "sealbench/benchmark-definition"
    listed = subprocess.run([python, "-m", "sealbench.client.cli", "benchmark", "definition",
                             "ls", "--json"], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert {"definition": NAME, "plugin": f"{NAME}/1", "name": NAME, "version": "1.0.0"} in \
        json.loads(listed.stdout)
