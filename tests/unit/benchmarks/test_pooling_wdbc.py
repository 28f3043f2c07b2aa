"""Pooling WDBC sites of unequal sizes from their summaries equals pooling the raw cases:
sensitivity, specificity and Brier score exactly; AUROC within its binning bound.

The bound: each site's per-class histograms are merged into cells of at least 3 cases (the
small-cell rule); the pooled AUROC counts every (malignant, benign) pair in overlapping cells as
a tie (1/2), so it differs from the AUROC of the raw scores by at most
``Σ pos_a · neg_b / (2 · n_pos · n_neg)`` over overlapping cells (``auroc_binning_bound``),
computable from the summaries alone. The pooled ECE equals the raw cases' ECE on the partition
of the reliability grid the cells respect (``ece_partition``)."""

from __future__ import annotations

import numpy as np
import pytest

from sealbench.benchmarks.wdbc import summary as s
from sealbench.benchmarks.wdbc.plugin import PLUGIN

SIZES = (12, 150, 700)


def _site(rng: np.random.Generator, n: int, prevalence: float) -> list[s.WdbcCaseResult]:
    y = rng.random(n) < prevalence
    p = np.clip(np.where(y, rng.beta(5, 2, n), rng.beta(2, 5, n)), 0, 1)
    return [s.WdbcCaseResult(case_id=f"c{i}", malignant=bool(y[i]), score=float(p[i]))
            for i in range(n)]


def _raw_auroc(y: np.ndarray, p: np.ndarray) -> float:
    pos, neg = p[y], p[~y]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pooled_figures_equal_the_raw_cases(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sites = [_site(rng, n, prev) for n, prev in zip(SIZES, (0.6, 0.35, 0.2), strict=True)]
    summaries = [PLUGIN.parse_summary(s.summarise(site, "wdbc/1").to_json()) for site in sites]
    pooled = {str(f.ref): f for f in PLUGIN.pool(summaries).figures}
    rows = [r for site in sites for r in site]
    y = np.array([bool(r.malignant) for r in rows])
    p = np.array([float(r.score or 0.0) for r in rows])
    called = p >= s.THRESHOLD
    assert pooled["sensitivity"].value == pytest.approx(
        (called & y).sum() / y.sum(), abs=1e-12)
    assert pooled["specificity"].value == pytest.approx(
        (~called & ~y).sum() / (~y).sum(), abs=1e-12)
    assert pooled["brier"].value == pytest.approx(float(np.mean((p - y) ** 2)), abs=1e-12)
    bound = s.auroc_binning_bound(summaries)
    assert 0 < bound < 0.05
    auroc = pooled["auroc"].value
    assert auroc is not None and abs(auroc - _raw_auroc(y, p)) <= bound + 1e-12
    assert pooled["auroc"].low is not None and pooled["auroc"].low < auroc
    assert PLUGIN.pool(summaries).n_cases == sum(SIZES)
    calibration_bin = np.minimum((p * 10).astype(int), 9)
    gap = sum(abs(float(y[(calibration_bin >= lo) & (calibration_bin <= hi)].sum())
                  - float(p[(calibration_bin >= lo) & (calibration_bin <= hi)].sum()))
              for lo, hi in s.ece_partition(summaries))
    assert pooled["ece"].value == pytest.approx(gap / len(p), abs=1e-12)


def test_site_weighting_is_by_cases_not_sites() -> None:
    rng = np.random.default_rng(9)
    small = _site(rng, 12, 0.5)
    large = _site(rng, 700, 0.5)
    summaries = [PLUGIN.parse_summary(s.summarise(x, "wdbc/1").to_json()) for x in (small, large)]
    pooled = {str(f.ref): f.value for f in PLUGIN.pool(summaries).figures}
    rows = small + large
    y = np.array([bool(r.malignant) for r in rows])
    p = np.array([float(r.score or 0.0) for r in rows])
    assert pooled["brier"] == pytest.approx(float(np.mean((p - y) ** 2)), abs=1e-12)
    site_briers = [x.brier for x in summaries]
    assert pooled["brier"] != pytest.approx(sum(b for b in site_briers if b) / 2, abs=1e-6)


@pytest.mark.parametrize("n", [10, 12, 40, 150])
def test_no_cell_under_the_minimum_in_any_summary(n: int) -> None:
    """Histogram cells and reliability rows merge adjacent bins to at least 3 cases (a class
    with fewer is one cell over the whole grid); the score sum of fewer is left out."""
    rng = np.random.default_rng(n)
    doc = s.summarise(_site(rng, n, 0.15), "wdbc/1")
    assert doc.pooling is not None and doc.calibration is not None
    for cells in (doc.pooling.positives, doc.pooling.negatives, doc.pooling.scores):
        assert all(c.n >= s.BIN_MINIMUM for c in cells) or (
            len(cells) == 1 and (cells[0].first, cells[0].last) == (0, doc.pooling.bins - 1))
    assert all(c.score_sum is None for c in doc.pooling.scores if c.n < s.BIN_MINIMUM)
    assert all(row.n >= s.BIN_MINIMUM for row in doc.calibration.bins)
    assert sum(row.n for row in doc.calibration.bins) == n
    assert sum(c.n for c in doc.pooling.positives) == doc.n_malignant
    PLUGIN.parse_summary(doc.to_json())


def test_a_summary_with_a_cell_under_the_minimum_is_refused() -> None:
    doc = s.summarise(_site(np.random.default_rng(4), 150, 0.4), "wdbc/1").to_json()
    pos = doc["pooling"]["positives"]
    split = [{**pos[0], "last": pos[0]["first"]}, {**pos[0], "first": pos[0]["first"] + 1}]
    split[0]["n"], split[1]["n"] = 1, pos[0]["n"] - 1
    forged = {**doc, "pooling": {**doc["pooling"], "positives": [*split, *pos[1:]]}}
    with pytest.raises(Exception, match="not a sealbench/wdbc-summary"):
        PLUGIN.parse_summary(forged)
    row = {**doc["calibration"]["bins"][0], "n": 1}
    forged = {**doc, "calibration": {**doc["calibration"],
                                     "bins": [row, *doc["calibration"]["bins"][1:]]}}
    with pytest.raises(Exception, match="not a sealbench/wdbc-summary"):
        PLUGIN.parse_summary(forged)
