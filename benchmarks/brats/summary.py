"""The public summary of a run: aggregates over cases only, never a per-case value.

Failed cases (:class:`CaseFailure`) enter every aggregate with their penalised scores and are
counted; a non-finite value, which :func:`score_case` never produces but a corrupted result
could, is replaced by the metric's worst value and counted, never dropped. Quantiles use
numpy's default (linear) interpolation. The summary is canonical-JSON serialisable
(:meth:`PublicSummary.to_canonical_json`): every float is finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from sealbench.crypto.canonical import canonical_json

from .contract import Region
from .metrics import CaseFailure, CaseResult, MetricsSpec, RegionScores

__all__ = ["METRIC_NAMES", "MetricStats", "PublicSummary", "aggregate"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

MetricName = Literal["dice", "hd95", "sensitivity", "specificity", "lesion_dice", "lesion_hd95",
                     "num_tp", "num_fp", "num_fn"]
METRIC_NAMES: tuple[MetricName, ...] = ("dice", "hd95", "sensitivity", "specificity",
                                        "lesion_dice", "lesion_hd95", "num_tp", "num_fp",
                                        "num_fn")


class MetricStats(BaseModel):
    """Distribution of one metric of one region over the cases."""

    model_config = _FROZEN

    mean: float
    std: float
    median: float
    q25: float
    q75: float
    nonfinite_replaced: int


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

    def to_json(self) -> dict[str, object]:
        """The summary as a JSON object (every float finite)."""
        return self.model_dump(mode="json")

    def to_canonical_json(self) -> bytes:
        """Canonical JSON bytes (what attestation nonces and audit hashes cover)."""
        return canonical_json(self.model_dump(mode="json"))


def _worst(metric: MetricName, spec: MetricsSpec) -> float:
    return spec.hd95_penalty_mm if metric in ("hd95", "lesion_hd95") else 0.0


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
    for region in spec.regions:
        stats: dict[MetricName, MetricStats] = {}
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
        regions[region] = stats
    return PublicSummary(metrics_id=spec.metrics_id, metrics_version=spec.version,
                         n_cases=len(results), n_scored=len(results) - n_failed,
                         n_failed=n_failed, n_nonfinite_cases=len(nonfinite_cases),
                         regions=regions)
