"""The grid contract at the registry: a dataset whose cases are on another voxel grid than the
one a benchmark's data contract fixes is refused when it is registered for that benchmark and
when it is associated with it, so it never reaches the benchmark's leaderboard.

The registry asks the benchmark's plug-in which grid the contract fixes
(:func:`sealbench.benchmarks.interface.grid_of`); it reads no contract key itself. The dataset's
side is its registration's ``statistics.grid`` (:class:`~sealbench.server.schemas.assets.
DatasetGrid`). A benchmark whose plug-in is not installed here is not checked: the registry
refuses its results anyway, and the enclave checks every case against the pinned contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sealbench.benchmarks.interface import BenchmarkError, Grid, GridError, grid_of
from sealbench.benchmarks.registry import load
from sealbench.server.errors import InvalidRequestError
from sealbench.server.models import Benchmark
from sealbench.server.schemas.assets import GRID_STATISTIC, DatasetGrid
from sealbench.server.services.benchmark_plugins import PluginLookup

__all__ = ["check_dataset_grid", "contract_grid"]


def contract_grid(benchmark: Benchmark, plugins: PluginLookup = load) -> Grid | None:
    """The grid ``benchmark``'s data contract fixes, as its plug-in reads it; None when it fixes
    none or its plug-in is not installed here. A contract whose grid the plug-in cannot read
    refuses every dataset rather than none."""
    try:
        plugin = plugins(benchmark.metrics_version)
    except BenchmarkError:
        return None
    try:
        return grid_of(plugin, benchmark.data_contract)
    except GridError as exc:
        raise InvalidRequestError(
            f"benchmark {benchmark.id}'s data contract states a grid the registry cannot read "
            f"({exc}); no dataset can be checked against it"
        ) from None


def check_dataset_grid(benchmark: Benchmark, statistics: Mapping[str, Any], *,
                       required: bool, plugins: PluginLookup = load) -> None:
    """Refuse (422) a dataset whose cases are on another grid than the one ``benchmark``'s data
    contract fixes (:meth:`~sealbench.benchmarks.interface.Grid.admits`). ``required``: a
    dataset stating no grid is refused too (registration for the benchmark); otherwise it passes
    (one registered before grids were stated, whose data the enclave still checks against the
    benchmark's contract)."""
    fixed = contract_grid(benchmark, plugins)
    if fixed is None:
        return
    stated = statistics.get(GRID_STATISTIC)
    if stated is None:
        if required:
            raise InvalidRequestError(
                f"benchmark {benchmark.id} takes cases on the grid {fixed.text()} only; the "
                f"registration must state its dataset's grid (statistics.{GRID_STATISTIC})")
        return
    wire = DatasetGrid.model_validate(stated)
    grid = Grid(wire.shape, wire.spacing_mm)
    if not fixed.admits(grid):
        raise InvalidRequestError(
            f"the dataset's cases are on the grid {grid.text()}, but benchmark {benchmark.id} "
            f"takes cases on {fixed.text()} only; a dataset on another grid belongs to "
            "another benchmark")
