"""Whether a dataset fits a benchmark's grid is the plug-in's answer (``FixesGrid.grid_of``),
compared with ``Grid.admits``; a plug-in without the capability fixes no grid."""

from __future__ import annotations

from typing import Any

import pytest

from sealbench.benchmarks.interface import Grid, GridError, grid_of
from sealbench.benchmarks.registry import load
from sealbench.contract.pin import BenchmarkPin

BRATS = load(BenchmarkPin.parse("brats-2023-gli/1"))
WDBC = load(BenchmarkPin.parse("wdbc/1"))


def test_the_brats_plugin_reads_its_contracts_grid() -> None:
    assert grid_of(BRATS, BRATS.data_contract()) == Grid((240, 240, 155), (1.0, 1.0, 1.0))
    assert grid_of(BRATS, {"shape": [64, 64, 48]}) == Grid((64, 64, 48))
    assert grid_of(BRATS, {"modalities": ["t1n"]}) is None


@pytest.mark.parametrize("contract", [
    {"shape": "large"}, {"shape": [0, 64, 48]}, {"shape": [64.0, 64, 48]}, {"shape": [True]},
    {"shape": []}, {"shape": [64, 64, 48], "spacing_mm": [1.0]},
    {"shape": [64, 64, 48], "spacing_mm": [1, 1, -1]}, {"shape": [64, 64, 48], "spacing_mm": "1"},
])
def test_an_unreadable_grid_is_a_grid_error(contract: dict[str, Any]) -> None:
    with pytest.raises(GridError):
        grid_of(BRATS, contract)


def test_a_tabular_plugin_fixes_no_grid() -> None:
    assert grid_of(WDBC, WDBC.data_contract()) is None
    assert grid_of(WDBC, {"shape": [64, 64, 48]}) is None


def test_admits() -> None:
    fixed = Grid((240, 240, 155), (1.0, 1.0, 1.0))
    assert fixed.admits(Grid((240, 240, 155), (1.0, 1.0, 1.0 + 1e-9)))
    assert not fixed.admits(Grid((240, 240, 155), (1.0, 1.0, 2.0)))
    assert not fixed.admits(Grid((240, 240, 155)))  # the spacing is part of the grid
    assert not fixed.admits(Grid((64, 64, 48), (1.0, 1.0, 1.0)))
    assert Grid((64, 64, 48)).admits(Grid((64, 64, 48), (2.0, 2.0, 2.0)))
    assert fixed.text() == "240x240x155 at 1x1x1 mm" and Grid((3, 4)).text() == "3x4"
