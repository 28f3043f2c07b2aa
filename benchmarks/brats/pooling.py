"""Pooling BraTS sites from their public summaries' sufficient statistics (issue 15).

What each pooled figure is, and how exact:

* **Means** (every metric, every region): exact. A site's summary states its case count ``n``
  and each metric's mean, so the pooled mean is ``Σ n·mean / Σ n`` (case-weighted; a site with
  2,000 cases weighs 1,000 times one with 2).
* **Standard deviations**: exact. The centred sum of squares of a site is ``n·std²``
  (population std); sites combine by Chan's parallel formula
  ``M2 = Σ M2_i + Σ n_i·(mean_i - mean)²``, numerically stable where ``Σx² - n·mean²`` is not.
* **95% interval of a region's mean**: normal, ``mean ± 1.96·s/√N`` with ``s`` the pooled sample
  standard deviation (``M2/(N-1)``), clipped to the metric's range; none for ``N < 2``.
* **Mean over regions** (the headline ``dice``): the mean of the region means, exact (a mean of
  per-case averages). Its interval is **conservative**: the summary has no covariances between
  regions, so the standard deviation of a case's region average is bounded by the average of the
  regions' standard deviations (triangle inequality), which the interval uses.
* **Quantiles** (:func:`pooled_quantile`): **binned**. From the sites' small-cell-protected
  histograms, the pooled quantile (numpy's linear definition) is bracketed between two grid
  edges: the bracket always holds the value computed from the raw cases, and its half-width is
  the stated error bound (at most the widest merged cell met, so 0.01 on [0, 1] where no merging
  happened). A site whose histogram was suppressed (too few cases) makes the quantile unavailable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from sealbench.benchmarks import interface as api

from .metrics import MetricsSpec
from .summary import HISTOGRAM_METRICS, METRIC_NAMES, MetricName, PublicSummary

__all__ = ["Moments", "QuantileBracket", "pool", "pooled_moments", "pooled_quantile"]

Z95: Final = 1.959963984540054


@dataclass(frozen=True)
class Moments:
    """Count, mean and centred sum of squares of one metric over pooled cases."""

    n: int
    mean: float
    m2: float

    @property
    def sample_std(self) -> float | None:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else None


@dataclass(frozen=True)
class QuantileBracket:
    """A pooled quantile known to lie in ``[low, high]``: ``value`` is the midpoint and
    ``bound`` the half-width (the largest error of ``value``)."""

    low: float
    high: float

    @property
    def value(self) -> float:
        return (self.low + self.high) / 2

    @property
    def bound(self) -> float:
        return (self.high - self.low) / 2


def pooled_moments(summaries: Sequence[PublicSummary], region: str,
                   metric: MetricName) -> Moments:
    """Exact pooled moments of ``metric`` in ``region`` (``ValueError`` for no summary)."""
    if not summaries:
        raise ValueError("pooling needs at least one summary")
    n = 0
    mean = 0.0
    m2 = 0.0
    for s in summaries:
        stats = s.regions[region][metric]  # type: ignore[index]
        k = s.n_cases
        delta = stats.mean - mean
        total = n + k
        m2 += k * stats.std ** 2 + delta * delta * n * k / total
        mean += delta * k / total
        n = total
    return Moments(n, mean, m2)


def pooled_quantile(summaries: Sequence[PublicSummary], region: str, metric: MetricName,
                    q: float) -> QuantileBracket | None:
    """The bracket holding the pooled ``q``-quantile (linear interpolation) of ``metric`` in
    ``region``; ``None`` when a site's histogram is absent or suppressed."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile needs 0 <= q <= 1, got {q}")
    hists = []
    for s in summaries:
        h = None if s.histograms is None else s.histograms.get(region, {}).get(metric)  # type: ignore[call-overload]
        if h is None:
            return None
        hists.append(h)
    if not hists:
        raise ValueError("pooling needs at least one summary")
    grid = {(h.low, h.high, h.bins) for h in hists}
    if len(grid) != 1:
        raise ValueError("the summaries' histograms are on different grids")
    low, high, bins = grid.pop()
    starts = np.zeros(bins + 1, dtype=np.int64)
    ends = np.zeros(bins + 1, dtype=np.int64)
    for h in hists:
        for first, stop, count in h.cells:
            starts[first] += count
            ends[stop] += count
    total = int(ends.sum())
    # at most U(e) cases lie below edge e (cells starting before it), at least L(e) do
    upper = np.concatenate([[0], np.cumsum(starts)[:-1]])
    lower = np.cumsum(ends)
    position = q * (total - 1)
    r = math.floor(position)
    r_next = min(r + 1, total - 1)
    lo = int(np.searchsorted(upper, r, side="right")) - 1
    hi = int(np.searchsorted(lower, r_next + 1, side="left"))

    def edge(i: int) -> float:
        return float(low + (high - low) * i / bins)

    return QuantileBracket(edge(lo), edge(hi))


