"""The public summary of a BraTS run: a differentially private release, and the figures and
pooled figures computed from releases alone (``sealbench/brats-summary`` version 2).

What a release holds (:func:`release_spec`, part of the pin): per region, the sum over cases of
the legacy **Dice** clipped to [0, 1] (failed cases enter with 0, a non-finite value with 0),
with Gaussian noise (:mod:`sealbench.benchmarks.release`); the case count is public. That is
what the leaderboard ranks and shows (Dice per region and its mean over regions); nothing else
leaves the enclave: no quantile, no standard deviation, no histogram (at small n they were the
cases themselves), and no count of failed cases (a model could fail on purpose on one patient).
The hospital's exact figures stay in its sealed per-case results (:mod:`.summary` computes them
for ``result open`` and ``evaluate``).

Figures (:func:`figures`, :func:`pool`): each region's mean is ``sum / n``, unbiased, with a
95% interval adding the release noise to a conservative sampling error
(:func:`sealbench.benchmarks.release.pooled_mean`); the mean over regions adds the three sums
(independent noise). Pooling adds the sites' sums and noise variances (case-weighted, unbiased).
A figure whose interval spans more than half of [0, 1] is **uninformative**: its value is None
(never shown or ranked) and its interval says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel
from sealbench.crypto.canonical import canonical_json

from .metrics import CaseFailure, CaseResult, MetricsSpec

__all__ = ["RELEASED_METRIC", "PublishedSummary", "figures", "pool", "pool_releases", "publish",
           "release_spec"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
#: The per-case metric a release carries, per region.
RELEASED_METRIC: Literal["dice"] = "dice"


def release_spec(spec: MetricsSpec, *, epsilon: float = rel.DEFAULT_EPSILON,
                 delta: float = rel.DEFAULT_DELTA) -> rel.ReleaseSpec:
    """Dice per region, clipped to [0, 1], at ``epsilon``, ``delta`` per release."""
    return rel.ReleaseSpec(
        columns=tuple(rel.Column(f"{RELEASED_METRIC}:{r}", 0.0, 1.0) for r in spec.regions),
        epsilon=epsilon, delta=delta)


class PublishedSummary(BaseModel):
    """What a BraTS run publishes (version 2): the metric definition's id and version, the case
    count and the release. Every figure is computed from ``release``."""

    model_config = _FROZEN

    summary_id: Literal["sealbench/brats-summary"] = "sealbench/brats-summary"
    version: Literal[2] = 2
    metrics_id: str
    metrics_version: int
    n_cases: int
    release: rel.Release

    def to_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")

    def to_canonical_json(self) -> bytes:
        return canonical_json(self.model_dump(mode="json"))


def contributions(results: Sequence[CaseResult], spec: MetricsSpec) -> npt.NDArray[np.float64]:
    """One row per case: its Dice per region (a failure's penalty, 0; non-finite: 0)."""
    rows = np.zeros((len(results), len(spec.regions)), dtype=np.float64)
    for i, result in enumerate(results):
        scores = (result.penalised(spec) if isinstance(result, CaseFailure)
                  else result.regions)
        for j, region in enumerate(spec.regions):
            value = float(getattr(scores[region], RELEASED_METRIC))
            rows[i, j] = value if math.isfinite(value) else 0.0
    return rows


def publish(results: Sequence[CaseResult], spec: MetricsSpec, release: rel.ReleaseSpec,
            noise: rel.NoiseSource) -> PublishedSummary:
    """The public summary of ``results``: one release (``ValueError`` for no results)."""
    if not results:
        raise ValueError("cannot summarise zero cases")
    made = rel.release(contributions(results, spec), release, noise)
    return PublishedSummary(metrics_id=spec.metrics_id, metrics_version=spec.version,
                            n_cases=made.n_cases, release=made)


def _figure(ref: api.MetricRef, estimate: rel.Estimate) -> api.Figure:
    value = estimate.shown if estimate.informative else None
    return api.Figure(ref, value, estimate.low, estimate.high)


def _average(columns: Sequence[rel.ReleasedColumn], metric: str = RELEASED_METRIC,
             ) -> rel.ReleasedColumn:
    """The per-case mean over regions as one column: sums average, independent noise adds."""
    k = len(columns)
    return rel.ReleasedColumn(key=metric, low=0.0, high=1.0,
                              sum=sum(c.sum for c in columns) / k,
                              sd=math.sqrt(sum(c.sd ** 2 for c in columns)) / k)


def _figures(releases: Sequence[rel.Release], groups: Sequence[str],
             metrics: Sequence[str] = (RELEASED_METRIC,)) -> list[api.Figure]:
    """Per metric: its figure per group, then its mean over the groups (no group)."""
    counts = [r.n_cases for r in releases]
    out: list[api.Figure] = []
    for metric in metrics:
        for group in groups:
            key = f"{metric}:{group}"
            out.append(_figure(api.MetricRef(metric, group),
                               rel.pooled_mean([r.column(key) for r in releases], counts)))
        averages = [_average([r.column(f"{metric}:{g}") for g in groups], metric)
                    for r in releases]
        out.append(_figure(api.MetricRef(metric), rel.pooled_mean(averages, counts)))
    return out


def figures(summary: PublishedSummary, spec: MetricsSpec) -> tuple[api.Figure, ...]:
    """The summary's own figures (one site)."""
    return tuple(_figures([summary.release], spec.regions))


def pool_releases(summaries: Sequence[PublishedSummary], groups: Sequence[str],
                  metrics: Sequence[str] = (RELEASED_METRIC,)) -> api.PooledFigures:
    """Every group's figure of each metric, and each metric's mean over groups, pooled over
    sites (case-weighted, unbiased, with intervals from sampling and every site's noise);
    ``ValueError`` for no summary or releases of different content."""
    if not summaries:
        raise ValueError("pooling needs at least one summary")
    first = summaries[0].release
    shapes = {tuple((c.key, c.low, c.high) for c in s.release.columns) for s in summaries}
    if len(shapes) != 1 or any(s.release.exact != first.exact for s in summaries):
        raise ValueError("the summaries release different content")
    releases = [s.release for s in summaries]
    return api.PooledFigures(figures=tuple(_figures(releases, groups, metrics)),
                             n_sites=len(summaries), n_cases=sum(r.n_cases for r in releases))


def pool(summaries: Sequence[PublishedSummary], spec: MetricsSpec) -> api.PooledFigures:
    """Every region's Dice and their mean pooled over sites (:func:`pool_releases`)."""
    return pool_releases(summaries, spec.regions)
