"""Means over the cases where a value is defined (``release.ratio_mean``, ``average_of``): the
mean an official scorer that skips undefined (NaN) values publishes, from a released sum and a
released count, each with its own noise.

The coverage of the 95% interval is simulated here at 12 and 52 cases, with the release's noise
off, small, and at the BraTS 2025 ``gli`` release's own sigma at epsilon 1 (18 columns), over
value distributions a segmentation score takes (Dice-like values with misses, values near 1, a
model that never finds the region: all 0) and groups defined in half or nearly all the cases.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sealbench.benchmarks import release as rel
from sealbench.benchmarks.brats.results2025 import release_spec
from sealbench.benchmarks.brats.scoring2025 import GLI_2025

GLI_SIGMA = release_spec(GLI_2025).sigma
REPS = 2000


def _column(key: str, total: float, sd: float) -> rel.ReleasedColumn:
    return rel.ReleasedColumn(key=key, low=0.0, high=1.0, sum=total, sd=sd)


def _draw(rng: np.random.Generator, kind: str, size: int) -> np.ndarray:
    if kind == "dice with misses":  # 80% found with Dice ~ Beta(8, 2), 20% missed (0)
        return np.where(rng.random(size) < 0.8, rng.beta(8, 2, size), 0.0)
    if kind == "near one":
        return rng.beta(30, 1.5, size)
    if kind == "never found":
        return np.zeros(size)
    raise AssertionError(kind)


TRUTH = {"dice with misses": 0.8 * 0.8, "near one": 30 / 31.5, "never found": 0.0}


def _coverage(n: int, sigma: float, p_defined: float, kind: str, seed: int) -> float:
    rng = np.random.default_rng(seed)
    covered = 0
    for _ in range(REPS):
        defined = rng.random(n) < p_defined
        values = np.where(defined, _draw(rng, kind, n), 0.0)
        s = float(values.sum()) + rng.normal(0, sigma) if sigma else float(values.sum())
        d = float(defined.sum()) + rng.normal(0, sigma) if sigma else float(defined.sum())
        est = rel.ratio_mean([_column("v", s, sigma)], [_column("d", d, sigma)], [n])
        covered += est.low <= TRUTH[kind] <= est.high
    return covered / REPS


@pytest.mark.parametrize("n", [12, 52])
@pytest.mark.parametrize("sigma", [0.0, 1.0, GLI_SIGMA])
@pytest.mark.parametrize(("p_defined", "kind"), [(0.5, "dice with misses"),
                                                  (0.95, "dice with misses"),
                                                  (0.95, "near one"), (0.5, "never found")])
def test_interval_covers_the_defined_cases_mean_at_least_93_percent(
        n: int, sigma: float, p_defined: float, kind: str) -> None:
    assert _coverage(n, sigma, p_defined, kind, seed=n * 7919 + int(sigma * 100)) >= 0.93


def test_exact_release_gives_the_mean_over_the_defined_cases_exactly() -> None:
    values = [0.25, 0.5, 1.0]  # and two undefined cases adding 0 to both sums
    est = rel.ratio_mean([_column("v", sum(values), 0.0)], [_column("d", 3.0, 0.0)], [5])
    assert est.value == pytest.approx(sum(values) / 3, abs=0) and est.informative
    assert est.low < est.value < est.high and est.noise_se == 0


def test_pooled_sites_add_sums_counts_and_noise_variances() -> None:
    a = rel.ratio_mean([_column("v", 3.0, 2.0), _column("v", 5.0, 1.0)],
                       [_column("d", 4.0, 2.0), _column("d", 6.0, 1.0)], [5, 8])
    b = rel.ratio_mean([_column("v", 8.0, math.sqrt(5.0))], [_column("d", 10.0, math.sqrt(5.0))],
                       [13])
    assert (a.value, a.low, a.high, a.noise_se) == pytest.approx(
        (b.value, b.low, b.high, b.noise_se))


def test_no_defined_case_or_a_swamped_count_is_uninformative_over_the_whole_range() -> None:
    nothing = rel.ratio_mean([_column("v", 0.0, 0.0)], [_column("d", 0.0, 0.0)], [4])
    assert not nothing.informative and (nothing.low, nothing.high) == (0.0, 1.0)
    swamped = rel.ratio_mean([_column("v", 2.0, GLI_SIGMA)], [_column("d", 3.0, GLI_SIGMA)],
                             [12])
    assert not swamped.informative and (swamped.low, swamped.high) == (0.0, 1.0)
    negative = rel.ratio_mean([_column("v", 2.0, 5.0)], [_column("d", -3.0, 5.0)], [12])
    assert not negative.informative


def test_a_noise_draw_that_fits_no_value_is_not_a_collapsed_interval() -> None:
    # S far below 0 with a confident count: no θ in [0, 1] fits; never "[0.00, 0.00]"
    est = rel.ratio_mean([_column("v", -40.0, 1.0)], [_column("d", 50.0, 1.0)], [60])
    assert (est.low, est.high) == (0.0, 1.0) and not est.informative


def test_defined_value_leaves_nan_out_and_clips_the_rest() -> None:
    assert rel.defined_value(float("nan"), 0.0, 1.0) == (0.0, 0.0)
    assert rel.defined_value(1.7, 0.0, 1.0) == (1.0, 1.0)
    assert rel.defined_value(float("-inf"), 0.0, 1.0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="around 0"):
        rel.defined_value(0.5, 0.2, 1.0)


def test_mismatched_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="one case"):
        rel.ratio_mean([_column("v", 1.0, 0.0)], [], [3])
    wide = rel.ReleasedColumn(key="d", low=0.0, high=2.0, sum=1.0, sd=0.0)
    with pytest.raises(ValueError, match="indicator"):
        rel.ratio_mean([_column("v", 1.0, 0.0)], [wide], [3])


def test_average_of_groups_is_uninformative_when_one_group_is() -> None:
    good = rel.ratio_mean([_column("v", 40.0, 1.0)], [_column("d", 50.0, 1.0)], [60])
    bad = rel.ratio_mean([_column("v", 0.0, 0.0)], [_column("d", 0.0, 0.0)], [60])
    assert rel.average_of([good, good]).informative
    both = rel.average_of([good, bad])
    assert not both.informative and (both.low, both.high) == (0.0, 1.0)


def test_average_of_groups_covers_the_mean_of_their_means() -> None:
    """Two groups over the same 52 cases, correlated (the second is the first's cases, some
    lost), at the gli release's noise: the mean of the two means is covered >= 93%."""
    rng = np.random.default_rng(5)
    truth = (TRUTH["dice with misses"] + TRUTH["dice with misses"] * 0.9) / 2
    covered, n = 0, 52
    for _ in range(REPS):
        first = _draw(rng, "dice with misses", n)
        second = first * (rng.random(n) < 0.9)
        ests = []
        for values in (first, second):
            s = float(values.sum()) + rng.normal(0, 1.0)
            d = float(n) + rng.normal(0, 1.0)
            ests.append(rel.ratio_mean([_column("v", s, 1.0)], [_column("d", d, 1.0)], [n]))
        avg = rel.average_of(ests)
        covered += avg.low <= truth <= avg.high
    assert covered / REPS >= 0.93


@pytest.mark.parametrize("n", [12, 52])
@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_average_of_groups_covers_a_mean_near_0(n: int, sigma: float) -> None:
    """A weak model: each group found in 3% of cases (Dice 0.8), else 0. Most draws at 12
    cases see nothing found; the average's interval must still reach the truth (a point
    estimate's Bhatia-Davis term is 0 there, Wilson's is not)."""
    rng = np.random.default_rng(n + int(sigma))
    truth, covered = 0.03 * 0.8, 0
    for _ in range(REPS):
        ests = []
        for _group in range(4):
            values = np.where(rng.random(n) < 0.03, 0.8, 0.0)
            s = float(values.sum()) + (rng.normal(0, sigma) if sigma else 0.0)
            d = float(n) + (rng.normal(0, sigma) if sigma else 0.0)
            ests.append(rel.ratio_mean([_column("v", s, sigma)], [_column("d", d, sigma)], [n]))
        avg = rel.average_of(ests)
        covered += avg.low <= truth <= avg.high
    assert covered / REPS >= 0.93
