"""Figures from noisy score-bin counts: what the WDBC release is turned into (post-processing).

A WDBC release (:mod:`.summary`) counts the malignant and the benign cases in each of
:data:`SCORE_BINS` score bins, every count with independent Gaussian noise of one variance.
Pooling sites adds their counts cell by cell (unbiased) and their noise variances. From such
:class:`Counts` this module estimates, with 95% intervals that add the release noise to the
sampling error:

- **AUROC**: the Mann-Whitney statistic on the bins, a (malignant, benign) pair in the same bin
  counting 1/2: ``A = Σ_a P_a·(N_below_a + N_a/2) / (ΣP·ΣN)``. Its numerator and denominator
  are unbiased (products of independent noisy cells); the ratio's bias is of second order in
  ``noise sd / class total`` (measured 0.003 at three 1000-case sites, epsilon 1).
- **Sensitivity and specificity at 0.5**: 0.5 is a bin edge (:data:`THRESHOLD_BIN`), so a
  class's cases above and below it are sums of whole bins: ``hits / (hits + misses)``.

**Intervals.** Each figure is a ratio of noisy sums, ``X / Y``. Its noise variance is the delta
method's: the ratio's derivative with respect to each cell times the cell's noise variance,
cells independent (for the AUROC plus the variance of the products of two noises). Linearised
at the noisy estimate it fails where the denominator is itself noisy, since the estimate and
its standard error then err together (at epsilon 1 on the demo sites the specificity intervals
that passed the informative rule covered the truth in 23 of the 49 releases, out of 600, where
they were shown). So the interval is the delta method's before linearising, Fieller's: every
value ``θ`` whose pivot ``X - θ·Y`` (of mean 0 at the truth, exactly, the sums being unbiased)
lies within 1.96 standard deviations of 0, its variance being the noise's (a quadratic in
``θ``) plus the sampling's. Sampling: for the AUROC, DeLong's variance on the noisy counts
clipped at 0 (cases of one bin share their structural components); for a proportion, the
binomial ``total·θ(1-θ)``, so that without noise the interval is Wilson's score interval. Where
the noise swamps the denominator the set is unbounded: there is no interval.
:func:`auroc_binning_bound` says how far the binned AUROC can lie from the AUROC of the raw
scores (half the fraction of pairs in one bin), from the counts clipped at 0: a bound on exact
counts, an estimate of it on noisy ones. It is the AUROC figure's ``bias``
(:attr:`~sealbench.benchmarks.interface.Figure.bias`); the other figures are exact in method.

**Uninformative figures.** Noisy counts can be negative; every estimator stays defined. When a
class total is below :data:`MIN_TOTAL_SD` noise standard deviations, when there is no bounded
interval, or (for a noisy release) when the 95% interval spans more than half the metric's
range, the figure cannot bear a reading: :meth:`BinnedEstimate.figure` gives it the value None
(never shown or ranked) and keeps its interval (the whole range where none can be computed) to
say why.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from sealbench.benchmarks.interface import Figure, MetricRef
from sealbench.benchmarks.release import Z95

__all__ = [
    "EDGES",
    "MIN_TOTAL_SD",
    "SCORE_BINS",
    "SCORE_BIN_SCHEME",
    "THRESHOLD_BIN",
    "BinnedEstimate",
    "Counts",
    "auroc",
    "auroc_binning_bound",
    "auroc_from_pairs",
    "score_bin",
    "sensitivity",
    "specificity",
]

FloatArray = npt.NDArray[np.float64]

#: Score bins of a release: equally spaced in logit space.
SCORE_BINS: Final = 20
#: The bins' name in a summary: interior edges at ``sigmoid(linspace(-8, 8, 19))``, bin 0 is
#: ``[0, EDGES[0])``, bin k ``[EDGES[k-1], EDGES[k])``, bin 19 ``[EDGES[18], 1]``.
SCORE_BIN_SCHEME: Final = "logit-20: [0, 1] cut at sigmoid(linspace(-8, 8, 19))"
#: The interior edges (``EDGES[9]`` is 0.5 exactly: ``sigmoid(0)``).
EDGES: Final[tuple[float, ...]] = tuple(
    1.0 / (1.0 + math.exp(-(-8.0 + 16.0 * k / 18))) for k in range(SCORE_BINS - 1))
#: The first bin of scores >= 0.5, the benchmark's threshold.
THRESHOLD_BIN: Final = 10
#: A class total under this many noise standard deviations makes its figures uninformative.
MIN_TOTAL_SD: Final = 3.0


def score_bin(score: float) -> int:
    """The bin of a score in [0, 1] (a score on an edge belongs to the bin it opens)."""
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score {score} is not in [0, 1]")
    return bisect.bisect_right(EDGES, score)


@dataclass(frozen=True)
class Counts:
    """Cases per score bin of each class, noisy (one release or the cell-wise sum of several),
    and the noise variance of every cell (the sum of the releases' noise variances; 0 for
    exact counts)."""

    malignant: tuple[float, ...]
    benign: tuple[float, ...]
    variance: float

    def __post_init__(self) -> None:
        if len(self.malignant) != SCORE_BINS or len(self.benign) != SCORE_BINS:
            raise ValueError(f"need {SCORE_BINS} bins per class")
        if not (self.variance >= 0 and math.isfinite(self.variance)):
            raise ValueError("the noise variance must be finite and >= 0")

    def __add__(self, other: Counts) -> Counts:
        return Counts(tuple(a + b for a, b in zip(self.malignant, other.malignant, strict=True)),
                      tuple(a + b for a, b in zip(self.benign, other.benign, strict=True)),
                      self.variance + other.variance)

    def total_sd(self) -> float:
        """The noise standard deviation of a class total (a sum of :data:`SCORE_BINS` cells)."""
        return math.sqrt(SCORE_BINS * self.variance)


@dataclass(frozen=True)
class BinnedEstimate:
    """An estimate from :class:`Counts`: ``estimate`` (None where undefined: a class total not
    positive), its 95% interval clipped to [0, 1] (None where none can be computed from exact
    counts), the noise's and the sampling's standard errors, and whether it can bear a reading
    (module docstring)."""

    estimate: float | None
    low: float | None
    high: float | None
    noise_se: float
    sampling_se: float
    informative: bool

    def figure(self, ref: MetricRef, bias: float | None = None) -> Figure:
        """The shown figure: the estimate clipped to [0, 1], or None when uninformative, with
        the method's ``bias`` (:attr:`Figure.bias`; None where the method is exact)."""
        value = (None if self.estimate is None or not self.informative
                 else min(max(self.estimate, 0.0), 1.0))
        return Figure(ref, value, self.low, self.high, bias=bias)


