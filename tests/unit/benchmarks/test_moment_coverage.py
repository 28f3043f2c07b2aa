"""Intervals from the data (issue 41 part 3): a release's private second moment
(``release.Moment``) lets ``pooled_mean`` and ``ratio_mean`` estimate the cases' spread instead
of bounding it at the worst case (Bhatia-Davis). Their 95% intervals must still cover.

Coverage is simulated (seeded) at 12, 52 and 1,600 cases, for one release over the cases (a
site's own, or the aggregator's TEE-pooled release over every site's cases: the same
computation over ``n`` cases) and for per-site releases pooled on the board, with Dice-like
values (a spike at 0 plus a beta bulk, and a near-constant one), at the noise the shipped BraTS
pins' releases carry (their ``ReleaseSpec.sigma``: the calibration in force) and without noise
(an exact release). The sums are drawn directly (values plus Gaussian noise of the release's
sd), which is what a release holds; the estimate is the library's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sealbench.benchmarks import release as rel
from sealbench.benchmarks.brats.metrics import BRATS_2023_GLI_METRICS
from sealbench.benchmarks.brats.published import release_spec as brats_spec
from sealbench.benchmarks.brats.results2025 import release_spec as spec_2025
from sealbench.benchmarks.brats.scoring2025 import GLI_2025

#: The 2023 pin's noise per scaled sum (3 region columns and the headline's moment).
SIGMA_2023 = brats_spec(BRATS_2023_GLI_METRICS).sigma
#: The 2025 gli pin's (18 columns and 6 moments).
SIGMA_2025 = spec_2025(GLI_2025).sigma
REPS = 1500
#: cases -> sites for the board-pooled layout
SITES = {12: 3, 52: 4, 1600: 32}


def _draw(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "spike and bulk":  # 10% missed (Dice 0), else Beta(14, 1.6)
        return np.where(rng.random(shape) < 0.1, 0.0, rng.beta(14, 1.6, shape))
    if kind == "near constant":
        return rng.beta(500, 50, shape)
    raise AssertionError(kind)


TRUTH = {"spike and bulk": 0.9 * 14 / 15.6, "near constant": 500 / 550}


def _headline_coverage(n: int, kind: str, sigma: float, sites: int, seed: int) -> float:
    """The 2023 headline (one column: the per-case mean over regions, its sum's noise the
    average of three sums', the moment's noise sigma) over ``sites`` releases."""
    rng = np.random.default_rng(seed)
    per = n // sites
    values = _draw(rng, kind, (REPS, sites, per))
    sums = values.sum(axis=2) + rng.normal(0, sigma / math.sqrt(3), (REPS, sites))
    squares = (values ** 2).sum(axis=2) + rng.normal(0, sigma, (REPS, sites))
    covered = 0
    for r in range(REPS):
        columns = [rel.ReleasedColumn(key="dice", low=0.0, high=1.0, sum=float(sums[r, k]),
                                      sd=sigma / math.sqrt(3)) for k in range(sites)]
        moments = [rel.ReleasedMoment(key="dice", of=("a", "b", "c"), low=0.0, high=1.0,
                                      squares=float(squares[r, k]), sd=sigma)
                   for k in range(sites)]
        est = rel.pooled_mean(columns, [per] * sites, moments)
        covered += est.low <= TRUTH[kind] <= est.high
    return covered / REPS


@pytest.mark.parametrize("n", [12, 52, 1600])
@pytest.mark.parametrize("kind", ["spike and bulk", "near constant"])
@pytest.mark.parametrize("layout", ["one release", "board-pooled"])
@pytest.mark.parametrize("noise", ["pin", "exact"])
def test_headline_interval_from_the_second_moment_covers_at_least_93_percent(
        n: int, kind: str, layout: str, noise: str) -> None:
    sigma = SIGMA_2023 if noise == "pin" else 0.0
    sites = 1 if layout == "one release" else SITES[n]
    seed = n * 31 + len(kind) * 7 + sites + (noise == "pin")
    assert _headline_coverage(n, kind, sigma, sites, seed) >= 0.93


def _ratio_coverage(n: int, kind: str, sigma: float, sites: int, seed: int) -> float:
    """A 2025 group's mean over the cases where it is defined (80% of them), from the value's
    sum, the count and the value's moment, each with the release's noise."""
    rng = np.random.default_rng(seed)
    per = n // sites
    defined = rng.random((REPS, sites, per)) < 0.8
    values = np.where(defined, _draw(rng, kind, (REPS, sites, per)), 0.0)
    noise = rng.normal(0, sigma, (3, REPS, sites))
    s = values.sum(axis=2) + noise[0]
    d = defined.sum(axis=2) + noise[1]
    q = (values ** 2).sum(axis=2) + noise[2]
    covered = 0
    for r in range(REPS):
        est = rel.ratio_mean(
            [rel.ReleasedColumn(key="v", low=0.0, high=1.0, sum=float(s[r, k]), sd=sigma)
             for k in range(sites)],
            [rel.ReleasedColumn(key="d", low=0.0, high=1.0, sum=float(d[r, k]), sd=sigma)
             for k in range(sites)],
            [per] * sites,
            [rel.ReleasedMoment(key="v", of=("v",), low=0.0, high=1.0, squares=float(q[r, k]),
                                sd=sigma) for k in range(sites)])
        covered += est.low <= TRUTH[kind] <= est.high
    return covered / REPS


@pytest.mark.parametrize("n", [12, 52, 1600])
@pytest.mark.parametrize("kind", ["spike and bulk", "near constant"])
@pytest.mark.parametrize("layout", ["one release", "board-pooled"])
def test_defined_cases_mean_from_the_second_moment_covers_at_least_93_percent(
        n: int, kind: str, layout: str) -> None:
    sites = 1 if layout == "one release" else SITES[n]
    assert _ratio_coverage(n, kind, SIGMA_2025, sites, seed=n + len(kind) + sites) >= 0.93


def test_exact_defined_cases_mean_from_the_second_moment_covers_at_12_cases() -> None:
    assert _ratio_coverage(12, "spike and bulk", 0.0, 1, seed=5) >= 0.93


def test_the_second_moment_narrows_the_interval_where_sampling_dominates() -> None:
    """1,600 cases in one release at the pin's noise: the spread read from the data is the
    cases' own (about 0.29 for spike and bulk), not the bound at the worst mean (0.39)."""
    rng = np.random.default_rng(1)
    values = _draw(rng, "spike and bulk", (1600,))
    column = rel.ReleasedColumn(key="dice", low=0.0, high=1.0, sum=float(values.sum()),
                                sd=SIGMA_2023 / math.sqrt(3))
    moment = rel.ReleasedMoment(key="dice", of=("dice",), low=0.0, high=1.0,
                                squares=float((values ** 2).sum()), sd=SIGMA_2023)
    bound = rel.pooled_mean([column], [1600])
    read = rel.pooled_mean([column], [1600], [moment])
    assert read.sampling_se < 0.85 * bound.sampling_se
    assert read.sampling_se >= values.std(ddof=1) / math.sqrt(1600)
    assert read.high - read.low < 0.85 * (bound.high - bound.low)


