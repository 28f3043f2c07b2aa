"""The public summary of a BraTS run: a differentially private release, and the figures and
pooled figures computed from releases alone (``sealbench/brats-summary`` version 3; version 2
still read).

What a release holds (:func:`release_spec`, part of the pin): per region, the sum over cases of
the legacy **Dice** clipped to [0, 1] (failed cases enter with 0, a non-finite value with 0),
with Gaussian noise (:mod:`sealbench.benchmarks.release`); the case count is public; and, since
summary version 3, a private second moment of the headline: the noisy sum over cases of the
square of the case's Dice averaged over regions (:class:`~sealbench.benchmarks.release.Moment`
``dice``, one more unit of sensitivity), so the headline's interval reads the cases' spread from
the data instead of bounding it at the worst case. That is what the leaderboard ranks and shows
(Dice per region and its mean over regions); nothing else leaves the enclave:
no quantile, no exact standard deviation, no histogram (at small n they were the
cases themselves), and no count of failed cases (a model could fail on purpose on one patient).
The hospital's exact figures stay in its sealed per-case results (:mod:`.summary` computes them
for ``result open`` and ``evaluate``).

Figures (:func:`figures`, :func:`pool`): each region's mean is ``sum / n``, unbiased, with a
95% interval adding the release noise to a conservative sampling error
(:func:`sealbench.benchmarks.release.pooled_mean`); the mean over regions adds the three sums
(independent noise), its sampling error estimated from the second moment where every pooled
release carries it (a version 2 summary pooled beside version 3 ones: the bound for all).
Version 2 summaries (no moment) are read against the pin's release without its moment
(:func:`read_spec`) and keep the intervals they were published with.
Pooling adds the sites' sums and noise variances (case-weighted, unbiased).
A figure whose interval spans more than half of [0, 1] is **uninformative**: its value is None
(never shown or ranked) and its interval says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, model_validator

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel
from sealbench.crypto.canonical import canonical_json

from .metrics import CaseFailure, CaseResult, MetricsSpec

__all__ = ["RELEASED_METRIC", "PublishedSummary", "figures", "pool", "pool_releases", "publish",
           "read_spec", "release_spec"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
#: The per-case metric a release carries, per region.
RELEASED_METRIC: Literal["dice"] = "dice"


def release_spec(spec: MetricsSpec, *, epsilon: float = rel.DEFAULT_EPSILON,
                 delta: float = rel.DEFAULT_DELTA) -> rel.ReleaseSpec:
    """Dice per region, clipped to [0, 1], and the second moment of their per-case mean (the
    headline), at ``epsilon``, ``delta`` per release."""
    columns = tuple(rel.Column(f"{RELEASED_METRIC}:{r}", 0.0, 1.0) for r in spec.regions)
    return rel.ReleaseSpec(
        columns=columns, moments=(rel.Moment(RELEASED_METRIC, tuple(c.key for c in columns)),),
        epsilon=epsilon, delta=delta)


def read_spec(summary: PublishedSummary, spec: rel.ReleaseSpec) -> rel.ReleaseSpec:
    """The release a summary of its version was made under, given the pin's own ``spec``:
    version 3 the pin's (with its second moments), version 2 the same without them (read,
    never made)."""
    return spec if summary.version == 3 else replace(spec, moments=())


class PublishedSummary(BaseModel):
    """What a BraTS run publishes (version 3): the metric definition's id and version, the case
    count and the release, which holds the headline's second moment (version 2: none; read).
    Every figure is computed from ``release``. Made without a version, the version is the
    release's (3 with moments, 2 without)."""

    model_config = _FROZEN

    summary_id: Literal["sealbench/brats-summary"] = "sealbench/brats-summary"
    version: Literal[2, 3] = 3
    metrics_id: str
    metrics_version: int
    n_cases: int
    release: rel.Release

    @model_validator(mode="before")
    @classmethod
    def _version_of_release(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" not in data:
            made = data.get("release")
            moments = (made.moments if isinstance(made, rel.Release)
                       else made.get("moments") if isinstance(made, dict) else None)
            data = {**data, "version": 3 if moments else 2}
        return data

    @model_validator(mode="after")
    def _moments_by_version(self) -> PublishedSummary:
        if (self.version == 3) != bool(self.release.moments):
            raise ValueError("a version 3 summary's release holds the headline's second "
                             "moment; a version 2 summary's holds none")
        return self

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
                               rel.pooled_mean([r.column(key) for r in releases], counts,
                                               [r.moment(key) for r in releases])))
        averages = [_average([r.column(f"{metric}:{g}") for g in groups], metric)
                    for r in releases]
        moments = [r.moment(*(f"{metric}:{g}" for g in groups)) for r in releases]
        out.append(_figure(api.MetricRef(metric), rel.pooled_mean(averages, counts, moments)))
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