def _undefined(counts: Counts) -> BinnedEstimate:
    if counts.variance == 0:
        return BinnedEstimate(None, None, None, 0.0, 0.0, False)
    return BinnedEstimate(None, 0.0, 1.0, math.inf, math.inf, False)


def _roots(a: float, b: float, c: float) -> tuple[float, float] | None:
    """The interval where ``a·x² + b·x + c <= 0``, or None when it is not one bounded interval
    (``a <= 0``: the noise swamps the denominator) or is empty."""
    if a <= 0:
        return None
    disc = b * b - 4 * a * c
    if disc < 0:
        return None
    root = math.sqrt(disc)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


def _estimate(value: float, bounds: tuple[float, float] | None, noise_var: float,
              sampling_var: float, counts: Counts, totals: tuple[float, ...]) -> BinnedEstimate:
    """The estimate with its interval clipped to [0, 1] (the whole range when there is none)
    and the informative rule of the module docstring (every class total at least
    :data:`MIN_TOTAL_SD` noise standard deviations of a total)."""
    enough = min(totals) >= MIN_TOTAL_SD * counts.total_sd()
    return _shown(value, bounds, noise_var, sampling_var, noisy=counts.variance > 0,
                  enough=enough)


def _shown(value: float, bounds: tuple[float, float] | None, noise_var: float,
           sampling_var: float, *, noisy: bool, enough: bool) -> BinnedEstimate:
    """The estimate with its interval clipped to [0, 1] (the whole range when there is none),
    informative when ``enough`` signal stands above the noise, the interval is bounded and
    (under noise) at most half the range."""
    if bounds is None:
        low, high = 0.0, 1.0
    else:
        low, high = (min(max(x, 0.0), 1.0) for x in bounds)
    informative = bounds is not None and enough and not (noisy and high - low > 0.5)
    return BinnedEstimate(value, low, high, math.sqrt(noise_var), math.sqrt(sampling_var),
                          informative)


