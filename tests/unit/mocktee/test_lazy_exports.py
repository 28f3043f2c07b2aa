"""``sealbench.mocktee`` exports its names lazily: importing a light submodule (the CLI imports
``sealbench.mocktee.state`` for every command) does not load the CEL evaluator or the storage
emulator of the ``mock`` extra, and every exported name is the object of its module."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import sealbench.mocktee as mocktee


def test_every_exported_name_is_its_modules_object() -> None:
    assert sorted(mocktee.__all__) == sorted(mocktee._MODULE_OF)
    for name in mocktee.__all__:
        module = importlib.import_module(f"sealbench.mocktee.{mocktee._MODULE_OF[name]}")
        assert getattr(mocktee, name) is getattr(module, name), name
    assert set(mocktee.__all__) <= set(dir(mocktee))


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = mocktee.NoSuchThing  # type: ignore[attr-defined]


def test_state_module_imports_without_the_mock_extra() -> None:
    code = (
        "import json, sys\n"
        "import sealbench.mocktee.state\n"
        "print(json.dumps(sorted(m for m in ('celpy', 'gcp_storage_emulator',"
        " 'sealbench.mocktee.server') if m in sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(proc.stdout) == []
