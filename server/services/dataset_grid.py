"""The grid contract at the registry: a dataset whose cases are on another voxel grid than the
one a benchmark's data contract fixes is refused when it is registered for that benchmark and
when it is associated with it, so it never reaches the benchmark's leaderboard.

The registry reads only the contract's ``shape`` and ``spacing_mm`` keys and the dataset's
``statistics.grid`` (:class:`~sealbench.server.schemas.assets.DatasetGrid`); it knows no
benchmark plug-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sealbench.server.errors import InvalidRequestError
from sealbench.server.models import Benchmark
from sealbench.server.schemas.assets import GRID_STATISTIC, DatasetGrid

__all__ = ["SPACING_TOLERANCE_MM", "check_dataset_grid"]

#: Spacings closer than this are the same (both come from one contract's JSON).
SPACING_TOLERANCE_MM = 1e-6


def _contract_grid(benchmark: Benchmark) -> DatasetGrid | None:
    """The grid ``benchmark``'s data contract fixes (its ``shape`` and ``spacing_mm``), or None
    when it names no shape (a tabular benchmark). A contract whose grid cannot be read refuses
    every dataset rather than none."""
    contract = benchmark.data_contract
    if "shape" not in contract:
        return None
    try:
        return DatasetGrid.model_validate(
            {"shape": contract["shape"], "spacing_mm": contract.get("spacing_mm")})
    except ValueError:
        raise InvalidRequestError(
            f"benchmark {benchmark.id}'s data contract states a grid the registry cannot read "
            f"(shape {contract.get('shape')!r}); no dataset can be checked against it"
        ) from None


def check_dataset_grid(benchmark: Benchmark, statistics: Mapping[str, Any], *,
                       required: bool) -> None:
    """Refuse (422) a dataset whose cases are on another grid than the one ``benchmark``'s data
    contract fixes: its statistics' ``grid`` must have the contract's shape and spacing (within
    :data:`SPACING_TOLERANCE_MM`). ``required``: a dataset stating no grid is refused too
    (registration for the benchmark); otherwise it passes (one registered before grids were
    stated, whose data the enclave still checks against the benchmark's contract)."""
    fixed = _contract_grid(benchmark)
    if fixed is None:
        return
    stated = statistics.get(GRID_STATISTIC)
    if stated is None:
        if required:
            raise InvalidRequestError(
                f"benchmark {benchmark.id} takes cases on the grid {fixed.text()} only; the "
                f"registration must state its dataset's grid (statistics.{GRID_STATISTIC})")
        return
    grid = DatasetGrid.model_validate(stated)
    same_spacing = fixed.spacing_mm is None or (
        grid.spacing_mm is not None and len(grid.spacing_mm) == len(fixed.spacing_mm)
        and all(abs(a - b) <= SPACING_TOLERANCE_MM
                for a, b in zip(grid.spacing_mm, fixed.spacing_mm, strict=True)))
    if grid.shape != fixed.shape or not same_spacing:
        raise InvalidRequestError(
            f"the dataset's cases are on the grid {grid.text()}, but benchmark {benchmark.id} "
            f"takes cases on {fixed.text()} only; a dataset on another grid belongs to "
            "another benchmark")
