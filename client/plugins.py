"""The client's one way to the benchmark plug-ins (the ground floor of the client: every room
may import it, it imports none of them): the installed plug-in a pin names, the plug-in a
registered benchmark pins bound to its contract, the definitions and models the installed
plug-ins ship, and the public summaries a plug-in validates. The plug-ins are found by their
entry points (:mod:`sealbench.benchmarks.registry`), never by module name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sealbench.client.errors import ConfigError
from sealbench.server.schemas import BenchmarkPublic

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, PublicSummary

__all__ = [
    "plugin_for",
    "shipped_definitions",
    "summary_cases",
    "summary_of",
]


def shipped_definitions() -> dict[str, dict[str, Any]]:
    """The definitions the installed plug-ins ship, by the short name ``--definition`` takes."""
    from sealbench.benchmarks.interface import ShipsDefinitions
    from sealbench.benchmarks.registry import PluginRegistry

    registry = PluginRegistry()
    found: dict[str, dict[str, Any]] = {}
    for ref in registry.available():
        plugin = registry.get(ref.name)
        if isinstance(plugin, ShipsDefinitions):
            found.update(plugin.definitions())
    return found


def plugin_for(benchmark: BenchmarkPublic) -> Benchmark:
    """The installed plug-in ``benchmark`` pins, bound to its registered data contract."""
    from sealbench.benchmarks.interface import BenchmarkError, bind_data_contract
    from sealbench.benchmarks.registry import load

    try:
        return bind_data_contract(load(benchmark.metrics_version), benchmark.data_contract)
    except BenchmarkError as exc:
        raise ConfigError(
            f"benchmark {benchmark.id} ({benchmark.name}): {exc}",
            hint="install the benchmark's plug-in (or upgrade sealbench) to read its results",
        ) from exc


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
