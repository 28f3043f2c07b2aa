"""The client finds a benchmark plug-in one way (issue 45): through
:mod:`sealbench.client.plugins`, which alone reads the plug-in registry
(:mod:`sealbench.benchmarks.registry`). Five modules each had their own way (a fresh
``PluginRegistry()``, the registry's ``load``, the enclave's ``benchmark_for``) and their own
error for the same missing plug-in."""

from __future__ import annotations

from pathlib import Path

import pytest

import sealbench.client
from sealbench.client import plugins
from sealbench.client.errors import ConfigError
from sealbench.contract.pin import BenchmarkPin
from tests.integration.test_layering import imports_of

CLIENT = Path(next(iter(sealbench.client.__path__))).resolve()
REGISTRY = "sealbench.benchmarks.registry"
#: The resolver itself, and the ``benchmark init`` template (whose plug-in code is text that
#: it writes, not imports).
MAY_READ = frozenset({"plugins.py", "scaffold.py"})


def registry_reads(source: str) -> set[str]:
    """The imports of the plug-in registry in ``source``, in any form."""
    return {m for m in imports_of(source) if m == REGISTRY or m.startswith(f"{REGISTRY}.")}


def test_only_the_resolver_reads_the_plugin_registry() -> None:
    readers = {
        str(path.relative_to(CLIENT)): sorted(found)
        for path in sorted(CLIENT.rglob("*.py"))
        if str(path.relative_to(CLIENT)) not in MAY_READ
        and (found := registry_reads(path.read_text()))
    }
    assert readers == {}, f"find plug-ins through sealbench.client.plugins: {readers}"


@pytest.mark.parametrize("source", [
    "from sealbench.benchmarks.registry import load",
    "from sealbench.benchmarks import registry",
    "def f():\n    from sealbench.benchmarks.registry import PluginRegistry",
    "import sealbench.benchmarks.registry",
    "import importlib\nimportlib.import_module('sealbench.benchmarks.registry')",
])
def test_the_scan_sees_a_read_of_the_registry(source: str) -> None:
    assert registry_reads(source)


def test_an_installed_pin_resolves_and_binds_its_contract() -> None:
    pin = plugins.installed_pins()[0]
    plugin = plugins.installed(pin)
    assert plugin.ref == pin
    bound = plugins.installed_plugin(pin, plugin.data_contract(), where="here")
    assert bound.ref == pin


def test_a_pin_not_installed_is_one_client_error_saying_where() -> None:
    with pytest.raises(ConfigError, match=r"^benchmark 7 \(knee\): .*knee-seg") as refused:
        plugins.installed_plugin(BenchmarkPin("knee-seg", "1"), where="benchmark 7 (knee)",
                                 hint="install it")
    assert refused.value.hint == "install it"
