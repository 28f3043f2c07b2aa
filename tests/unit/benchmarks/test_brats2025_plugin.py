"""The BraTS 2025 pins (``brats-2025-gli/1``, ``brats-2025-met/1``) as plug-ins: found by entry
point beside ``brats-2023-gli/1`` (unchanged), each on its own contract and grid pins, scoring a
prepared case exactly as :func:`~sealbench.benchmarks.brats.scoring2025.score_case` does,
releasing and pooling the 2025 figures, with an exact-release variant."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.brats import BRATS_2023_GLI
from sealbench.benchmarks.brats.contract import BRATS_2025_GLI, BRATS_2025_MET
from sealbench.benchmarks.brats.metrics import CaseFailure
from sealbench.benchmarks.brats.plugin2025 import Brats2025Benchmark
from sealbench.benchmarks.brats.results2025 import CaseScores2025, contributions
from sealbench.benchmarks.brats.scoring2025 import GLI_2025, MET_2025, score_case
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import InsecureFixedNoise, LocalExact
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.canonical import canonical_json


@pytest.fixture(scope="module")
def plugins() -> PluginRegistry:
    return PluginRegistry()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    x, y = float(a), float(b)
    return (math.isnan(x) and math.isnan(y)) or x == y


@pytest.mark.parametrize(("name", "contract", "groups"), [
    ("brats-2025-gli", BRATS_2025_GLI, ("snfh", "et", "netc", "rc", "tc", "wt")),
    ("brats-2025-met", BRATS_2025_MET, ("et", "rc", "tc", "wt")),
])
def test_2025_pins_found_by_entry_point_beside_2023(plugins: PluginRegistry, name: str,
                                                    contract: Any, groups: tuple[str, ...]) -> None:
    plugin = plugins.load(BenchmarkPin.parse(f"{name}/1"))
    assert str(plugin.ref) == f"{name}/1"
    assert plugin.data_contract() == contract.model_dump(mode="json")
    assert tuple(g.key for g in plugin.presentation.groups) == groups
    assert plugin.model_contract.outputs[0].shape[1] == 5  # background, NETC, SNFH, ET, RC
    assert plugin.metrics_spec()["source"].startswith("BraTS_evaluation 0.0.10")
    small = plugins.load(BenchmarkPin.parse(f"{name}/1-64x64x48"))
    assert small.data_contract()["shape"] == [64, 64, 48]
    exact = plugins.load(BenchmarkPin.parse(f"{name}/1-exact"))
    assert exact.release_spec.exact and exact.release_spec.columns == plugin.release_spec.columns
    old = plugins.load(BenchmarkPin.parse("brats-2023-gli/1"))
    assert old.data_contract() == BRATS_2023_GLI.model_dump(mode="json")
    assert [c.key for c in old.release_spec.columns] == ["dice:WT", "dice:TC", "dice:ET"]


def test_a_dataset_of_one_pin_is_refused_by_another(plugins: PluginRegistry) -> None:
    gli = plugins.load(BenchmarkPin.parse("brats-2025-gli/1"))
    met = plugins.load(BenchmarkPin.parse("brats-2025-met/1"))
    old = plugins.load(BenchmarkPin.parse("brats-2023-gli/1"))
    for reader, writer in ((gli, met), (met, gli), (old, gli), (gli, old)):
        doc = json.dumps({"contract": writer.data_contract()}).encode()
        with pytest.raises(api.CaseError, match="another contract"):
            reader.open_dataset(doc)


def test_prepared_2025_case_scored_as_the_scoring_scores_it(
        plugins: PluginRegistry, tmp_path: Path, make_model: Callable[..., bytes]) -> None:
    plugin = plugins.load(BenchmarkPin.parse("brats-2025-met/1-64x64x48"))
    assert isinstance(plugin, Brats2025Benchmark)
    ids = plugin.write_demo_dataset(tmp_path / "raw", 2, seed=41)
    assert ids == ("BraTS-MET-00041-000", "BraTS-MET-00042-000")
    prepared = plugin.prepare(tmp_path / "raw", tmp_path / "prepared")
    assert sorted(prepared.accepted) == list(ids) and not prepared.rejected
    data = tmp_path / "prepared" / plugin.layout.data_dir
    layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
    paths = [str(p.relative_to(data)) for p in data.rglob("*.nii.gz")]
    runner = plugin.load_model(make_model(out_classes=5))
    results = []
    for case_id, parts in layout.group(paths).items():
        case = layout.load({p: (data / p).read_bytes() for p in parts})
        prediction = runner.predict(case)
        result = plugin.score(case, prediction)
        assert isinstance(result, CaseScores2025) and result.case_id == case_id
        assert case.seg is not None
        official = score_case(prediction, case.seg, plugin.contract.spacing_mm, MET_2025)
        assert _same({g: s.official() for g, s in result.groups.items()}, official)
        doc = result.to_json()
        canonical_json(doc)  # no NaN or Infinity in the wire form
        parsed = plugin.parse_case_result(json.loads(json.dumps(doc)))
        assert isinstance(parsed, CaseScores2025)  # NaN != NaN: compare the wire forms
        assert parsed.to_json() == doc and _same(parsed.groups["wt"].official(),
                                                 result.groups["wt"].official())
        results.append(result)
    exact = plugin.summarise(results, LocalExact())
    expected = contributions(results, MET_2025).sum(axis=0)
    assert [c.sum for c in exact.release.columns] == pytest.approx(expected.tolist())
    noisy = plugin.summarise(results, InsecureFixedNoise())
    assert plugin.parse_summary(json.loads(json.dumps(noisy.to_json()))) == noisy


def _scored(case_id: str, truth: np.ndarray, pred: np.ndarray) -> CaseScores2025:
    return CaseScores2025.from_official(case_id, "gli",
                                        score_case(pred, truth, (1.0, 1.0, 1.0), GLI_2025))


def test_release_carries_global_dice_and_pq_per_group_nan_left_out_failure_as_zero() -> None:
    truth = np.zeros((10, 10, 10), dtype=np.uint8)
    truth[2:5, 2:5, 2:5] = 3
    pred = truth.copy()
    pred[2, 2:5, 2:5] = 0  # ET Dice 2*18/(27+18) = 0.8, one lesion found: PQ 0.8
    rows = contributions([_scored("a", truth, pred),
                          CaseFailure(case_id="b", reason="inference failed")], GLI_2025)
    columns = [f"{m}:{g.name}" for m in ("dsc", "pq_dsc", "defined") for g in GLI_2025.groups]
    first = dict(zip(columns, rows[0], strict=True))
    assert first["dsc:et"] == pytest.approx(0.8) and first["pq_dsc:et"] == pytest.approx(0.8)
    assert first["defined:et"] == 1.0
    # nothing either side (official NaN): adds nothing and is not counted (left out of the mean)
    assert (first["dsc:rc"], first["pq_dsc:rc"], first["defined:rc"]) == (0.0, 0.0, 0.0)
    assert first["defined:snfh"] == 0.0
    failure = dict(zip(columns, rows[1], strict=True))  # penalised, never dropped: 0, counted
    assert all(failure[c] == (1.0 if c.startswith("defined:") else 0.0) for c in columns)


def test_pooled_figures_are_the_case_weighted_means(plugins: PluginRegistry) -> None:
    plugin = plugins.load(BenchmarkPin.parse("brats-2025-gli/1-exact"))
    truth = np.zeros((10, 10, 10), dtype=np.uint8)
    truth[2:5, 2:5, 2:5] = 3
    half = truth.copy()
    half[2, 2:5, 2:5] = 0
    site_a = plugin.summarise([_scored("a", truth, truth)], LocalExact())
    missed = np.zeros_like(truth)
    site_b = plugin.summarise([_scored("b", truth, half), _scored("c", truth, missed)],
                              LocalExact())
    pooled = {str(f.ref): f.value for f in plugin.pool([site_a, site_b]).figures}
    assert pooled["pq_dsc et"] == pytest.approx((1.0 + 0.8 + 0.0) / 3)
    assert pooled["dsc et"] == pytest.approx((1.0 + 0.8 + 0.0) / 3)
    assert pooled["dsc wt"] == pytest.approx((1.0 + 0.8 + 0.0) / 3)
    shown = {str(f.ref): f.value for f in plugin.figures(site_a)}
    # RC is undefined in every case: no mean (the official parser's mean of nothing is NaN)
    assert shown["pq_dsc rc"] is None and shown["pq_dsc et"] == 1.0
    assert shown["pq_dsc"] == 1.0  # the mean over the groups some case defines


def test_unscorable_2025_prediction_is_a_flagged_failure(plugins: PluginRegistry) -> None:
    plugin = plugins.load(BenchmarkPin.parse("brats-2025-gli/1-64x64x48"))
    from sealbench.benchmarks.brats.cases import Case

    seg = np.zeros((64, 64, 48), dtype=np.uint8)
    case = Case("BraTS-GLI-00001-000", {}, np.eye(4), seg)
    wrong = seg.copy()
    wrong[1, 1, 1] = 7
    failure = plugin.score(case, wrong)
    assert failure.failed and "[7]" in failure.to_json()["reason"]
    assert plugin.score(case, "not an array").failed


def test_volumes_on_disk_scored_through_the_plugin_as_the_scoring_scores_them(
        plugins: PluginRegistry) -> None:
    """What a ``benchmark score --pin`` command calls: the plug-in found by its pin scores stored
    (x, y, z) volumes as the official command scores files, and renders the official summary."""
    plugin = plugins.load(BenchmarkPin.parse("brats-2025-gli/1"))
    assert isinstance(plugin, Brats2025Benchmark)
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 5, (9, 8, 7)).astype(np.uint8)
    pred = np.roll(truth, 1, axis=2)
    zooms = (0.9375, 1.0, 1.5)
    groups = plugin.score_volumes(pred, truth, zooms)
    reversed_axes = score_case(np.ascontiguousarray(pred.T), np.ascontiguousarray(truth.T),
                               zooms, GLI_2025)
    assert _same(groups, reversed_axes)
    summary = plugin.official_summary([("BraTS-GLI-00001-000.nii.gz", groups)], ["x.nii.gz"])
    assert summary["missings"] == ["x.nii.gz"]
    assert list(summary["metrics"][0]) == [*groups, "subject_name"]
