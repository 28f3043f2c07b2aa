"""Pooling WDBC sites of unequal sizes from their summaries equals pooling the raw cases:
sensitivity, specificity and Brier score exactly; AUROC within its binning bound.

The bound: the pooled AUROC counts every (malignant, benign) pair whose scores fall in one of the
20 histogram bins as a tie (1/2), so it differs from the AUROC of the raw scores by at most
``Σ_b pos_b · neg_b / (2 · n_pos · n_neg)``, computable from the pooled histograms alone."""

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
    bins = np.minimum((p * 20).astype(int), 19)
    pos_b = np.bincount(bins[y], minlength=20)
    neg_b = np.bincount(bins[~y], minlength=20)
    bound = float((pos_b * neg_b).sum() / (2 * y.sum() * (~y).sum()))
    auroc = pooled["auroc"].value
    assert auroc is not None and abs(auroc - _raw_auroc(y, p)) <= bound + 1e-12
    assert pooled["auroc"].low is not None and pooled["auroc"].low < auroc
    assert PLUGIN.pool(summaries).n_cases == sum(SIZES)


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
