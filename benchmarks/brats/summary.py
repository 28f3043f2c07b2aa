"""The public summary of a run: aggregates over cases only, never a per-case value.

Failed cases (:class:`CaseFailure`) enter every aggregate with their penalised scores and are
counted; a non-finite value, which :func:`score_case` never produces but a corrupted result
could, is replaced by the metric's worst value and counted, never dropped. Quantiles use
numpy's default (linear) interpolation. The summary is canonical-JSON serialisable
(:meth:`PublicSummary.to_canonical_json`): every float is finite.

Sufficient statistics for pooling sites (issue 15, :mod:`.pooling`): every metric's ``mean``,
``std`` (population) and the case count ``n_cases`` are its moments (count, sum = n·mean, centred
sum of squares = n·std²), so pooled means and variances are exact. For quantiles each bounded
metric also carries a **fixed-bin histogram** (:class:`Histogram`: ``HISTOGRAM_BINS`` equal bins
on ``[0, 1]``, or ``[0, hd95_penalty_mm]`` for the distances; values outside are clipped).
Small-cell protection: no published bin holds fewer than ``min_count`` cases. Adjacent bins are
**merged** (from the low end up, empty bins folded into the next occupied one) until each merged
cell reaches the minimum; a remainder under it joins the last cell; a histogram whose whole
count is under the minimum is **suppressed** (``None``). Only occupied cells are listed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sealbench.crypto.canonical import canonical_json

from .contract import Region
from .metrics import CaseFailure, CaseResult, MetricsSpec, RegionScores

__all__ = [
    "HISTOGRAM_BINS",
    "HISTOGRAM_METRICS",
    "HISTOGRAM_MIN_COUNT",
    "METRIC_NAMES",
    "Histogram",
    "MetricStats",
    "PublicSummary",
    "aggregate",
    "histogram",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

MetricName = Literal["dice", "hd95", "sensitivity", "specificity", "lesion_dice", "lesion_hd95",
                     "num_tp", "num_fp", "num_fn"]
METRIC_NAMES: tuple[MetricName, ...] = ("dice", "hd95", "sensitivity", "specificity",
                                        "lesion_dice", "lesion_hd95", "num_tp", "num_fp",
                                        "num_fn")
#: Metrics with a bounded range that carry a histogram (the lesion counts carry moments only).
HISTOGRAM_METRICS: tuple[MetricName, ...] = ("dice", "hd95", "sensitivity", "specificity",
                                             "lesion_dice", "lesion_hd95")
#: Equal bins of each histogram (width 0.01 on [0, 1]; 3.74 mm on [0, 374] mm).
HISTOGRAM_BINS = 100
#: Fewest cases a published histogram cell may hold (small-cell protection).
HISTOGRAM_MIN_COUNT = 3


class MetricStats(BaseModel):
    """Distribution of one metric of one region over the cases."""

    model_config = _FROZEN

    mean: float
    std: float
    median: float
    q25: float
    q75: float
    nonfinite_replaced: int


class Histogram(BaseModel):
    """Counts of one metric on a fixed grid of ``bins`` equal bins over ``[low, high]``, bins
    merged so that each listed cell ``(first_bin, end_bin, count)`` (bins ``first_bin`` to
    ``end_bin - 1``) holds at least ``min_count`` cases; unlisted bins are empty."""

    model_config = _FROZEN

    low: float
    high: float
    bins: int = Field(ge=1, le=10_000)
    min_count: int = Field(ge=1)
    cells: tuple[tuple[int, int, int], ...]

    @model_validator(mode="after")
    def _cells_ordered(self) -> Histogram:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError("a histogram needs a finite range low < high")
        end = 0
        for first, stop, count in self.cells:
            if not end <= first < stop <= self.bins:
                raise ValueError("histogram cells must be ordered, disjoint and on the grid")
            if count < self.min_count:
                raise ValueError(f"a histogram cell holds {count} cases, under the minimum "
                                 f"{self.min_count}")
            end = stop
        return self

    @property
    def total(self) -> int:
        return sum(count for _, _, count in self.cells)

    def edge(self, index: int) -> float:
        """The value at grid edge ``index`` (0 to ``bins``)."""
        return self.low + (self.high - self.low) * index / self.bins


def histogram(values: npt.NDArray[np.float64], low: float, high: float, *,
              bins: int = HISTOGRAM_BINS, min_count: int = HISTOGRAM_MIN_COUNT
              ) -> Histogram | None:
    """The small-cell-protected histogram of ``values`` (``None``: fewer than ``min_count``)."""
    clipped = np.clip(values, low, high)
    index = np.minimum(((clipped - low) / (high - low) * bins).astype(np.int64), bins - 1)
    counts = np.bincount(index, minlength=bins)
    cells: list[list[int]] = []
    start, held = -1, 0
    for i, count in enumerate(counts.tolist()):
        if count == 0:
            continue
        if start < 0:
            start = i if not cells else cells[-1][1]
        held += count
        if held >= min_count:
            cells.append([start, i + 1, held])
            start, held = -1, 0
    if held:
        if not cells:
            return None
        cells[-1][1] = int(np.flatnonzero(counts)[-1]) + 1
        cells[-1][2] += held
    return Histogram(low=low, high=high, bins=bins, min_count=min_count,
                     cells=tuple((a, b, c) for a, b, c in cells))


class PublicSummary(BaseModel):
    """Aggregates of one run, safe to publish (version 1)."""

    model_config = _FROZEN

    summary_id: Literal["sealbench/brats-summary"] = "sealbench/brats-summary"
    version: Literal[1] = 1
    metrics_id: str
    metrics_version: int
    n_cases: int
    n_scored: int
    n_failed: int
    n_nonfinite_cases: int
    regions: dict[Region, dict[MetricName, MetricStats]]
    #: Per region, the histograms of :data:`HISTOGRAM_METRICS` (a suppressed one is ``None``);
    #: absent in summaries from before issue 15.
    histograms: dict[Region, dict[MetricName, Histogram | None]] | None = None

    def to_json(self) -> dict[str, object]:
        """The summary as a JSON object (every float finite)."""
        return self.model_dump(mode="json")

    def to_canonical_json(self) -> bytes:
        """Canonical JSON bytes (what attestation nonces and audit hashes cover)."""
        return canonical_json(self.model_dump(mode="json"))


def _worst(metric: MetricName, spec: MetricsSpec) -> float:
    return spec.hd95_penalty_mm if metric in ("hd95", "lesion_hd95") else 0.0


def _upper(metric: MetricName, spec: MetricsSpec) -> float:
    """The top of ``metric``'s histogram range."""
    return spec.hd95_penalty_mm if metric in ("hd95", "lesion_hd95") else 1.0


