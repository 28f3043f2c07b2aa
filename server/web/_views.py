"""Pure view logic for the dashboard: reading metrics out of a verified public summary and
arranging a benchmark's leaderboard (models by datasets) for the table and the charts.

Nothing here touches the database or the request; the pages feed it what the services
returned. A summary is the JSON the enclave attested (``sealbench/result-summary`` with its
``aggregates``, or a bare ``sealbench/brats-summary``); anything missing reads as ``None`` and is
shown as a dash, never as a zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "METRICS",
    "REGIONS",
    "Board",
    "BoardEntry",
    "BoardRow",
    "Cell",
    "Stat",
    "build_board",
    "mean_over_regions",
    "region_stat",
    "summary_counts",
    "summary_regions",
]

#: The BraTS evaluation regions, in the order the leaderboard shows them.
REGIONS: tuple[str, ...] = ("WT", "TC", "ET")
#: Metrics shown in a result's table, with their unit.
METRICS: tuple[tuple[str, str], ...] = (
    ("dice", ""),
    ("hd95", "mm"),
    ("sensitivity", ""),
    ("specificity", ""),
    ("lesion_dice", ""),
    ("lesion_hd95", "mm"),
)


@dataclass(frozen=True)
class Stat:
    """One metric of one region over a run's cases."""

    mean: float
    q25: float | None = None
    q75: float | None = None
    median: float | None = None
    std: float | None = None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def summary_regions(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``regions`` object of a summary (inside ``aggregates`` for a run's summary)."""
    regions = summary.get("regions")
    aggregates = summary.get("aggregates")
    if regions is None and isinstance(aggregates, Mapping):
        regions = aggregates.get("regions")
    return regions if isinstance(regions, Mapping) else {}


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


def region_stat(summary: Mapping[str, Any], region: str, metric: str) -> Stat | None:
    """The statistics of ``metric`` in ``region``, or None when the summary lacks them."""
    metrics = summary_regions(summary).get(region)
    if not isinstance(metrics, Mapping):
        return None
    stats = metrics.get(metric)
    if not isinstance(stats, Mapping):
        return None
    mean = _number(stats.get("mean"))
    if mean is None:
        return None
    return Stat(
        mean=mean,
        q25=_number(stats.get("q25")),
        q75=_number(stats.get("q75")),
        median=_number(stats.get("median")),
        std=_number(stats.get("std")),
    )


def mean_over_regions(summary: Mapping[str, Any], metric: str) -> float | None:
    """The mean of ``metric``'s per-region means over WT, TC and ET (the regions present)."""
    values = [s.mean for r in REGIONS if (s := region_stat(summary, r, metric)) is not None]
    return sum(values) / len(values) if values else None


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
    dice: float | None
    hd95: float | None
    verified_at: datetime
    withdrawn: tuple[str, ...] = ()


@dataclass(frozen=True)
class BoardRow:
    rank: int
    model_id: int
    label: str
    cells: tuple[Cell | None, ...]
    score: float | None


@dataclass(frozen=True)
class Board:
    """Models (ranked by mean Dice over their datasets, best first) by datasets."""

    datasets: tuple[tuple[int, str], ...]
    rows: tuple[BoardRow, ...]
    entries: tuple[BoardEntry, ...]

    @property
    def empty(self) -> bool:
        return not self.entries


def build_board(entries: Sequence[BoardEntry]) -> Board:
    """Arrange leaderboard entries; a model without any Dice ranks last, ties by model id."""
    datasets = sorted({(e.dataset_id, e.dataset_label) for e in entries})
    models = sorted({(e.model_id, e.model_label) for e in entries})
    by_pair = {(e.model_id, e.dataset_id): e for e in entries}
    scored: list[tuple[int, str, tuple[Cell | None, ...], float | None]] = []
    for model_id, label in models:
        cells: list[Cell | None] = []
        for dataset_id, _ in datasets:
            entry = by_pair.get((model_id, dataset_id))
            cells.append(
                None
                if entry is None
                else Cell(
                    entry.result_id,
                    mean_over_regions(entry.summary, "dice"),
                    mean_over_regions(entry.summary, "hd95"),
                    entry.created_at,
                    entry.withdrawn,
                )
            )
        dice = [c.dice for c in cells if c is not None and c.dice is not None]
        scored.append((model_id, label, tuple(cells), sum(dice) / len(dice) if dice else None))
    scored.sort(key=lambda row: (row[3] is None, -(row[3] or 0.0), row[0]))
    rows = tuple(
        BoardRow(rank, model_id, label, cells, score)
        for rank, (model_id, label, cells, score) in enumerate(scored, start=1)
    )
    return Board(tuple(datasets), rows, tuple(entries))
