"""Pure view logic for the dashboard: reading figures out of a verified public summary through
the benchmark's plug-in and arranging a benchmark's leaderboard (models by datasets) for the
table and the charts.

Nothing here touches the database or the request; the pages feed it what the services
returned. What is shown comes from the plug-in's presentation (:class:`View`): its headline
metric ranks the board, in the direction the plug-in says is better; its groups (BraTS regions,
classes) are the per-group tables and charts. A summary is the JSON the enclave attested
(``sealbench/result-summary`` with its ``aggregates``, or a bare summary); one the plug-in does
not validate, or of a benchmark whose plug-in is not installed here, reads as ``None``
everywhere and is shown as a dash, never as a zero.

A summary is a differentially private release: every figure is the plug-in's reading of it, a
value with its 95% interval (sampling error and release noise; no quantile or spread leaves the
enclave). A figure the release noise dominates has the value None and only its interval
(:attr:`Stat.informative` is False): it is shown as "not informative", never as a number, and
never counts towards a score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sealbench.benchmarks.interface import (
    Benchmark,
    BenchmarkError,
    Direction,
    Figure,
    MetricRef,
    release_of,
)
from sealbench.benchmarks.registry import load
from sealbench.benchmarks.release import Release
from sealbench.contract.pin import BenchmarkPin

__all__ = [
    "Board",
    "BoardEntry",
    "BoardRow",
    "Cell",
    "Stat",
    "View",
    "build_board",
    "summary_counts",
]


@dataclass(frozen=True)
class Stat:
    """One figure of one group (or over the groups) as a run's summary gives it: ``value`` (a
    mean over the cases, None when the release noise dominates it) and its 95% interval
    (``low``, ``high``), from the release."""

    value: float | None
    low: float | None = None
    high: float | None = None

    @property
    def informative(self) -> bool:
        """Whether the figure bears a reading (otherwise only its interval is shown)."""
        return self.value is not None

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)


def summary_counts(summary: Mapping[str, Any]) -> dict[str, int]:
    """Case counts (``n_cases``, ``n_scored``, ``n_failed``) that the summary states."""
    aggregates = summary.get("aggregates")
    source = aggregates if isinstance(aggregates, Mapping) else summary
    out: dict[str, int] = {}
    for key in ("n_cases", "n_scored", "n_failed"):
        value = source.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    return out


@dataclass(frozen=True)
class View:
    """A benchmark's presentation: which metrics and groups are shown, the headline metric the
    board ranks by (and the secondary one shown under it), each with its unit and direction.
    ``plugin`` is None when the benchmark's plug-in is not installed on the registry."""

    plugin: Benchmark | None
    #: Figures per summary read, keyed by the summary's id and holding the summary itself, so
    #: an id reused by a later object never returns another summary's figures.
    _cache: dict[int, tuple[Mapping[str, Any], Release | None, dict[MetricRef, Figure]]] = (
        field(default_factory=dict, compare=False))

    @classmethod
    def of(cls, metrics_version: BenchmarkPin) -> View:
        """The view of benchmarks pinning ``metrics_version`` (``<name>/<version>``)."""
        try:
            return cls(load(metrics_version))
        except BenchmarkError:
            return cls(None)

    @property
    def groups(self) -> tuple[str, ...]:
        return () if self.plugin is None else tuple(
            g.key for g in self.plugin.presentation.groups)

    @property
    def metrics(self) -> tuple[tuple[str, str], ...]:
        """(key, unit) of every ranked metric (counts left out), in the plug-in's order."""
        if self.plugin is None:
            return ()
        return tuple((m.key, m.unit) for m in self.plugin.presentation.metrics
                     if m.direction is not Direction.NEUTRAL)

    @property
    def headline(self) -> MetricRef | None:
        return None if self.plugin is None else self.plugin.presentation.headline

    @property
    def secondary(self) -> MetricRef | None:
        """The next ranked metric after the headline (shown under it), over the groups."""
        head = self.headline
        for key, _ in self.metrics:
            if head is not None and key != head.metric:
                return MetricRef(key)
        return None

    def group_description(self, key: str) -> str:
        """What a group is (``whole tumour``), from the presentation."""
        if self.plugin is None:
            return ""
        return next((g.description for g in self.plugin.presentation.groups if g.key == key), "")

    def label(self, ref: MetricRef | None) -> str:
        return "" if self.plugin is None or ref is None else self.plugin.presentation.label(ref)

    def unit(self, ref: MetricRef | None) -> str:
        if self.plugin is None or ref is None:
            return ""
        return self.plugin.presentation.metric(ref.metric).unit

    def lower_is_better(self, ref: MetricRef | None) -> bool:
        if self.plugin is None or ref is None:
            return False
        return self.plugin.presentation.metric(ref.metric).direction is Direction.LOWER

    def _read(self, summary: Mapping[str, Any]) -> tuple[Release | None,
                                                         dict[MetricRef, Figure]]:
        if self.plugin is None:
            return None, {}
        cached = self._cache.get(id(summary))
        if cached is not None and cached[0] is summary:
            return cached[1], cached[2]
        aggregates = summary.get("aggregates", summary)
        try:
            parsed = self.plugin.parse_summary(
                aggregates if isinstance(aggregates, Mapping) else {})
            figures = {f.ref: f for f in self.plugin.figures(parsed)}
            release = release_of(parsed)
        except BenchmarkError:
            figures, release = {}, None
        self._cache[id(summary)] = (summary, release, figures)
        return release, figures

    def figures(self, summary: Mapping[str, Any]) -> dict[MetricRef, Figure]:
        """The figures of a summary (empty when the plug-in does not validate it)."""
        return self._read(summary)[1]

    def release(self, summary: Mapping[str, Any]) -> Release | None:
        """The release a validated summary carries (its privacy loss, mechanism and noise), or
        None."""
        return self._read(summary)[0]

    def value(self, summary: Mapping[str, Any], ref: MetricRef | None) -> float | None:
        figure = None if ref is None else self.figures(summary).get(ref)
        return None if figure is None else figure.value

    def stat(self, summary: Mapping[str, Any], group: str | None, metric: str) -> Stat | None:
        """The figure of ``metric`` in ``group`` (over the groups when None): its value and
        interval, a value of None with an interval when it is not informative; None when the
        summary has neither."""
        return self.stat_of(summary, MetricRef(metric, group))

    def stat_of(self, summary: Mapping[str, Any], ref: MetricRef | None) -> Stat | None:
        figure = None if ref is None else self.figures(summary).get(ref)
        if figure is None or (figure.value is None and (figure.low is None
                                                        or figure.high is None)):
            return None
        return Stat(figure.value, figure.low, figure.high)