def test_a_noise_swamped_moment_falls_back_to_the_bound_never_below_it() -> None:
    """At 12 cases a moment far below its possible range (noise) cannot shrink the interval
    under the zero-spread floor, nor widen it past the Bhatia-Davis bound."""
    column = rel.ReleasedColumn(key="dice", low=0.0, high=1.0, sum=9.0, sd=2.0)
    bound = rel.pooled_mean([column], [12])
    for squares in (-40.0, 0.0, 6.75, 60.0):
        moment = rel.ReleasedMoment(key="dice", of=("dice",), low=0.0, high=1.0,
                                    squares=squares, sd=5.0)
        est = rel.pooled_mean([column], [12], [moment])
        assert 0 < est.sampling_se <= bound.sampling_se


def test_without_every_sites_moment_the_bound_is_kept() -> None:
    """A board pooling a release that holds no moment (an old summary) with one that does:
    the spread of the union is not known, so the bound stays."""
    column = rel.ReleasedColumn(key="dice", low=0.0, high=1.0, sum=40.0, sd=1.0)
    moment = rel.ReleasedMoment(key="dice", of=("dice",), low=0.0, high=1.0, squares=35.0,
                                sd=1.0)
    bound = rel.pooled_mean([column, column], [50, 50])
    assert rel.pooled_mean([column, column], [50, 50], [moment, None]) == bound
    assert rel.pooled_mean([column, column], [50, 50], [moment, moment]) != bound
