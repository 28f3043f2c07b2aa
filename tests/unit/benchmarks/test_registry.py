"""Plug-in discovery: by name and version through entry points, with clear refusals."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from sealbench.benchmarks.interface import (
    BenchmarkPin,
    Direction,
    MetricRef,
    MetricSpec,
    PluginNotFoundError,
    Presentation,
)
from sealbench.benchmarks.registry import ENTRY_POINT_GROUP, PluginLoadError, PluginRegistry


def _point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name, value, ENTRY_POINT_GROUP)


def test_unknown_plugin_names_the_installed_ones() -> None:
    registry = PluginRegistry([_point("other", "string:ascii_letters")])
    with pytest.raises(PluginNotFoundError, match=r"'nope'.*installed: other"):
        registry.load(BenchmarkPin.parse("nope/1"))


def test_plugin_that_fails_to_import_is_reported_by_name() -> None:
    registry = PluginRegistry([_point("broken", "sealbench.no_such_module:PLUGIN")])
    with pytest.raises(PluginLoadError, match=r"'broken'.*ModuleNotFoundError"):
        registry.get("broken")


def test_entry_point_that_is_not_a_benchmark_is_refused() -> None:
    registry = PluginRegistry([_point("text", "string:ascii_letters")])
    with pytest.raises(PluginLoadError, match="is not a Benchmark"):
        registry.get("text")


def test_one_name_declared_twice_is_refused_not_picked() -> None:
    registry = PluginRegistry([_point("twin", "string:ascii_letters"),
                               _point("twin", "string:digits")])
    with pytest.raises(PluginLoadError, match="declared by two distributions"):
        registry.get("twin")


@pytest.mark.parametrize("text", ["brats", "/1", "Brats/1", "brats/", "a/b/c", "x y/1"])
def test_malformed_plugin_ref_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="plug-in"):
        BenchmarkPin.parse(text)


def test_plugin_ref_round_trips() -> None:
    ref = BenchmarkPin.parse("brats-2023-gli/1")
    assert ref == BenchmarkPin("brats-2023-gli", "1")
    assert str(ref) == "brats-2023-gli/1"


def _metric(key: str, direction: Direction = Direction.HIGHER) -> MetricSpec:
    return MetricSpec(key, key.upper(), "", direction, dataset_level=False)


def test_presentation_refuses_unknown_headline_and_groups() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        Presentation((_metric("dice"),), (), MetricRef("auroc"), ())
    with pytest.raises(ValueError, match="unknown group"):
        Presentation((_metric("dice"),), (), MetricRef("dice", "WT"), ())
    with pytest.raises(ValueError, match="direction"):
        Presentation((_metric("n", Direction.NEUTRAL),), (), MetricRef("n"), ())
    shown = Presentation((_metric("dice"),), (), MetricRef("dice"), (MetricRef("dice"),))
    assert shown.label(MetricRef("dice")) == "DICE"