@dataclass(frozen=True)
class BoardEntry:
    """One leaderboard entry as the leaderboard service returns it."""

    result_id: int
    model_id: int
    model_label: str
    dataset_id: int
    dataset_label: str
    summary: Mapping[str, Any]
    created_at: datetime
    #: Sides (``dataset``, ``model``) whose association was withdrawn after the result.
    withdrawn: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cell:
    result_id: int
    #: The headline metric's value (None when absent or not informative), and the secondary
    #: metric's shown under it.
    headline: float | None
    secondary: float | None
    verified_at: datetime
    withdrawn: tuple[str, ...] = ()
    #: The headline figure's 95% interval from the release (set also when not informative).
    interval: tuple[float, float] | None = None

    @property
    def informative(self) -> bool:
        """False when the summary has a headline figure that the release noise dominates."""
        return self.headline is not None or self.interval is None


@dataclass(frozen=True)
class BoardRow:
    #: Position by score; None for a model without any informative value (never ranked).
    rank: int | None
    model_id: int
    label: str
    cells: tuple[Cell | None, ...]
    score: float | None


@dataclass(frozen=True)
class Board:
    """Models (ranked by their headline metric over their datasets, best first) by datasets."""

    datasets: tuple[tuple[int, str], ...]
    rows: tuple[BoardRow, ...]
    entries: tuple[BoardEntry, ...]
    view: View

    @property
    def empty(self) -> bool:
        return not self.entries


def build_board(entries: Sequence[BoardEntry], view: View) -> Board:
    """Arrange leaderboard entries by ``view``'s headline metric (in its direction): a model's
    score is the mean of its informative headline values over its datasets; a model without
    any comes last, unranked; ties by model id."""
    datasets = sorted({(e.dataset_id, e.dataset_label) for e in entries})
    models = sorted({(e.model_id, e.model_label) for e in entries})
    by_pair = {(e.model_id, e.dataset_id): e for e in entries}
    scored: list[tuple[int, str, tuple[Cell | None, ...], float | None]] = []
    for model_id, label in models:
        cells: list[Cell | None] = []
        for dataset_id, _ in datasets:
            entry = by_pair.get((model_id, dataset_id))
            head = None if entry is None else view.stat_of(entry.summary, view.headline)
            cells.append(
                None
                if entry is None
                else Cell(
                    entry.result_id,
                    None if head is None else head.value,
                    view.value(entry.summary, view.secondary),
                    entry.created_at,
                    entry.withdrawn,
                    None if head is None else head.interval,
                )
            )
        values = [c.headline for c in cells if c is not None and c.headline is not None]
        scored.append((model_id, label, tuple(cells),
                       sum(values) / len(values) if values else None))
    sign = 1.0 if view.lower_is_better(view.headline) else -1.0
    scored.sort(key=lambda row: (row[3] is None, sign * (row[3] or 0.0), row[0]))
    rows = tuple(
        BoardRow(None if score is None else rank, model_id, label, cells, score)
        for rank, (model_id, label, cells, score) in enumerate(scored, start=1)
    )
    return Board(tuple(datasets), rows, tuple(entries), view)