def aggregate(results: Sequence[CaseResult], spec: MetricsSpec) -> PublicSummary:
    """Aggregate per-case results into a :class:`PublicSummary`.

    Raises ``ValueError`` for an empty sequence (there is nothing to summarise)."""
    if not results:
        raise ValueError("cannot aggregate zero cases")
    rows: list[dict[Region, RegionScores]] = []
    n_failed = 0
    for result in results:
        if isinstance(result, CaseFailure):
            n_failed += 1
            rows.append(result.penalised(spec))
        else:
            rows.append(result.regions)
    nonfinite_cases: set[int] = set()
    regions: dict[Region, dict[MetricName, MetricStats]] = {}
    histograms: dict[Region, dict[MetricName, Histogram | None]] = {}
    for region in spec.regions:
        stats: dict[MetricName, MetricStats] = {}
        hists: dict[MetricName, Histogram | None] = {}
        for metric in METRIC_NAMES:
            values = np.empty(len(rows), dtype=np.float64)
            replaced = 0
            for i, row in enumerate(rows):
                value = float(getattr(row[region], metric))
                if not math.isfinite(value):
                    value = _worst(metric, spec)
                    replaced += 1
                    nonfinite_cases.add(i)
                values[i] = value
            q25, median, q75 = np.quantile(values, [0.25, 0.5, 0.75])
            stats[metric] = MetricStats(mean=float(values.mean()), std=float(values.std()),
                                        median=float(median), q25=float(q25), q75=float(q75),
                                        nonfinite_replaced=replaced)
            if metric in HISTOGRAM_METRICS:
                hists[metric] = histogram(values, 0.0, _upper(metric, spec))
        regions[region] = stats
        histograms[region] = hists
    return PublicSummary(metrics_id=spec.metrics_id, metrics_version=spec.version,
                         n_cases=len(results), n_scored=len(results) - n_failed,
                         n_failed=n_failed, n_nonfinite_cases=len(nonfinite_cases),
                         regions=regions, histograms=histograms)
