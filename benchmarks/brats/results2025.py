"""The per-case results and the release of the BraTS 2025 pins (``brats-2025-gli/1``,
``brats-2025-met/1``).

A case's result (:class:`CaseScores2025`, kind ``scores-2025``) holds, per group, the official
evaluator's dictionary as typed fields (:class:`GroupScores2025`): what
:func:`.scoring2025.score_case` returns, so a hospital's sealed per-case results compare key by
key with ``BraTS_evaluation``'s. Non-finite values (NaN when neither side has an instance, inf
for HD95 when nothing is matched) travel as the JSON strings ``"NaN"`` and ``"Infinity"``
(canonical JSON has no NaN). A failed case is the 2023 pins' :class:`~.metrics.CaseFailure`.

The release (:func:`release_spec`, part of the pin; metric definition version 2) carries per
group the sum over cases of the global Dice (``global_bin_dsc``) and of the panoptic quality
(``pq_dsc`` = mean matched-instance Dice x F1 of detection), each clipped to [0, 1], and the
count of the cases where the group is **defined** (``defined:<group>``, an indicator in [0, 1]:
something in truth or prediction). A group with nothing on either side (official value NaN)
adds 0 to both sums and 0 to the count, so a published mean is ``sum / count``
(:func:`sealbench.benchmarks.release.ratio_mean`): the official parser's mean, which skips NaN.
A failed case enters as the parser enters a missing subject: 0 in every group, counted. Each
count column is one more unit of L2 sensitivity (18 columns for ``gli``, 12 for ``met``). A
metric's mean over groups is the mean of the groups' means
(:func:`~sealbench.benchmarks.release.average_of`).

The headline metric (``pq_dsc``) also carries, per group, a private second moment (summary
version 3: :class:`~sealbench.benchmarks.release.Moment` ``pq_dsc:<group>``, the noisy sum of
the squared value, 0 where undefined, so over the defined cases): each is one more unit of
sensitivity (24 for ``gli``, 16 for ``met``) and lets each group's interval read the defined
cases' spread from the data instead of bounding it at the worst case
(:func:`~sealbench.benchmarks.release.ratio_mean`). A summary of version 2 (no moments) is
still read, and pooled beside version 3 ones with the bound for all.

Version 1 (summaries published before) counted a group undefined for a case as 1, "nothing to
find, nothing found", and had no count columns: :func:`release_spec_v1` still reads them, with
their figures as they were published. A board that holds both (sites not yet rerun) pools
them on version 1's scale (:func:`figures_as_v1`: a version 2 release's sum plus its count of
undefined cases, ``n - count``, is version 1's sum, unbiased, its noise variance the two
columns' added) until every site's latest result is of version 2; it never shrinks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Self

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, model_validator

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel

from .metrics import CaseFailure
from .scoring2025 import OFFICIAL_HD95_PENALTY, Scoring2025

__all__ = [
    "DEFINED",
    "HEADLINE_2025",
    "RELEASED_2025",
    "CaseResult2025",
    "CaseScores2025",
    "GroupScores2025",
    "InstanceRow2025",
    "Metrics2025",
    "contributions",
    "figures",
    "figures_as_v1",
    "release_spec",
    "release_spec_v1",
]

_MODEL = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")
#: The per-case figures a release carries, per group: global Dice and panoptic quality.
RELEASED_2025: tuple[str, str] = ("dsc", "pq_dsc")
_RELEASED_FIELD = {"dsc": "global_bin_dsc", "pq_dsc": "pq_dsc"}
#: The count column's prefix: ``defined:<group>``, the cases where the group is defined.
DEFINED: Final = "defined"
#: The headline metric, whose groups' releases carry a second moment (summary version 3).
HEADLINE_2025: Final = "pq_dsc"


class InstanceRow2025(BaseModel):
    """One reference instance: matched (with its pair's figures) or missed."""

    model_config = _MODEL

    sq_dsc: float | None = None
    sq_hd95: float | None = None
    sq_nsd: float | None = None
    voxel_count: int
    volume: float
    is_matched: Literal[0, 1]


class GroupScores2025(BaseModel):
    """One group's official figures (``PanopticaResult.to_dict(True)``; ``prec`` / ``rec`` are
    absent there, None here, when nothing was predicted / nothing is in the truth)."""

    model_config = _MODEL

    n_ref_instances: int
    n_pred_instances: int
    tp: int
    fp: int
    fn: int
    prec: float | None = None
    rec: float | None = None
    rq: float
    sq_dsc: float
    sq_dsc_std: float
    pq_dsc: float
    sq_hd95: float
    sq_hd95_std: float
    sq_nsd: float
    sq_nsd_std: float
    instance_voxel_count_ref: float
    instance_volume_ref: float
    global_bin_volume_pred: int
    global_bin_volume_ref: int
    global_bin_dsc: float
    global_bin_hd95: float
    global_bin_nsd: float
    reference_instances: tuple[InstanceRow2025, ...]

    def official(self) -> dict[str, Any]:
        """The dictionary as the official evaluator writes it (keys in its order)."""
        out = self.model_dump(exclude={"reference_instances"})
        for key in ("prec", "rec"):
            if out[key] is None:
                del out[key]
        out["reference_instances"] = [r.model_dump(exclude_none=True)
                                      for r in self.reference_instances]
        return out


class CaseScores2025(BaseModel):
    """One case's figures per group, under one official task configuration."""

    model_config = _MODEL

    kind: Literal["scores-2025"] = "scores-2025"
    case_id: str
    task: str
    groups: dict[str, GroupScores2025]

    @property
    def failed(self) -> bool:
        """False: the case was scored."""
        return False

    def to_json(self) -> dict[str, object]:
        """The result as a JSON object (non-finite values as ``"NaN"`` / ``"Infinity"``)."""
        doc: dict[str, object] = json.loads(self.model_dump_json())
        return doc

    @classmethod
    def from_official(cls, case_id: str, task: str,
                      groups: Mapping[str, Mapping[str, Any]]) -> CaseScores2025:
        return cls(case_id=case_id, task=task,
                   groups={g: GroupScores2025.model_validate(dict(v)) for g, v in groups.items()})


CaseResult2025 = CaseScores2025 | CaseFailure


class Metrics2025(BaseModel):
    """The metric definition a 2025 pin publishes: the official configuration it reproduces and
    what its release carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics_id: Literal["sealbench/brats-2025"] = "sealbench/brats-2025"
    #: 2: a group undefined for a case is left out of its mean (the official parser's rule);
    #: 1 (read, never made): it was counted as ``released_when_nothing_either_side``.
    version: Literal[1, 2] = 2
    task: str
    source: str
    groups: dict[str, tuple[int, ...]]
    matching: str
    matching_threshold: float
    instance_metrics: tuple[str, ...] = ("dsc", "nsd", "hd95")
    global_metrics: tuple[str, ...] = ("dsc", "nsd", "hd95")
    zero_match_rules: dict[str, dict[str, str]]
    hd95_reported_penalty_mm: float = OFFICIAL_HD95_PENALTY
    released: tuple[str, ...] = RELEASED_2025
    released_when_nothing_either_side: float | None = None

    @model_validator(mode="after")
    def _undefined_rule(self) -> Self:
        if (self.version == 1) != (self.released_when_nothing_either_side == 1.0):
            raise ValueError("version 1 counts an undefined group as 1.0; version 2 leaves it "
                             "out of the mean (no value)")
        return self

    @classmethod
    def of(cls, config: Scoring2025) -> Metrics2025:
        rules = {metric: {situation: str(getattr(rule, situation)) for situation in
                          ("no_instances", "empty_prediction", "empty_reference", "normal")}
                 for metric, rule in config.rules.items()}
        return cls(task=config.task, source=config.source,
                   groups={g.name: g.labels for g in config.groups},
                   matching="maximum bipartite matching on Dice (26-connected components)",
                   matching_threshold=config.matching_threshold, zero_match_rules=rules)


def release_spec(config: Scoring2025, *, epsilon: float = rel.DEFAULT_EPSILON,
                 delta: float = rel.DEFAULT_DELTA) -> rel.ReleaseSpec:
    """Per group, global Dice and panoptic quality clipped to [0, 1] (0 where the group is
    undefined), then per group the indicator that it is defined; and per group the second
    moment of the headline (:data:`HEADLINE_2025`, panoptic quality)."""
    return rel.ReleaseSpec(
        columns=tuple(rel.Column(f"{metric}:{g.name}", 0.0, 1.0)
                      for metric in (*RELEASED_2025, DEFINED) for g in config.groups),
        moments=tuple(rel.Moment(f"{HEADLINE_2025}:{g.name}", (f"{HEADLINE_2025}:{g.name}",))
                      for g in config.groups),
        epsilon=epsilon, delta=delta)


def release_spec_v1(config: Scoring2025, *, epsilon: float = rel.DEFAULT_EPSILON,
                    delta: float = rel.DEFAULT_DELTA) -> rel.ReleaseSpec:
    """Version 1's release (read only): global Dice and panoptic quality per group, an
    undefined group counted as 1, no count columns."""
    return rel.ReleaseSpec(
        columns=tuple(rel.Column(f"{metric}:{g.name}", 0.0, 1.0)
                      for metric in RELEASED_2025 for g in config.groups),
        epsilon=epsilon, delta=delta)


def contributions(results: Sequence[CaseResult2025], config: Scoring2025,
                  ) -> npt.NDArray[np.float64]:
    """One row per case, in :func:`release_spec`'s column order. A group is defined for a case
    when its global Dice is not NaN (the official rules make Dice and PQ NaN together: nothing
    in truth or prediction); a defined group adds its values clipped to [0, 1] and 1 to its
    count, an undefined one 0 and 0. A failure adds 0 and is counted in every group, as the
    official parser counts a missing subject."""
    groups = [g.name for g in config.groups]
    k = len(groups)
    rows = np.zeros((len(results), 3 * k), dtype=np.float64)
    for i, result in enumerate(results):
        if isinstance(result, CaseFailure):
            rows[i, 2 * k:] = 1.0
            continue
        for j, group in enumerate(groups):
            scores = result.groups[group]
            dsc, defined = rel.defined_value(float(scores.global_bin_dsc), 0.0, 1.0)
            pq = float(scores.pq_dsc)
            rows[i, j] = dsc
            rows[i, k + j] = 0.0 if math.isnan(pq) else min(max(pq, 0.0), 1.0) * defined
            rows[i, 2 * k + j] = defined
    return rows


def _figure(ref: api.MetricRef, estimate: rel.Estimate) -> api.Figure:
    value = estimate.shown if estimate.informative else None
    return api.Figure(ref, value, estimate.low, estimate.high)


def figures(releases: Sequence[rel.Release], groups: Sequence[str]) -> list[api.Figure]:
    """Per metric, each group's mean over the cases where it is defined
    (:func:`~sealbench.benchmarks.release.ratio_mean` of the releases' pooled sums and counts),
    then the mean of the groups' means (no group): what the official parser's means give, and
    their unweighted mean (a group that no case defines, known from an exact release, left
    out of it as the parser leaves out a NaN). ``ValueError`` for a release without count
    columns (version 1: read it through :func:`.published.pool_releases`)."""
    if not releases:
        raise ValueError("figures need at least one release")
    counts = [r.n_cases for r in releases]
    out: list[api.Figure] = []
    for metric in RELEASED_2025:
        estimates = []
        for group in groups:
            try:
                values = [r.column(f"{metric}:{group}") for r in releases]
                defined = [r.column(f"{DEFINED}:{group}") for r in releases]
            except KeyError as exc:
                raise ValueError(f"a release lacks the column {exc}") from None
            moments = [r.moment(f"{metric}:{group}") for r in releases]
            estimate = rel.ratio_mean(values, defined, counts, moments)
            out.append(_figure(api.MetricRef(metric, group), estimate))
            # a group defined for no case has no mean (the parser's NaN) and, known exactly,
            # is left out of the mean over groups; under noise its count is never known to be 0
            if not (all(r.exact for r in releases) and sum(c.sum for c in defined) == 0):
                estimates.append(estimate)
        average = (rel.average_of(estimates) if estimates
                   else rel.Estimate(0.5, 0.0, 1.0, math.inf, math.inf, sum(counts), (0.0, 1.0)))
        out.append(_figure(api.MetricRef(metric), average))
    return out


def _as_v1(release: rel.Release, metric: str, group: str) -> rel.ReleasedColumn:
    """A release's ``metric:group`` column on version 1's scale (an undefined case counted
    as 1): a version 2 release's sum plus its undefined cases ``n - defined`` (noise variances
    add), a version 1 release's column as it is."""
    column = release.column(f"{metric}:{group}")
    try:
        defined = release.column(f"{DEFINED}:{group}")
    except KeyError:
        return column
    return rel.ReleasedColumn(key=column.key, low=0.0, high=1.0,
                              sum=column.sum + release.n_cases - defined.sum,
                              sd=math.sqrt(column.sd ** 2 + defined.sd ** 2))


def figures_as_v1(releases: Sequence[rel.Release], groups: Sequence[str]) -> list[api.Figure]:
    """Releases of both versions pooled on version 1's scale (an undefined group counted as 1,
    the per-case mean over groups as the headline), as version 1's summaries were published:
    each mean ``sum / n`` with :func:`~sealbench.benchmarks.release.pooled_mean`'s interval."""
    if not releases:
        raise ValueError("figures need at least one release")
    counts = [r.n_cases for r in releases]
    out: list[api.Figure] = []
    for metric in RELEASED_2025:
        try:
            per_group = {g: [_as_v1(r, metric, g) for r in releases] for g in groups}
        except KeyError as exc:
            raise ValueError(f"a release lacks the column {exc}") from None
        for group in groups:
            out.append(_figure(api.MetricRef(metric, group),
                               rel.pooled_mean(per_group[group], counts)))
        k = len(groups)
        averages = [rel.ReleasedColumn(
            key=metric, low=0.0, high=1.0,
            sum=math.fsum(per_group[g][i].sum for g in groups) / k,
            sd=math.sqrt(math.fsum(per_group[g][i].sd ** 2 for g in groups)) / k)
            for i in range(len(releases))]
        out.append(_figure(api.MetricRef(metric), rel.pooled_mean(averages, counts)))
    return out