# -- AUROC --------------------------------------------------------------------------------------


def _mann_whitney(p: FloatArray, n: FloatArray) -> tuple[float, FloatArray, FloatArray]:
    """The binned AUROC and, per bin, the benign cases a malignant one there outranks
    (``N_below + N/2``) and the malignant cases outranking a benign one there
    (``P_above + P/2``)."""
    sp, sn = float(p.sum()), float(n.sum())
    below = np.cumsum(n) - n
    above = sp - np.cumsum(p)
    outranked = below + n / 2
    outranking = above + p / 2
    return float(p @ outranked) / (sp * sn), outranked, outranking


def _delong_variance(p: FloatArray, n: FloatArray) -> float:
    """DeLong's variance of the binned AUROC (cases of a bin share their structural
    components); the largest possible, 1/4, when a class has fewer than two cases."""
    sp, sn = float(p.sum()), float(n.sum())
    if sp < 2 or sn < 2:
        return 0.25
    value, outranked, outranking = _mann_whitney(p, n)
    s10 = float(p @ (outranked / sn - value) ** 2) / (sp - 1)
    s01 = float(n @ (outranking / sp - value) ** 2) / (sn - 1)
    return s10 / sp + s01 / sn


def auroc(counts: Counts) -> BinnedEstimate:
    """The binned AUROC of ``counts`` and its 95% interval (module docstring)."""
    p = np.asarray(counts.malignant, dtype=np.float64)
    n = np.asarray(counts.benign, dtype=np.float64)
    sp, sn = float(p.sum()), float(n.sum())
    if sp <= 0 or sn <= 0:
        return _undefined(counts)
    value, outranked, outranking = _mann_whitney(p, n)
    v, d, bins = counts.variance, sp * sn, SCORE_BINS
    # The pivot T(A) = Σ_ab (K_ab - A)·P_a·N_b (K_ab = 1 when bin a is above bin b, 1/2 when
    # they are one bin, else 0) has mean 0 at the true A: its noise variance is
    # v·[Σ_a (outranked_a - A·SN)² + Σ_b (outranking_b - A·SP)²] + v²·Σ_ab (K_ab - A)²,
    # a quadratic c0 + c1·A + c2·A² (the delta method's, before linearising in A).
    pairs = bins * (bins - 1) / 2
    k1, k2 = pairs + bins / 2, pairs + bins / 4  # Σ K, Σ K²
    c0 = v * float(outranked @ outranked + outranking @ outranking) + v * v * k2
    c1 = -2 * v * (sn * float(outranked.sum()) + sp * float(outranking.sum())) - 2 * v * v * k1
    c2 = v * bins * (sn * sn + sp * sp) + v * v * bins * bins
    noise_var = (c0 + c1 * value + c2 * value * value) / (d * d)
    sampling_var = _delong_variance(np.maximum(p, 0.0), np.maximum(n, 0.0))
    z2, num = Z95 * Z95, value * d
    # Fieller: every A with (num - A·d)² <= z²·(noise(A) + d²·sampling)
    bounds = _roots(d * d - z2 * c2, -2 * num * d - z2 * c1,
                    num * num - z2 * (c0 + d * d * sampling_var))
    return _estimate(value, bounds, max(noise_var, 0.0), sampling_var, counts, (sp, sn))


