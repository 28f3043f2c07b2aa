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

**Small cells** (issue 15): no histogram cell or reliability-table row holds fewer than
:data:`BIN_MINIMUM` (3) cases. Adjacent bins are **merged** (:func:`merge_cells`: in score
order, a cell closes once it reaches the minimum, a remainder joins the last cell; the cells
partition the grid); a class, or a table, with fewer cases than the minimum is one cell over
the whole grid (its count is already in the summary) and a score sum of fewer cases is left out
(``None``). :func:`parse_summary` refuses a summary that breaks this. Pooling loses only
within-cell order: the pooled AUROC counts a (malignant, benign) pair in overlapping cells as a
tie (its error is at most :func:`auroc_binning_bound`), and the pooled ECE is the ECE on the
coarsest partition of the reliability grid that every site's cells respect
(:func:`ece_partition`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

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
    "BIN_MINIMUM",
    "SUMMARY_ID",
    "THRESHOLD",
    "CalibrationSummary",
    "ProportionSummary",
    "WdbcCaseResult",
    "WdbcSummary",
    "auroc_binning_bound",
    "ece_partition",
    "figures",
    "merge_cells",
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


# -- small cells (issue 15) ----------------------------------------------------------------------

#: The fewest cases a published histogram cell or reliability-table row may hold.
BIN_MINIMUM: Final = 3


class HistogramCell(BaseModel):
    """Cases of one class whose score falls in bins ``first`` to ``last`` of the pooling grid."""

    model_config = _FROZEN

    first: int
    last: int
    n: int


class ScoreCell(BaseModel):
    """Cases of both classes in bins ``first`` to ``last`` and the sum of their scores (None
    when the cell is under :data:`BIN_MINIMUM`: a sum of one score is that score)."""

    model_config = _FROZEN

    first: int
    last: int
    n: int
    score_sum: float | None


def merge_cells(counts: Sequence[int], minimum: int = BIN_MINIMUM) -> tuple[tuple[int, int], ...]:
    """The cells (``first``, ``last`` occupied bin) that **merge** adjacent occupied bins of
    ``counts`` so each holds at least ``minimum`` cases: bins are taken in order and a cell
    closes once it reaches the minimum; a remainder under it joins the last cell. When the
    total is under the minimum the whole grid is one cell (its count is the class's, already in
    the summary, and it tells nothing of where the scores lie)."""
    cells: list[tuple[int, int]] = []
    start, held = -1, 0
    for index, count in enumerate(counts):
        if count and start < 0:
            start = index
        held += count
        if held >= minimum:
            cells.append((start, index))
            start, held = -1, 0
    if not cells:
        return ((0, len(counts) - 1),)
    if held:
        last = max(i for i, c in enumerate(counts) if c)
        cells[-1] = (cells[-1][0], last)
    return tuple(cells)


def _cells_of(counts: Sequence[int]) -> tuple[HistogramCell, ...]:
    return tuple(HistogramCell(first=a, last=b, n=int(sum(counts[a:b + 1])))
                 for a, b in merge_cells(counts))


def _score_cells(counts: Sequence[int], sums: Sequence[float]) -> tuple[ScoreCell, ...]:
    out = []
    for a, b in merge_cells(counts):
        n = int(sum(counts[a:b + 1]))
        out.append(ScoreCell(first=a, last=b, n=n,
                             score_sum=float(sum(sums[a:b + 1])) if n >= BIN_MINIMUM else None))
    return tuple(out)


def _check_partition(cells: Sequence[HistogramCell | ScoreCell], bins: int, what: str) -> None:
    if not cells or any(c.first > c.last or c.first < 0 or c.last >= bins or c.n < 0
                        for c in cells):
        raise ValueError(f"{what}: a malformed cell")
    for before, after in pairwise(cells):
        if after.first <= before.last:
            raise ValueError(f"{what}: the cells overlap or are out of order")
    small = [c for c in cells if c.n < BIN_MINIMUM]
    if small and (len(cells) > 1 or cells[0].first != 0 or cells[0].last != bins - 1):
        raise ValueError(f"{what}: a cell holds fewer than {BIN_MINIMUM} cases")


class CalibrationBinSummary(BaseModel):
    model_config = _FROZEN

    low: float
    high: float
    n: int
    mean_score: float | None
    observed: float | None


class CalibrationSummary(BaseModel):
    """The reliability table's rows merged to at least :data:`BIN_MINIMUM` cases each (no row
    when the site has fewer), with the site's ECE, slope and intercept."""

    model_config = _FROZEN

    bins: tuple[CalibrationBinSummary, ...]
    ece: float
    slope: float | None
    intercept: float | None

    @model_validator(mode="after")
    def _small_cells(self) -> CalibrationSummary:
        if any(b.n < BIN_MINIMUM for b in self.bins):
            raise ValueError(f"a reliability row holds fewer than {BIN_MINIMUM} cases")
        return self


def _merged_table(table: Sequence[m.CalibrationBin]) -> tuple[CalibrationBinSummary, ...]:
    counts = [b.n for b in table]
    if sum(counts) < BIN_MINIMUM:
        return ()
    rows = []
    for a, b in merge_cells(counts):
        part = [x for x in table[a:b + 1] if x.n]
        n = sum(x.n for x in part)
        rows.append(CalibrationBinSummary(
            low=table[a].low, high=table[b].high, n=n,
            mean_score=sum(x.n * (x.mean_score or 0.0) for x in part) / n,
            observed=sum(x.n * (x.observed or 0.0) for x in part) / n))
    return tuple(rows)


class PoolingSummary(BaseModel):
    """Sufficient statistics for pooling (see :class:`.metrics.PoolingStatistics`), with the
    histograms merged into cells of at least :data:`BIN_MINIMUM` cases: per class the case
    counts, for both classes together the counts and score sums (for the ECE)."""

    model_config = _FROZEN

    bins: int
    positives: tuple[HistogramCell, ...]
    negatives: tuple[HistogramCell, ...]
    scores: tuple[ScoreCell, ...]
    tp: int
    fp: int
    tn: int
    fn: int
    squared_error_sum: float

    @model_validator(mode="after")
    def _small_cells(self) -> PoolingSummary:
        if self.bins < 1:
            raise ValueError("no grid")
        _check_partition(self.positives, self.bins, "positives")
        _check_partition(self.negatives, self.bins, "negatives")
        _check_partition(self.scores, self.bins, "scores")
        if any((c.score_sum is None) != (c.n < BIN_MINIMUM) for c in self.scores):
            raise ValueError("scores: a sum of fewer cases than the minimum, or one missing")
        return self


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
            bins=_merged_table(cal.bins),
            ece=cal.ece, slope=cal.slope, intercept=cal.intercept),
        pooling=PoolingSummary(
            bins=stats.bins, positives=_cells_of(stats.positives),
            negatives=_cells_of(stats.negatives),
            scores=_score_cells(
                [a + b for a, b in zip(stats.positives, stats.negatives, strict=True)],
                [a + b for a, b in zip(stats.positive_score_sums, stats.negative_score_sums,
                                       strict=True)]),
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


def _cell_arrays(cells: Sequence[HistogramCell]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.array([c.first for c in cells], dtype=np.int64),
            np.array([c.last for c in cells], dtype=np.int64),
            np.array([c.n for c in cells], dtype=np.float64))


def _pair_matrix(pos: Sequence[HistogramCell], neg: Sequence[HistogramCell]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For every (malignant cell, benign cell): 1 when the malignant one lies above, 1/2 when
    they overlap (a tie), 0 below; and which pairs overlap."""
    p_lo, p_hi, p_n = _cell_arrays(pos)
    n_lo, n_hi, n_n = _cell_arrays(neg)
    above = p_lo[:, None] > n_hi[None, :]
    below = p_hi[:, None] < n_lo[None, :]
    overlap = ~above & ~below
    return above + 0.5 * overlap, overlap, p_n, n_n


def _binned_auroc(pos: Sequence[HistogramCell], neg: Sequence[HistogramCell]) -> m.Auroc:
    """AUROC and DeLong interval of scores known only by cell (cases in overlapping cells
    tie)."""
    score, _, p_n, n_n = _pair_matrix(pos, neg)
    n_pos, n_neg = float(p_n.sum()), float(n_n.sum())
    if n_pos == 0 or n_neg == 0:
        return m.Auroc(None, None, None, None)
    v10 = score @ n_n / n_neg  # per malignant cell, for each case in it
    v01 = p_n @ score / n_pos  # per benign cell, for each case in it
    value = float((p_n * v10).sum() / n_pos)
    if n_pos < 2 or n_neg < 2:
        return m.Auroc(value, None, None, None)
    s10 = float((p_n * (v10 - value) ** 2).sum() / (n_pos - 1))
    s01 = float((n_n * (v01 - value) ** 2).sum() / (n_neg - 1))
    se = float(np.sqrt(s10 / n_pos + s01 / n_neg))
    return m.Auroc(value, max(0.0, value - m.Z95 * se), min(1.0, value + m.Z95 * se), se)


def _present(summaries: Sequence[WdbcSummary]) -> list[PoolingSummary]:
    stats = [s.pooling for s in summaries]
    if not summaries or any(s is None for s in stats):
        raise ValueError("pooling needs at least one summary, each with pooling statistics")
    present = [s for s in stats if s is not None]
    if len({s.threshold for s in summaries}) != 1 or len({s.bins for s in present}) != 1:
        raise ValueError("the summaries differ in threshold or histogram grid")
    return present


def auroc_binning_bound(summaries: Sequence[WdbcSummary]) -> float:
    """The most the pooled AUROC can differ from the AUROC of the raw scores: every
    (malignant, benign) pair in overlapping cells counts 1/2 where the truth is 0 or 1, so
    ``Σ pos_a · neg_b / (2 · n_pos · n_neg)`` over overlapping cells."""
    present = _present(summaries)
    pos = [c for s in present for c in s.positives]
    neg = [c for s in present for c in s.negatives]
    _, overlap, p_n, n_n = _pair_matrix(pos, neg)
    total = float(p_n.sum() * n_n.sum())
    return 0.0 if total == 0 else float((p_n @ overlap @ n_n) / (2 * total))


def ece_partition(summaries: Sequence[WdbcSummary]) -> tuple[tuple[int, int], ...]:
    """The coarsest partition of the reliability grid (:data:`.metrics.CALIBRATION_BINS` bins,
    as ``(first, last)``) that every site's cells respect: the pooled ECE's groups."""
    present = _present(summaries)
    bins = present[0].bins
    group = bins // m.CALIBRATION_BINS if bins % m.CALIBRATION_BINS == 0 else 1
    edges = [(c.first, c.last) for s in present for c in (*s.positives, *s.negatives)]
    edges += [(c.first, c.last) for s in present for c in s.scores]
    spans = sorted((a // group, b // group) for a, b in edges)
    parts: list[tuple[int, int]] = []
    for lo, hi in spans:
        if parts and lo <= parts[-1][1]:
            parts[-1] = (parts[-1][0], max(parts[-1][1], hi))
        else:
            parts.append((lo, hi))
    return tuple(parts)


def _pooled_ece(summaries: Sequence[WdbcSummary], n: int) -> float | None:
    present = _present(summaries)
    bins = present[0].bins
    group = bins // m.CALIBRATION_BINS if bins % m.CALIBRATION_BINS == 0 else 1
    gap = 0.0
    for lo, hi in ece_partition(summaries):
        inside = [(c, s) for s in present for c in s.scores
                  if lo <= c.first // group and c.last // group <= hi]
        if any(c.score_sum is None for c, _ in inside):
            return None
        observed = sum(c.n for s in present for c in s.positives
                       if lo <= c.first // group and c.last // group <= hi)
        gap += abs(observed - sum(c.score_sum or 0.0 for c, _ in inside))
    return gap / n if n else None


def pool(summaries: Sequence[WdbcSummary]) -> PooledFigures:
    """Pool sites from their sufficient statistics: sensitivity, specificity and Brier score
    exactly, the ECE on the coarsest common partition of the reliability grid
    (:func:`ece_partition`), the AUROC with cases in overlapping cells tied (within
    :func:`auroc_binning_bound`). ``ValueError`` for summaries of different thresholds or
    grids, or without statistics."""
    present = _present(summaries)
    pos = [c for s in present for c in s.positives]
    neg = [c for s in present for c in s.negatives]
    tp, fp, tn, fn = (sum(getattr(s, k) for s in present) for k in ("tp", "fp", "tn", "fn"))
    n = sum(c.n for c in pos) + sum(c.n for c in neg)
    sens, spec = m.wilson_interval(tp, tp + fn), m.wilson_interval(tn, tn + fp)
    auc = _binned_auroc(pos, neg)
    brier = sum(s.squared_error_sum for s in present) / n
    return PooledFigures(
        figures=(
            Figure(MetricRef("auroc"), auc.value, auc.ci_low, auc.ci_high),
            Figure(MetricRef("sensitivity"), sens.value, sens.ci_low, sens.ci_high),
            Figure(MetricRef("specificity"), spec.value, spec.ci_low, spec.ci_high),
            Figure(MetricRef("brier"), brier),
            Figure(MetricRef("ece"), _pooled_ece(summaries, n)),
            Figure(MetricRef("n_cases"), float(n)),
        ),
        n_sites=len(summaries),
        n_cases=n,
    )
