"""Which benchmark plug-in a run evaluates with: the run spec pins it by name and version
(``SEALBENCH_METRICS_VERSION``, ``<name>/<version>``, for example ``brats-2023-gli/1``), and the
image resolves the pin among the plug-ins installed in it (entry-point group
``sealbench.benchmarks``), so the image digest the owners approve covers the benchmark's code.
An unknown name or version stops the run before any key is requested.
"""

from __future__ import annotations

from collections.abc import Callable

from sealbench.benchmarks.interface import Benchmark, BenchmarkError, BenchmarkPin
from sealbench.benchmarks.registry import load
from sealbench.contract.errors import SpecError
from sealbench.contract.workload import ENV_METRICS_VERSION

__all__ = ["PluginFinder", "benchmark_for"]

#: Resolves a pin to an installed plug-in (the entry-point registry; tests pass their own).
PluginFinder = Callable[[BenchmarkPin], Benchmark]


def benchmark_for(pin: BenchmarkPin, find: PluginFinder = load) -> Benchmark:
    """The installed plug-in ``pin`` names, or :class:`SpecError` saying why not."""
    try:
        return find(pin)
    except BenchmarkError as exc:
        raise SpecError(f"{ENV_METRICS_VERSION}: {exc}") from None