def auroc_from_pairs(pairs: float, pairs_variance: float, malignant: float, benign: float,
                     product_variance: float, counts: Counts) -> BinnedEstimate:
    """The AUROC of the raw scores from a released Mann-Whitney count (what a pooled release
    carries, :mod:`.summary`): ``U / (P·N)`` with ``U`` = ``pairs`` (noise variance
    ``pairs_variance``) and the class totals ``malignant``, ``benign`` (their product's noise
    variance ``product_variance``, independent of ``U``'s); exact in method (no binning). The
    interval is Fieller's on the pivot ``U - A·P·N`` plus DeLong's sampling variance on the
    bins ``counts`` (the raw scores do not leave the aggregator). Informative when ``P·N`` is at
    least :data:`MIN_TOTAL_SD` of its noise standard deviations and the interval is bounded and
    (under noise) at most half the range."""
    if malignant <= 0 or benign <= 0:
        return _undefined(counts)
    d = malignant * benign
    value = pairs / d
    noise_var = (pairs_variance + product_variance * value * value) / (d * d)
    sampling_var = _delong_variance(np.maximum(np.asarray(counts.malignant), 0.0),
                                    np.maximum(np.asarray(counts.benign), 0.0))
    z2 = Z95 * Z95
    bounds = _roots(d * d - z2 * product_variance, -2 * pairs * d,
                    pairs * pairs - z2 * (pairs_variance + d * d * sampling_var))
    return _shown(value, bounds, max(noise_var, 0.0), sampling_var,
                  noisy=pairs_variance > 0 or product_variance > 0,
                  enough=d >= MIN_TOTAL_SD * math.sqrt(product_variance))


def auroc_binning_bound(counts: Counts) -> float:
    """The most the binned AUROC can differ from the AUROC of the raw scores: a pair in one
    bin counts 1/2 where the truth is 0 or 1, so ``Σ_a P_a·N_a / (2·ΣP·ΣN)``; 0 when a class
    is empty.

    On exact counts (an exact release, or a noise source that draws none) this is a bound: the
    raw scores' AUROC is within it of :func:`auroc`'s estimate. On noisy counts it is an
    **estimate** of that bound from the counts clipped at 0, not a bound: clipping turns the
    noise of near-empty cells into positive products, so it mostly overstates the binning
    error (by about ``Σ_a v/(2π) / (2·ΣP·ΣN)`` over empty bins), but nothing guarantees it."""
    p = np.maximum(np.asarray(counts.malignant, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(counts.benign, dtype=np.float64), 0.0)
    total = float(p.sum() * n.sum())
    return 0.0 if total == 0 else float(p @ n) / (2 * total)


# -- sensitivity and specificity ----------------------------------------------------------------


def _proportion(hits: float, misses: float, cells_hit: int, cells_missed: int,
                counts: Counts) -> BinnedEstimate:
    """``hits / (hits + misses)`` of noisy sums over ``cells_hit`` and ``cells_missed`` cells,
    with the interval of every ``p`` where ``(hits - p·total)²`` is within z² of its variance:
    the noise's ``v·(cells_hit·(1-p)² + cells_missed·p²)`` (the delta method's, unlinearised)
    plus the binomial ``total·p(1-p)``: Wilson's score interval when there is no noise."""
    total = hits + misses
    if total <= 0:
        return _undefined(counts)
    value = hits / total
    v, z2 = counts.variance, Z95 * Z95
    m = max(hits, 0.0) + max(misses, 0.0)
    shown = min(max(value, 0.0), 1.0)
    noise_var = v * (cells_hit * (1 - shown) ** 2 + cells_missed * shown ** 2) / total ** 2
    sampling_var = shown * (1 - shown) / max(m, 1.0)
    bounds = _roots(total * total + z2 * m - z2 * v * (cells_hit + cells_missed),
                    -2 * hits * total + 2 * z2 * v * cells_hit - z2 * m,
                    hits * hits - z2 * v * cells_hit)
    return _estimate(value, bounds, noise_var, sampling_var, counts, (total,))


def sensitivity(counts: Counts) -> BinnedEstimate:
    """Malignant cases scored >= 0.5 among the malignant (bins from :data:`THRESHOLD_BIN`)."""
    p = counts.malignant
    return _proportion(sum(p[THRESHOLD_BIN:]), sum(p[:THRESHOLD_BIN]),
                       SCORE_BINS - THRESHOLD_BIN, THRESHOLD_BIN, counts)


def specificity(counts: Counts) -> BinnedEstimate:
    """Benign cases scored < 0.5 among the benign (bins below :data:`THRESHOLD_BIN`)."""
    n = counts.benign
    return _proportion(sum(n[:THRESHOLD_BIN]), sum(n[THRESHOLD_BIN:]),
                       THRESHOLD_BIN, SCORE_BINS - THRESHOLD_BIN, counts)