def _range(metric: MetricName, spec: MetricsSpec) -> tuple[float, float]:
    if metric in ("hd95", "lesion_hd95"):
        return 0.0, spec.hd95_penalty_mm
    if metric in HISTOGRAM_METRICS:
        return 0.0, 1.0
    return 0.0, math.inf


def _interval(mean: float, std: float | None, n: int,
              bounds: tuple[float, float]) -> tuple[float | None, float | None]:
    if std is None or n < 2:
        return None, None
    half = Z95 * std / math.sqrt(n)
    return max(bounds[0], mean - half), min(bounds[1], mean + half)


def _arrays(summaries: Sequence[PublicSummary], regions: list[str]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Case counts ``(k,)`` and means and population SDs ``(k, regions, metrics)``."""
    counts = np.array([s.n_cases for s in summaries], dtype=np.float64)
    means = np.array([[[s.regions[r][m].mean for m in METRIC_NAMES]  # type: ignore[index]
                       for r in regions] for s in summaries])
    stds = np.array([[[s.regions[r][m].std for m in METRIC_NAMES]  # type: ignore[index]
                      for r in regions] for s in summaries])
    return counts, means, stds


def pool(summaries: Sequence[PublicSummary], spec: MetricsSpec) -> api.PooledFigures:
    """Every metric of every region pooled (case-weighted mean, normal 95% interval, pooled
    sample standard deviation as ``spread``), and each metric's mean over the regions with its
    conservative interval; ``ValueError`` for no summary or summaries of other regions.

    The same combination as :func:`pooled_moments`, for all metrics at once: ``M2 = Σ n_i·std_i²
    + Σ n_i·(mean_i - mean)²`` (two passes, numerically stable)."""
    if not summaries:
        raise ValueError("pooling needs at least one summary")
    regions: list[str] = list(spec.regions)
    if any(set(s.regions) != set(regions) for s in summaries):
        raise ValueError("the summaries do not hold the benchmark's regions")
    counts, means, stds = _arrays(summaries, regions)
    n = int(counts.sum())
    w = counts[:, None, None]
    mean = (w * means).sum(axis=0) / n
    m2 = (w * stds ** 2).sum(axis=0) + (w * (means - mean) ** 2).sum(axis=0)
    sample = np.sqrt(m2 / (n - 1)) if n > 1 else None
    figures: list[api.Figure] = []
    for j, metric in enumerate(METRIC_NAMES):
        bounds = _range(metric, spec)
        for i, region in enumerate(regions):
            value = float(mean[i, j])
            std = None if sample is None else float(sample[i, j])
            low, high = _interval(value, std, n, bounds)
            figures.append(api.Figure(api.MetricRef(metric, region), value, low, high, std))
        average = float(mean[:, j].mean())
        bound = None if sample is None else float(sample[:, j].mean())
        low, high = _interval(average, bound, n, bounds)
        figures.append(api.Figure(api.MetricRef(metric), average, low, high, bound))
    return api.PooledFigures(figures=tuple(figures), n_sites=len(summaries), n_cases=n)
