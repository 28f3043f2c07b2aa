"""Per-case results (sealed to the data owner) and the public summary of a WDBC run.

A case's result is its label and the model's P(malignant), or a flagged failure with its
reason. **Failures are penalised, never dropped**: a case whose label is known (its inference
failed or gave no probability) enters every metric with the worst score, 0 for a malignant case
and 1 for a benign one; a case that could not even be loaded has no label, so it is counted in
``n_failed`` and ``n_unlabelled`` and cannot enter a metric (prepared datasets are validated
and authenticated, so this takes a damaged preparation).

The summary (``sealbench/wdbc-summary`` version 1, canonical JSON) holds dataset-level figures
only (:mod:`.metrics`): AUROC with its DeLong 95% interval, sensitivity and specificity at the
benchmark's threshold with Wilson intervals, Brier score, the reliability table with ECE and
the calibration slope and intercept, and the pooling statistics (per-class score histograms on
a fixed grid, confusion counts, squared-error sum) from which :func:`pool` combines sites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.benchmarks.interface import (
    Figure,
    JsonObject,
    MetricRef,
    PooledFigures,
    SummaryError,
)
from sealbench.crypto.canonical import canonical_json

from . import metrics as m

__all__ = [
    "SUMMARY_ID",
    "THRESHOLD",
    "CalibrationSummary",
    "ProportionSummary",
    "WdbcCaseResult",
    "WdbcSummary",
    "figures",
    "parse_case_result",
    "parse_summary",
    "pool",
    "summarise",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
SUMMARY_ID: Final = "sealbench/wdbc-summary"
#: The benchmark's fixed operating threshold on P(malignant).
THRESHOLD: Final = 0.5
_MAX_DOC: Final = 1 << 20


class WdbcCaseResult(BaseModel):
    """One case's private result: label and score, or a failure and its reason."""

    model_config = _FROZEN

    case_id: str
    malignant: bool | None
    score: float | None
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.score is None

    def penalised_score(self) -> float | None:
        """The score the metrics use: the model's, or the worst one for a failed case."""
        if self.score is not None:
            return self.score
        if self.malignant is None:
            return None
        return 0.0 if self.malignant else 1.0

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="json")


class AurocSummary(BaseModel):
    model_config = _FROZEN

    method: Literal["delong"] = "delong"
    value: float | None
    ci_low: float | None
    ci_high: float | None
    std_error: float | None


class ProportionSummary(BaseModel):
    model_config = _FROZEN

    method: Literal["wilson"] = "wilson"
    value: float | None
    ci_low: float | None
    ci_high: float | None
    successes: int
    trials: int


class CalibrationBinSummary(BaseModel):
    model_config = _FROZEN

    low: float
    high: float
    n: int
    mean_score: float | None
    observed: float | None


class CalibrationSummary(BaseModel):
    model_config = _FROZEN

    bins: tuple[CalibrationBinSummary, ...]
    ece: float
    slope: float | None
    intercept: float | None


class PoolingSummary(BaseModel):
    """Sufficient statistics for pooling (see :class:`.metrics.PoolingStatistics`)."""

    model_config = _FROZEN

    bins: int
    positives: tuple[int, ...]
    negatives: tuple[int, ...]
    positive_score_sums: tuple[float, ...]
    negative_score_sums: tuple[float, ...]
    tp: int
    fp: int
    tn: int
    fn: int
    squared_error_sum: float


class WdbcSummary(BaseModel):
    """The public summary of one run (version 1)."""

    model_config = _FROZEN

    summary_id: Literal["sealbench/wdbc-summary"] = "sealbench/wdbc-summary"
    version: Literal[1] = 1
    plugin: str
    n_cases: int
    n_scored: int
    n_failed: int
    n_unlabelled: int
    n_malignant: int
    n_benign: int
    threshold: float
    auroc: AurocSummary
    sensitivity: ProportionSummary
    specificity: ProportionSummary
    brier: float | None
    calibration: CalibrationSummary | None
    pooling: PoolingSummary | None

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="json")

    def to_canonical_json(self) -> bytes:
        return canonical_json(self.to_json())


