"""The summary's schema as people read it: metrics, groups, the headline the leaderboards rank
by, and the figures shown (re-exported by :mod:`sealbench.benchmarks.interface`, the one import a
plug-in needs)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = ["Direction", "Figure", "Group", "MetricRef", "MetricSpec", "PooledFigures",
           "Presentation"]

_KEY: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$")


class Direction(StrEnum):
    """Which way a metric is better."""

    HIGHER = "higher"
    LOWER = "lower"
    #: A count or a descriptive figure: not ranked.
    NEUTRAL = "neutral"


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the summary. ``dataset_level`` metrics are computed from all cases at once
    (AUROC, calibration), never a mean of per-case values; the others are aggregated per case
    (mean and spread)."""

    key: str
    label: str
    unit: str
    direction: Direction
    dataset_level: bool
    description: str = ""

    def __post_init__(self) -> None:
        if not _KEY.match(self.key):
            raise ValueError(f"invalid metric key {self.key!r}")


@dataclass(frozen=True)
class Group:
    """A group the summary reports metrics for: a region (``WT``), a class (``malignant``)."""

    key: str
    label: str
    description: str = ""

    def __post_init__(self) -> None:
        if not _KEY.match(self.key):
            raise ValueError(f"invalid group key {self.key!r}")


@dataclass(frozen=True)
class MetricRef:
    """A metric, in a group when the summary has groups (``group`` None otherwise)."""

    metric: str
    group: str | None = None

    def __str__(self) -> str:
        return self.metric if self.group is None else f"{self.metric} {self.group}"


@dataclass(frozen=True)
class Presentation:
    """How the summary is shown: its metrics and groups, the headline metric the leaderboard
    ranks by, and the columns a compact listing (CLI table, dashboard) shows, in order."""

    metrics: tuple[MetricSpec, ...]
    groups: tuple[Group, ...]
    headline: MetricRef
    columns: tuple[MetricRef, ...]

    def __post_init__(self) -> None:
        keys = [m.key for m in self.metrics]
        groups = [g.key for g in self.groups]
        if not keys or len(set(keys)) != len(keys) or len(set(groups)) != len(groups):
            raise ValueError("a presentation needs distinct metric keys (at least one) and "
                             "distinct group keys")
        for ref in (self.headline, *self.columns):
            self.metric(ref.metric)
            if ref.group is not None and ref.group not in groups:
                raise ValueError(f"unknown group {ref.group!r} (groups: {groups})")
        if self.metric(self.headline.metric).direction is Direction.NEUTRAL:
            raise ValueError("the headline metric must have a direction")

    def metric(self, key: str) -> MetricSpec:
        """The metric called ``key`` or ``ValueError``."""
        for spec in self.metrics:
            if spec.key == key:
                return spec
        raise ValueError(f"unknown metric {key!r} (metrics: {[m.key for m in self.metrics]})")

    def label(self, ref: MetricRef) -> str:
        """``Dice WT``, ``AUROC``: the column title of ``ref``."""
        spec = self.metric(ref.metric)
        if ref.group is None:
            return spec.label
        return f"{spec.label} {next(g.label for g in self.groups if g.key == ref.group)}"


@dataclass(frozen=True)
class Figure:
    """One shown value of a summary: ``value`` (a mean for per-case metrics, the dataset's
    value for dataset-level ones), with its 95% interval or spread where the plug-in has one.
    ``value`` is None where the metric is undefined on this data (a class absent). ``bias`` is
    the largest error the plug-in's method of computing the value can make beside noise and
    sampling (e.g. an AUROC read from score bins), shown with the value; None where the method
    is exact."""

    ref: MetricRef
    value: float | None
    low: float | None = None
    high: float | None = None
    spread: float | None = None
    bias: float | None = None


@dataclass(frozen=True)
class PooledFigures:
    """What pooling several sites' summaries gives (issue 15): case-weighted pooled figures
    with their intervals, the number of sites and cases pooled."""

    figures: tuple[Figure, ...]
    n_sites: int
    n_cases: int
