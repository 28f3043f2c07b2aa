"""Pooling BraTS sites from their summaries equals pooling the raw cases: means and standard
deviations exactly, quantiles within the documented bound; histograms keep small cells out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, CaseScores, RegionScores, aggregate
from sealbench.benchmarks.brats.plugin import PLUGIN
from sealbench.benchmarks.brats.pooling import pool, pooled_moments, pooled_quantile
from sealbench.benchmarks.brats.summary import (
    HISTOGRAM_METRICS,
    HISTOGRAM_MIN_COUNT,
    METRIC_NAMES,
    PublicSummary,
    histogram,
)

SPEC = BRATS_2023_GLI_METRICS
SIZES = (2, 7, 40, 311)


def _site(rng: np.random.Generator, n: int, shift: float) -> list[CaseScores]:
    cases = []
    for i in range(n):
        regions = {}
        for region in SPEC.regions:
            dice = float(np.clip(rng.beta(6, 2) - shift, 0, 1))
            hd = float(rng.choice([rng.gamma(2, 4), 374.0], p=[0.9, 0.1]))
            regions[region] = RegionScores(
                dice=dice, hd95=hd, sensitivity=float(rng.uniform(0.5, 1)),
                specificity=float(rng.uniform(0.99, 1)), lesion_dice=dice * 0.9,
                lesion_hd95=hd * 1.1 if hd < 300 else 374.0, num_tp=int(rng.integers(0, 4)),
                num_fp=int(rng.integers(0, 3)), num_fn=int(rng.integers(0, 2)),
                gt_volume_mm3=1000.0, pred_volume_mm3=900.0)
        cases.append(CaseScores(case_id=f"c{i}", regions=regions))
    return cases


@pytest.fixture(scope="module")
def sites() -> list[list[CaseScores]]:
    rng = np.random.default_rng(15)
    return [_site(rng, n, shift) for n, shift in zip(SIZES, (0.0, 0.1, 0.05, 0.2), strict=True)]


def _raw(sites: list[list[CaseScores]], region: str, metric: str) -> np.ndarray:
    return np.array([float(getattr(c.regions[region], metric)) for s in sites for c in s])


def test_pooled_moments_equal_raw_cases(sites: list[list[CaseScores]]) -> None:
    summaries = [aggregate(s, SPEC) for s in sites]
    for region in SPEC.regions:
        for metric in METRIC_NAMES:
            raw = _raw(sites, region, metric)
            mom = pooled_moments(summaries, region, metric)
            assert mom.n == len(raw) == sum(SIZES)
            assert mom.mean == pytest.approx(raw.mean(), rel=1e-12, abs=1e-12)
            assert mom.sample_std == pytest.approx(raw.std(ddof=1), rel=1e-12, abs=1e-12)


def test_pooled_figures_are_case_weighted_not_site_averaged(
        sites: list[list[CaseScores]]) -> None:
    summaries = [aggregate(s, SPEC) for s in sites]
    pooled = pool(summaries, SPEC)
    assert (pooled.n_sites, pooled.n_cases) == (4, sum(SIZES))
    by_ref = {str(f.ref): f for f in pooled.figures}
    raw = np.mean([_raw(sites, r, "dice") for r in SPEC.regions], axis=0)
    headline = by_ref["dice"]
    assert headline.value == pytest.approx(raw.mean(), abs=1e-12)
    site_means = [np.mean([s.regions[r]["dice"].mean for r in SPEC.regions]) for s in summaries]
    assert abs(headline.value - float(np.mean(site_means))) > 1e-3  # not the unweighted mean
    # the conservative interval holds the exact normal interval of the per-case average
    exact_half = 1.959963984540054 * raw.std(ddof=1) / math.sqrt(len(raw))
    assert headline.low is not None and headline.high is not None
    assert headline.high - headline.low >= 2 * exact_half - 1e-12
    wt = by_ref["dice WT"]
    raw_wt = _raw(sites, "WT", "dice")
    half = 1.959963984540054 * raw_wt.std(ddof=1) / math.sqrt(len(raw_wt))
    assert wt.low == pytest.approx(raw_wt.mean() - half, abs=1e-12)
    assert wt.high == pytest.approx(min(1.0, raw_wt.mean() + half), abs=1e-12)


@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.75, 0.9, 1.0])
def test_pooled_quantiles_within_documented_bound(sites: list[list[CaseScores]],
                                                   q: float) -> None:
    summaries = [aggregate(s, SPEC) for s in sites[1:]]  # every site over the minimum
    for region in SPEC.regions:
        for metric in HISTOGRAM_METRICS:
            raw = np.concatenate([_raw([s], region, metric) for s in sites[1:]])
            truth = float(np.quantile(raw, q))
            bracket = pooled_quantile(summaries, region, metric, q)
            assert bracket is not None
            assert bracket.low - 1e-9 <= truth <= bracket.high + 1e-9
            assert abs(bracket.value - truth) <= bracket.bound + 1e-9


def test_site_under_bin_minimum_suppresses_its_histogram(sites: list[list[CaseScores]]) -> None:
    tiny = aggregate(sites[0], SPEC)  # two cases: under the bin minimum of 3
    assert tiny.histograms is not None
    assert all(h is None for hists in tiny.histograms.values() for h in hists.values())
    assert pooled_quantile([tiny, aggregate(sites[1], SPEC)], "WT", "dice", 0.5) is None


def test_no_histogram_cell_under_the_minimum(sites: list[list[CaseScores]]) -> None:
    for site in sites[1:]:
        summary = aggregate(site, SPEC)
        assert summary.histograms is not None
        for hists in summary.histograms.values():
            for h in hists.values():
                assert h is not None and h.total == summary.n_cases
                assert all(count >= HISTOGRAM_MIN_COUNT for _, _, count in h.cells)


def test_histogram_merges_sparse_bins_and_keeps_every_case() -> None:
    values = np.array([0.005, 0.015, 0.5, 0.51, 0.52, 0.99, 0.995])
    h = histogram(values, 0.0, 1.0, bins=100, min_count=3)
    assert h is not None
    assert h.cells == ((0, 51, 3), (51, 100, 4))  # the last two join the last cell


def test_forged_summary_with_small_cell_is_refused(sites: list[list[CaseScores]]) -> None:
    doc = aggregate(sites[1], SPEC).to_json()
    hist = doc["histograms"]["WT"]["dice"]  # type: ignore[index]
    hist["cells"] = [[0, 1, 1], *hist["cells"][1:]]
    with pytest.raises(ValueError, match="under the minimum"):
        PublicSummary.model_validate(doc)


def test_pooling_with_no_summary_is_refused() -> None:
    with pytest.raises(ValueError):
        pool([], SPEC)


def test_summary_under_the_small_cell_minimum_is_refused(sites: list[list[CaseScores]]) -> None:
    with pytest.raises(api.SmallCellError, match="under brats-2023-gli/1's small-cell minimum"):
        api.check_small_cells(PLUGIN, aggregate(sites[0], SPEC))  # 2 cases, minimum 5
    api.check_small_cells(PLUGIN, aggregate(sites[1], SPEC))  # 7 cases
