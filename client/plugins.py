"""The client's one way to the benchmark plug-ins (on the ground floor of the client: every room
may import it, it imports none of them; ``tests/unit/client/test_plugin_resolver.py`` holds that
no other client module reads the plug-in registry). The plug-ins are found by their entry points
(:mod:`sealbench.benchmarks.registry`), never by module name:

- :func:`installed` — the installed plug-in a pin names (:func:`installed_pins`: every pin);
- :func:`installed_plugin` — the same bound to a data contract, its refusal as the client's
  :class:`~sealbench.client.errors.ConfigError`; :func:`plugin_for` — a registered benchmark's;
- :func:`plugin_registry` — every installed plug-in by name, read from the entry points now;
  :func:`shipped_definitions` and :func:`shipped_model` — what they ship;
- :func:`summary_of`, :func:`summary_cases` — a public summary as a plug-in validates it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sealbench.client.errors import ConfigError
from sealbench.server.schemas import BenchmarkPublic

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, PublicSummary
    from sealbench.benchmarks.registry import PluginRegistry
    from sealbench.contract.pin import BenchmarkPin

__all__ = [
    "installed",
    "installed_pins",
    "installed_plugin",
    "plugin_for",
    "plugin_registry",
    "shipped_definitions",
    "shipped_model",
    "summary_cases",
    "summary_of",
]


def installed(pin: BenchmarkPin) -> Benchmark:
    """The installed plug-in ``pin`` names (its exact and pooled-only variants included);
    :class:`~sealbench.benchmarks.interface.BenchmarkError` (``PluginNotFoundError`` among
    them) when none is installed or it does not load."""
    from sealbench.benchmarks.registry import load

    return load(pin)


def installed_pins() -> tuple[BenchmarkPin, ...]:
    """The pin of every installed plug-in."""
    from sealbench.benchmarks.registry import available

    return available()


def installed_plugin(
    pin: BenchmarkPin, contract: Mapping[str, Any] | None = None, *, where: str,
    hint: str | None = None,
) -> Benchmark:
    """The installed plug-in ``pin`` names, bound to the data contract ``contract`` when one is
    given; a :class:`ConfigError` ``"<where>: <why>"`` with ``hint`` when none is installed, it
    does not load, or it refuses the contract."""
    from sealbench.benchmarks.interface import BenchmarkError, bind_data_contract

    try:
        plugin = installed(pin)
        return plugin if contract is None else bind_data_contract(plugin, contract)
    except BenchmarkError as exc:
        raise ConfigError(f"{where}: {exc}", hint=hint) from exc


def plugin_registry() -> PluginRegistry:
    """Every installed plug-in by name, read from the entry points when called (a plug-in
    installed since is seen)."""
    from sealbench.benchmarks.registry import PluginRegistry

    return PluginRegistry()


def shipped_definitions() -> dict[str, dict[str, Any]]:
    """The definitions the installed plug-ins ship, by the short name ``--definition`` takes."""
    from sealbench.benchmarks.interface import ShipsDefinitions

    registry = plugin_registry()
    found: dict[str, dict[str, Any]] = {}
    for ref in registry.available():
        plugin = registry.get(ref.name)
        if isinstance(plugin, ShipsDefinitions):
            found.update(plugin.definitions())
    return found


def plugin_for(benchmark: BenchmarkPublic) -> Benchmark:
    """The installed plug-in ``benchmark`` pins, bound to its registered data contract."""
    return installed_plugin(
        benchmark.metrics_version, benchmark.data_contract,
        where=f"benchmark {benchmark.id} ({benchmark.name})",
        hint="install the benchmark's plug-in (or upgrade sealbench) to read its results",
    )


def shipped_model(digest: str) -> tuple[str, bytes] | None:
    """The name and bytes of the model shipped with an installed benchmark plug-in whose
    SHA-256 is ``digest``."""
    registry = plugin_registry()
    for ref in registry.available():
        plugin = registry.get(ref.name)
        for shipped in plugin.shipped_models:
            if shipped.sha256 == digest:
                return shipped.name, plugin.model_bytes(shipped.name)
    return None


def summary_of(plugin: Benchmark, summary: Mapping[str, Any]) -> PublicSummary | None:
    """The public summary of a registry result (a run's ``ResultSummary`` JSON, or a bare
    summary) validated by ``plugin``; None when it does not validate."""
    from sealbench.benchmarks.interface import SummaryError

    aggregates = summary.get("aggregates", summary)
    if not isinstance(aggregates, Mapping):
        return None
    try:
        return plugin.parse_summary(aggregates)
    except SummaryError:
        return None


def summary_cases(plugin: Benchmark, summary: Mapping[str, Any]) -> int | None:
    """The number of cases a public summary aggregates."""
    parsed = summary_of(plugin, summary)
    return None if parsed is None else parsed.n_cases