def _proportion(p: m.Proportion) -> ProportionSummary:
    return ProportionSummary(value=p.value, ci_low=p.ci_low, ci_high=p.ci_high,
                             successes=p.successes, trials=p.trials)


def summarise(results: Sequence[Any], plugin: str, threshold: float = THRESHOLD) -> WdbcSummary:
    """The public summary of every case's result (``ValueError`` for none)."""
    if not results:
        raise ValueError("cannot summarise zero cases")
    rows = [r if isinstance(r, WdbcCaseResult) else WdbcCaseResult.model_validate(r.to_json())
            for r in results]
    labelled = [(r.malignant, r.penalised_score()) for r in rows if r.malignant is not None]
    y = np.array([1.0 if label else 0.0 for label, _ in labelled])
    p = np.array([score for _, score in labelled], dtype=np.float64)
    n_failed = sum(r.failed for r in rows)
    n_malignant = int(y.sum())
    common: dict[str, Any] = {
        "plugin": plugin, "n_cases": len(rows), "n_scored": len(rows) - n_failed,
        "n_failed": n_failed, "n_unlabelled": len(rows) - len(labelled),
        "n_malignant": n_malignant, "n_benign": len(labelled) - n_malignant,
        "threshold": threshold}
    if not labelled:
        empty = ProportionSummary(value=None, ci_low=None, ci_high=None, successes=0, trials=0)
        return WdbcSummary(
            **common, auroc=AurocSummary(value=None, ci_low=None, ci_high=None, std_error=None),
            sensitivity=empty, specificity=empty, brier=None, calibration=None, pooling=None)
    auc = m.auroc(y, p)
    cal = m.calibration(y, p)
    stats = m.pooling_statistics(y, p, threshold)
    c = stats.confusion
    return WdbcSummary(
        **common,
        auroc=AurocSummary(value=auc.value, ci_low=auc.ci_low, ci_high=auc.ci_high,
                           std_error=auc.std_error),
        sensitivity=_proportion(c.sensitivity),
        specificity=_proportion(c.specificity),
        brier=m.brier_score(y, p),
        calibration=CalibrationSummary(
            bins=tuple(CalibrationBinSummary(low=b.low, high=b.high, n=b.n,
                                             mean_score=b.mean_score, observed=b.observed)
                       for b in cal.bins),
            ece=cal.ece, slope=cal.slope, intercept=cal.intercept),
        pooling=PoolingSummary(
            bins=stats.bins, positives=stats.positives, negatives=stats.negatives,
            positive_score_sums=stats.positive_score_sums,
            negative_score_sums=stats.negative_score_sums,
            tp=c.tp, fp=c.fp, tn=c.tn, fn=c.fn, squared_error_sum=stats.squared_error_sum),
    )


def parse_summary(doc: Mapping[str, Any]) -> WdbcSummary:
    """A summary JSON object validated against the schema; :class:`SummaryError`."""
    try:
        if len(canonical_json(dict(doc))) > _MAX_DOC:
            raise SummaryError("the summary is larger than 1 MiB")
        return WdbcSummary.model_validate(dict(doc))
    except (ValidationError, ValueError, TypeError) as exc:
        raise SummaryError(f"not a {SUMMARY_ID} version 1 document") from exc


def parse_case_result(doc: Mapping[str, Any]) -> WdbcCaseResult:
    """A per-case result JSON object; :class:`SummaryError` when it does not validate."""
    try:
        return WdbcCaseResult.model_validate(dict(doc))
    except ValidationError as exc:
        raise SummaryError("not a WDBC per-case result") from exc


def figures(summary: WdbcSummary) -> tuple[Figure, ...]:
    """The presentation's values of ``summary``."""
    cal = summary.calibration
    return (
        Figure(MetricRef("auroc"), summary.auroc.value, summary.auroc.ci_low,
               summary.auroc.ci_high),
        Figure(MetricRef("sensitivity"), summary.sensitivity.value, summary.sensitivity.ci_low,
               summary.sensitivity.ci_high),
        Figure(MetricRef("specificity"), summary.specificity.value, summary.specificity.ci_low,
               summary.specificity.ci_high),
        Figure(MetricRef("brier"), summary.brier),
        Figure(MetricRef("ece"), None if cal is None else cal.ece),
        Figure(MetricRef("calibration_slope"), None if cal is None else cal.slope),
        Figure(MetricRef("n_cases"), float(summary.n_cases)),
    )


