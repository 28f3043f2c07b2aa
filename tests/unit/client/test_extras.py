"""A command that needs a package of an extra that is not installed names the extra to install
(exit 3), instead of an unexpected ``ModuleNotFoundError``; the table behind it agrees with the
extras of ``pyproject.toml``. (``tests/integration/test_role_extras.py`` installs each extra
alone into a fresh environment.)"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from sealbench.client.errors import ConfigError
from sealbench.client.extras import (
    _PROBES,
    EXTRA_OF_MODULE,
    MissingExtraError,
    missing_extra,
    require_extras,
)

REPO = Path(__file__).resolve().parents[3]
EXTRAS: dict[str, list[str]] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
    "optional-dependencies"
]
ROLE_EXTRAS = ("server", "enclave", "gcp", "mock", "docker")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


@functools.cache
def _installed() -> dict[str, list[str]]:
    """Import name -> distributions (slow: reads every installed distribution's files)."""
    return dict(packages_distributions())


def _distributions(module: str) -> set[str]:
    return {d.lower().replace("_", "-") for d in _installed().get(module, [])}


def test_each_module_maps_to_an_extra_that_installs_it() -> None:
    for module, extra in EXTRA_OF_MODULE.items():
        found = _distributions(module)
        if not found:
            assert extra == "train", f"{module} is not installed in the dev environment"
            continue
        wanted = {_name(r) for r in EXTRAS[extra]}
        assert found & wanted, f"{module} comes from {found}, none in the {extra} extra"


def test_every_package_of_the_role_extras_is_in_the_table() -> None:
    for extra in ROLE_EXTRAS:
        names = {_name(r) for r in EXTRAS[extra]}
        modules = {
            module
            for module in packages_distributions()
            if _distributions(module) & names and not module.startswith("_")
        }
        assert modules, extra
        for module in modules:
            assert module in EXTRA_OF_MODULE, f"{module} of the {extra} extra is not mapped"
            mapped = {_name(r) for r in EXTRAS[EXTRA_OF_MODULE[module]]}
            assert _distributions(module) & mapped, module


def test_probes_of_each_extra_are_its_packages() -> None:
    for extra, modules in _PROBES.items():
        assert modules, extra
        for module in modules:
            assert EXTRA_OF_MODULE[module.partition(".")[0]] == extra, module


def test_require_extras_passes_when_installed_and_names_every_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_extras(("server", "enclave", "gcp", "mock", "docker"), "the demo")  # dev: all there
    monkeypatch.setitem(sys.modules, "celpy", None)  # find_spec -> ValueError/None: absent
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(MissingExtraError) as caught:
        require_extras(("server", "enclave", "gcp", "mock"), "the demo")
    assert str(caught.value) == (
        "the demo needs the sealbench extras enclave,mock (not installed: numpy, celpy)"
    )
    assert caught.value.hint == "pip install 'sealbench[enclave,mock]'"


def test_missing_package_of_an_extra_becomes_an_install_hint() -> None:
    exc = ModuleNotFoundError("No module named 'onnxruntime.capi'", name="onnxruntime.capi")
    error = missing_extra(exc)
    assert isinstance(error, MissingExtraError) and isinstance(error, ConfigError)
    assert error.exit_code == 3 and error.extra == "enclave"
    assert "onnxruntime" in str(error) and error.hint == "pip install 'sealbench[enclave]'"
    assert error.__cause__ is exc  # -v shows where the import was


def test_missing_extra_follows_explicit_causes_only() -> None:
    inner = ModuleNotFoundError("No module named 'celpy'", name="celpy")
    wrapped = RuntimeError("launch failed")
    wrapped.__cause__ = inner
    error = missing_extra(wrapped)
    assert error is not None and error.extra == "mock"
    during = RuntimeError("failed while handling")
    during.__context__ = inner  # raised while handling, not from
    assert missing_extra(during) is None


def test_missing_sealbench_module_is_a_broken_install_not_an_extra() -> None:
    exc = ModuleNotFoundError("No module named 'sealbench.enclave'", name="sealbench.enclave")
    assert missing_extra(exc) is None
    assert missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope")) is None


def test_client_error_keeps_its_own_hint() -> None:
    error = ConfigError("the Docker backend needs the Docker SDK", hint="pip install x")
    error.__cause__ = ModuleNotFoundError("No module named 'docker'", name="docker")
    assert missing_extra(error) is None


_WITHOUT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # import NAME -> ModuleNotFoundError
from sealbench.client.cli import app
app({argv!r}, prog_name="sealbench")
"""


def _run_without(blocked: tuple[str, ...], argv: list[str], tmp_path: Path) -> tuple[int, str]:
    code = _WITHOUT.format(blocked=blocked, argv=argv)
    env = {"SEALBENCH_CONFIG_DIR": str(tmp_path / "config"), "COLUMNS": "200", "PATH": "/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        (("nibabel", "numpy", "scipy", "onnxruntime"), ["dataset", "synthesize", "raw",
                                                        "--cases", "1", "--definition",
                                                        "brats-small"],
         "enclave"),
        (("celpy", "gcp_storage_emulator"), ["mock-tee", "up", "--state-dir", "state"], "mock"),
    ],
)
def test_command_without_its_extra_names_the_extra(
    blocked: tuple[str, ...], argv: list[str], extra: str, tmp_path: Path
) -> None:
    code, output = _run_without(blocked, [*argv], tmp_path)
    assert code == 3, output
    assert f"pip install 'sealbench[{extra}]'" in output
    assert "unexpected" not in output and "Traceback" not in output


def test_every_command_help_works_without_the_other_roles_packages(tmp_path: Path) -> None:
    blocked = ("nibabel", "numpy", "scipy", "onnxruntime", "celpy", "gcp_storage_emulator",
               "google", "docker", "fastapi", "sqlalchemy", "alembic", "uvicorn")
    for argv in (["--help"], ["demo", "--help"], ["run", "--help"], ["dataset", "--help"],
                 ["profile", "ls"]):
        code, output = _run_without(blocked, argv, tmp_path)
        assert code == 0, (argv, output)
