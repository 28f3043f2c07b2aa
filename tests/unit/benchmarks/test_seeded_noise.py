"""The pooled release's noise (issue 40): the discrete Gaussian sampled exactly from a keyed
stream. The same seed gives the same noise (a relaunch buys no averaging), another seed other
noise, and the samples follow the discrete Gaussian, as OpenDP's own sampler's do."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import pytest

from sealbench.benchmarks.release import Column, ReleaseSpec, release
from sealbench.benchmarks.seeded_noise import (
    GRID_BITS,
    KeyedStream,
    SeededDiscreteGaussian,
    pool_noise_seed,
    sample_discrete_gaussian,
)

SIGMA2 = Fraction(4)


def _pmf(k: int, sigma2: float, span: int = 60) -> float:
    norm = sum(math.exp(-(j * j) / (2 * sigma2)) for j in range(-span, span + 1))
    return math.exp(-(k * k) / (2 * sigma2)) / norm


def test_discrete_gaussian_matches_its_pmf() -> None:
    """A chi-square test over the central cells at sigma**2 = 4 (20,000 draws; the statistic's
    99.99% point for 13 degrees of freedom is about 39)."""
    stream = KeyedStream(b"s" * 32)
    n = 20_000
    counts = Counter(sample_discrete_gaussian(stream, SIGMA2) for _ in range(n))
    cells = range(-6, 7)
    chi2 = sum((counts[k] - n * _pmf(k, 4.0)) ** 2 / (n * _pmf(k, 4.0)) for k in cells)
    assert chi2 < 39.0
    mean = sum(k * c for k, c in counts.items()) / n
    var = sum(k * k * c for k, c in counts.items()) / n - mean ** 2
    assert abs(mean) < 0.06 and abs(var - 4.0) < 0.25


def test_discrete_gaussian_agrees_with_opendp() -> None:
    """OpenDP's make_gaussian on integers samples the same distribution (its own randomness):
    the two empirical variances agree within sampling error."""
    from opendp.domains import atom_domain
    from opendp.measurements import make_gaussian
    from opendp.metrics import absolute_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    meas = make_gaussian(atom_domain(T=int), absolute_distance(T=int), scale=3.0)
    theirs = [meas(0) for _ in range(8000)]
    stream = KeyedStream(b"o" * 32)
    ours = [sample_discrete_gaussian(stream, Fraction(9)) for _ in range(8000)]

    def var(xs: list[int]) -> float:
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs) / len(xs)

    assert abs(var(ours) - var(theirs)) < 0.9  # each about 9 +- 0.14 (1 sd)
    assert abs(var(ours) - 9.0) < 0.6


def test_same_seed_same_noise_other_seed_other_noise() -> None:
    values = [3.0, 17.25, 0.5]
    a = SeededDiscreteGaussian(b"a" * 32).gaussian(values, 2.0, math.sqrt(3), 3 / 8)
    again = SeededDiscreteGaussian(b"a" * 32).gaussian(values, 2.0, math.sqrt(3), 3 / 8)
    other = SeededDiscreteGaussian(b"b" * 32).gaussian(values, 2.0, math.sqrt(3), 3 / 8)
    assert a == again
    assert a != other


def test_refuses_sigma_below_the_declared_rho() -> None:
    with pytest.raises(ValueError, match="does not deliver rho"):
        SeededDiscreteGaussian(b"a" * 32).gaussian([1.0], 0.1, 1.0, 0.5)


def test_refuses_a_sum_off_the_grid() -> None:
    with pytest.raises(ValueError, match="release grid"):
        SeededDiscreteGaussian(b"a" * 32).gaussian([1.0 / 3.0], 2.0, 1.0, 0.125)


def test_release_sums_lie_on_the_grid_and_repeat_under_one_seed() -> None:
    """Through the release mechanism: per-case values quantized (sensitivity unchanged), the
    release identical for one seed, its stated sigma the declared one."""
    spec = ReleaseSpec(columns=(Column("dice", 0.0, 1.0),), epsilon=1.0, delta=1e-6)
    rows = [[1 / 3], [0.7], [0.123456789]]
    first = release(rows, spec, SeededDiscreteGaussian(b"k" * 32))
    second = release(rows, spec, SeededDiscreteGaussian(b"k" * 32))
    assert first == second
    assert first.sigma == spec.sigma
    scaled = first.columns[0].sum * 2 ** GRID_BITS
    assert scaled == math.floor(scaled)


def test_pool_noise_seed_needs_every_site_key() -> None:
    keys = [("run-1", b"1" * 32), ("run-2", b"2" * 32)]
    seed = pool_noise_seed("sha256:" + "a" * 64, keys)
    assert seed == pool_noise_seed("sha256:" + "a" * 64, list(reversed(keys)))
    assert seed != pool_noise_seed("sha256:" + "b" * 64, keys)  # another authorization
    assert seed != pool_noise_seed("sha256:" + "a" * 64, [keys[0], ("run-2", b"3" * 32)])
    assert seed != pool_noise_seed("sha256:" + "a" * 64, keys[:1])
    assert len(seed) == 32