def _binned_auroc(pos: np.ndarray, neg: np.ndarray) -> m.Auroc:
    """AUROC and DeLong interval of scores known only by bin (cases in one bin tie)."""
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    if n_pos == 0 or n_neg == 0:
        return m.Auroc(None, None, None, None)
    below_neg = np.concatenate([[0], np.cumsum(neg)[:-1]])
    above_pos = np.concatenate([np.cumsum(pos[::-1])[::-1][1:], [0]])
    v10 = (below_neg + 0.5 * neg) / n_neg  # per bin, for each positive case in it
    v01 = (above_pos + 0.5 * pos) / n_pos  # per bin, for each negative case in it
    value = float((pos * v10).sum() / n_pos)
    if n_pos < 2 or n_neg < 2:
        return m.Auroc(value, None, None, None)
    s10 = float((pos * (v10 - value) ** 2).sum() / (n_pos - 1))
    s01 = float((neg * (v01 - value) ** 2).sum() / (n_neg - 1))
    se = float(np.sqrt(s10 / n_pos + s01 / n_neg))
    return m.Auroc(value, max(0.0, value - m.Z95 * se), min(1.0, value + m.Z95 * se), se)


def pool(summaries: Sequence[WdbcSummary]) -> PooledFigures:
    """Pool sites from their sufficient statistics: sensitivity, specificity and Brier score
    exactly, the ECE on the reliability grid, the AUROC with cases in one histogram bin tied
    (so at most the within-bin ordering is lost). ``ValueError`` for summaries of different
    thresholds or grids, or without statistics."""
    stats = [s.pooling for s in summaries]
    if not summaries or any(s is None for s in stats):
        raise ValueError("pooling needs at least one summary, each with pooling statistics")
    present = [s for s in stats if s is not None]
    if len({s.threshold for s in summaries}) != 1 or len({s.bins for s in present}) != 1:
        raise ValueError("the summaries differ in threshold or histogram grid")
    pos = np.sum([s.positives for s in present], axis=0).astype(np.float64)
    neg = np.sum([s.negatives for s in present], axis=0).astype(np.float64)
    sums = (np.sum([s.positive_score_sums for s in present], axis=0)
            + np.sum([s.negative_score_sums for s in present], axis=0))
    tp, fp, tn, fn = (sum(getattr(s, k) for s in present) for k in ("tp", "fp", "tn", "fn"))
    n = int(pos.sum() + neg.sum())
    sens, spec = m.wilson_interval(tp, tp + fn), m.wilson_interval(tn, tn + fp)
    auc = _binned_auroc(pos, neg)
    bins = present[0].bins
    group = bins // m.CALIBRATION_BINS if bins % m.CALIBRATION_BINS == 0 else 1
    count = (pos + neg).reshape(-1, group).sum(axis=1)
    observed = pos.reshape(-1, group).sum(axis=1)
    score = sums.reshape(-1, group).sum(axis=1)
    filled = count > 0
    ece = float(np.abs(observed[filled] - score[filled]).sum() / n)
    brier = sum(s.squared_error_sum for s in present) / n
    return PooledFigures(
        figures=(
            Figure(MetricRef("auroc"), auc.value, auc.ci_low, auc.ci_high),
            Figure(MetricRef("sensitivity"), sens.value, sens.ci_low, sens.ci_high),
            Figure(MetricRef("specificity"), spec.value, spec.ci_low, spec.ci_high),
            Figure(MetricRef("brier"), brier),
            Figure(MetricRef("ece"), ece),
            Figure(MetricRef("n_cases"), float(n)),
        ),
        n_sites=len(summaries),
        n_cases=n,
    )
