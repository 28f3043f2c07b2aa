"""With the noise off, a BraTS 2025 pin publishes the official summary's means (issue 41 part 5).

The oracle is the official evaluator end to end: ``panoptica`` 2.1.7 under ``BraTS_evaluation``
0.0.10's configurations scores each case, and the official parser
(``brats_evaluation.metrics_parser.parse_seg_results``) turns the official summary JSON into
its CSV, whose ``mean`` row is what the challenge reports (it skips a NaN, a group with nothing
in truth or prediction, and counts a missing subject as 0). The parser writes no panoptic
quality column: ``pq_dsc``'s official mean is taken by the parser's own averaging
(``_calculate_mean_std_median``) over the official per-case values. AGPL: test-only (dev
extra), never imported by sealbench (test_scoring2025_licence).

Cases: held-out synthetic task cases (seeds no shipped model trained on) on the 64x64x48 grid,
and a tumour-free case (every group undefined), with predictions of two kinds: a perturbed
one (a group undefined for some cases: NETC is absent from half the post-treatment cases and
from their predictions; RC from every metastasis case, whose official mean is NaN) and one that
never finds NETC (relabelled as SNFH: the official NETC mean is 0.00), plus a missing subject
(our failed case). Sealbench's side: its own scoring, the exact pin's release
(``LocalExact``), and the figures read from it alone: per site, pooled over two sites'
releases, and pooled in one release by the aggregator's path (sealed statistics opened and
pooled exactly, as in a TEE).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import warnings
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from sealbench.benchmarks.brats.metrics import CaseFailure
from sealbench.benchmarks.brats.plugin2025 import Brats2025Benchmark
from sealbench.benchmarks.brats.results2025 import CaseResult2025, CaseScores2025
from sealbench.benchmarks.brats.scoring2025 import score_case
from sealbench.benchmarks.brats.tasks2025 import Kind, generate_task_case
from sealbench.benchmarks.pooling import (
    open_statistics,
    parse_pooled_summary,
    pool_exact,
    seal_statistics,
)
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import LocalExact
from sealbench.contract.pin import BenchmarkPin

panoptica = pytest.importorskip("panoptica", reason="the official evaluator (dev extra)")
parser = pytest.importorskip("brats_evaluation.metrics_parser")

pytestmark = pytest.mark.filterwarnings("ignore")
SEEDS = range(880_001, 880_009)  # held out: training uses 100000+ (train.py)
NETC, SNFH = 1, 2


@pytest.fixture(scope="module")
def plugins() -> PluginRegistry:
    return PluginRegistry()


def _perturbed(truth: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pred = np.roll(truth, int(rng.integers(-1, 2)), axis=int(rng.integers(0, 3))).copy()
    for label in np.unique(truth[truth > 0]):
        mask = pred == label
        if rng.uniform() < 0.5:
            pred[mask & ~ndimage.binary_erosion(mask)] = 0
    return pred


def _never_netc(truth: np.ndarray, seed: int) -> np.ndarray:
    pred = _perturbed(truth, seed)
    pred[pred == NETC] = SNFH
    return pred


PREDICTORS = {"perturbed": _perturbed, "never finds NETC": _never_netc}


def _official_means(rows: list[tuple[str, dict[str, Any]]], missing: Sequence[str],
                    groups: Sequence[str], tmp: Path) -> dict[str, float]:
    """The official parser's means of ``global_dsc_<group>`` (its CSV's ``mean`` row) and its
    averaging of the official per-case ``pq_dsc``."""
    import pandas as pd

    summary = {"metrics": [{**dicts, "subject_name": name} for name, dicts in rows],
               "missings": list(missing)}
    (tmp / "summary.json").write_text(json.dumps(summary, default=lambda o: o.item()))
    with contextlib.redirect_stdout(io.StringIO()):
        parser.parse_seg_results(str(tmp / "summary.json"), str(tmp / "summary.csv"))
    csv = pd.read_csv(tmp / "summary.csv")
    mean_row = csv[csv["subject_id"] == "mean"].iloc[0]
    out = {f"dsc {g}": float(mean_row[f"global_dsc_{g}"]) for g in groups}
    pq = pd.DataFrame([{"subject_id": name, **{g: dicts[g]["pq_dsc"] for g in groups}}
                       for name, dicts in rows]
                      + [{"subject_id": name, **dict.fromkeys(groups, 0)} for name in missing])
    pq_mean = parser._calculate_mean_std_median(pq).iloc[-3]
    assert pq_mean["subject_id"] == "mean"
    out.update({f"pq_dsc {g}": float(pq_mean[g]) for g in groups})
    return out


def _cases(kind: Kind, plugin: Brats2025Benchmark) -> list[tuple[str, np.ndarray]]:
    prefix = plugin.case_prefix
    return [(f"{prefix}-{seed:06d}-000",
             generate_task_case(kind, seed, plugin.contract.shape, plugin.contract,
                                anatomy="geometric").classes)
            for seed in SEEDS] + [  # a tumour-free case: every group undefined (NaN)
        (f"{prefix}-{SEEDS[-1] + 1:06d}-000", np.zeros(plugin.contract.shape, np.uint8))]


@pytest.mark.parametrize(("pin", "config_name"), [
    ("brats-2025-gli/1-64x64x48-exact", "gli"), ("brats-2025-met/1-64x64x48-exact", "mets")])
@pytest.mark.parametrize("predictor", list(PREDICTORS))
def test_exact_release_publishes_the_official_summarys_means(
        plugins: PluginRegistry, pin: str, config_name: str, predictor: str,
        tmp_path: Path) -> None:
    plugin = plugins.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, Brats2025Benchmark)
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator = panoptica.Panoptica_Evaluator.load_from_config(str(
            files("brats_evaluation").joinpath("configs", f"config_{config_name}.yaml")))
    groups = [g.name for g in plugin.scoring.groups]
    spacing = plugin.contract.spacing_mm
    official_rows: list[tuple[str, dict[str, Any]]] = []
    ours: list[CaseResult2025] = []
    for i, (name, truth) in enumerate(_cases(plugin.demo_kind, plugin)):
        pred = PREDICTORS[predictor](truth, SEEDS[0] + i)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = evaluator.evaluate(pred, truth, voxelspacing=spacing)
        official_rows.append((name, {g: r.to_dict(True) for g, r in results.items()}))
        ours.append(CaseScores2025.from_official(
            name, plugin.scoring.task, score_case(pred, truth, spacing, plugin.scoring)))
    missing = f"{plugin.case_prefix}-999999-000"
    ours.append(CaseFailure(case_id=missing, reason="inference failed"))
    official = _official_means(official_rows, [missing], groups, tmp_path)

    # the situations the averaging is about are in the data
    undefined = {g: sum(math.isnan(d[g]["global_bin_dsc"]) for _, d in official_rows)
                 for g in groups}
    assert all(k > 0 for k in undefined.values()), undefined
    assert any(k < len(official_rows) for k in undefined.values()), undefined
    if predictor == "never finds NETC" and "netc" in groups:
        assert official["dsc netc"] == 0.0 and official["pq_dsc netc"] == 0.0

    site = plugin.summarise(ours, LocalExact())
    pooled = plugin.pool([plugin.summarise(ours[:3], LocalExact()),
                          plugin.summarise(ours[3:], LocalExact())])
    # the aggregator's path: each site's sealed exact results, opened, pooled in one release
    opened = []
    for run, part in (("run-a", ours[:4]), ("run-b", ours[4:])):
        document, commitment = seal_statistics(plugin.ref, run, part)
        opened.append(open_statistics(plugin, document, commitment, run_id=run))
    in_tee = parse_pooled_summary(plugin, pool_exact(plugin, opened, LocalExact()).to_json())
    for figures in (plugin.figures(site), pooled.figures, plugin.figures(in_tee)):
        shown = {str(f.ref): f.value for f in figures}
        for key, expected in official.items():
            if math.isnan(expected):  # a group no case defines: the parser's mean is NaN
                assert shown[key] is None, key
            else:
                assert shown[key] == pytest.approx(expected, rel=0, abs=1e-12), key
        # the headline: the unweighted mean of the groups' official means (NaN left out)
        for metric in ("dsc", "pq_dsc"):
            means = [official[f"{metric} {g}"] for g in groups
                     if not math.isnan(official[f"{metric} {g}"])]
            assert shown[metric] == pytest.approx(sum(means) / len(means), abs=1e-12)
