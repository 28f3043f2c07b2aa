"""Server-rendered dot plots for the leaderboard: one chart per group of the benchmark's
presentation (BraTS: region), its headline and secondary metrics side by side (BraTS publishes
one, Dice), one row per model, one dot per dataset (the figure read from its release: the mean
over its cases for a per-case metric) with the release's 95% interval as a whisker, and no dot
for a figure that is not informative (the noise dominates it); and the pooled leaderboard's
forest plots (each site's estimate and 95% interval, the pooled diamond).

What a mark means is one thing only: the dot is the estimate and the whisker is exactly that
estimate's 95% interval, never a spread of cases (no quartile leaves the enclave) and never
stretched to reach the dot; a dot outside its own interval (a clipped estimate) is drawn hollow
and says so. Axes are chosen from the data: a forest plot's axis spans the drawn intervals with
some padding (WDBC's AUROCs of 0.93 to 0.99 on a fixed 0-1 axis were one clump at the right
edge), shows the metric's floor (0) when that costs at most half the axis, and otherwise says
where it starts. Pure geometry: the template draws the SVG, with no script and no inline style
(colours come from CSS classes ``ds-0`` … ``ds-5`` so the Content-Security-Policy holds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sealbench.server.web._views import Board

__all__ = [
    "Chart",
    "Dot",
    "Forest",
    "ForestRow",
    "Panel",
    "RowLabel",
    "Tick",
    "axis_note",
    "build_charts",
    "build_forest",
    "forest_axis",
    "nice_ticks",
]

LABEL_W = 190
PANEL_W = 380
GAP = 56
TOP = 40
ROW_H = 40
BOTTOM = 34
RIGHT = 34
PALETTE = 6


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Dot:
    """An estimate at ``cx`` and its 95% interval from ``lo`` to ``hi`` (None: no interval,
    no whisker), exactly as the release gives them; ``inside`` is False for an estimate outside
    its own interval (drawn hollow, its title says so)."""

    cx: float
    cy: float
    lo: float | None
    hi: float | None
    css: str
    title: str

    @property
    def inside(self) -> bool:
        return self.lo is None or self.hi is None or self.lo <= self.cx <= self.hi


@dataclass(frozen=True)
class Panel:
    title: str
    hint: str
    x0: float
    x1: float
    ticks: tuple[Tick, ...]
    dots: tuple[Dot, ...]


@dataclass(frozen=True)
class RowLabel:
    y: float
    text: str
    band_y: float
    shaded: bool


@dataclass(frozen=True)
class Chart:
    region: str
    width: int
    height: int
    plot_top: float
    plot_bottom: float
    row_height: float
    rows: tuple[RowLabel, ...]
    panels: tuple[Panel, ...]


def nice_ticks(lower: float, upper: float, *, target: int = 6) -> tuple[float, ...]:
    """Evenly spaced ticks covering ``[lower, upper]``, with a step of 1, 2 or 5 times a power
    of ten (a dot plot needs no zero: the axis is zoomed on the values)."""
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return (0.0, 1.0)
    if upper - lower < 1e-9:
        lower, upper = lower - 0.5, upper + 0.5
    raw = (upper - lower) / (target - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.floor(lower / step + 1e-9)
    end = math.ceil(upper / step - 1e-9)
    return tuple(round(i * step, 10) for i in range(start, end + 1))


def _fmt_tick(value: float) -> str:
    return f"{value:g}"


def build_charts(board: Board) -> tuple[Chart, ...]:
    """One chart per group (BraTS: region) of the benchmark's presentation that has at least
    one informative value on the board: its headline and secondary metrics side by side."""
    charts = []
    for region in board.view.groups:
        chart = _chart(board, region)
        if chart is not None:
            charts.append(chart)
    return tuple(charts)


def _chart(board: Board, region: str) -> Chart | None:
    by_pair = {(e.model_id, e.dataset_id): e for e in board.entries}
    index = {dataset_id: j for j, (dataset_id, _) in enumerate(board.datasets)}
    names = dict(board.datasets)
    n = max(len(board.datasets), 1)
    spread = min(10.0, 26.0 / n)
    plot_top = float(TOP)
    rows = tuple(
        RowLabel(
            y=plot_top + i * ROW_H + ROW_H / 2,
            text=row.label,
            band_y=plot_top + i * ROW_H,
            shaded=i % 2 == 0,
        )
        for i, row in enumerate(board.rows)
    )
    plot_bottom = plot_top + len(board.rows) * ROW_H
    panels = []
    found = False
    view = board.view
    panels_of = [
        (ref.metric, view.label(ref),
         "lower is better" if view.lower_is_better(ref) else "higher is better",
         f" {view.unit(ref)}" if view.unit(ref) else "")
        for ref in (view.headline, view.secondary) if ref is not None]
    for p, (metric, title, hint, unit) in enumerate(panels_of):
        x0 = LABEL_W + p * (PANEL_W + GAP)
        points = []
        for i, row in enumerate(board.rows):
            for dataset_id, _ in board.datasets:
                entry = by_pair.get((row.model_id, dataset_id))
                stat = None if entry is None else view.stat(entry.summary, region, metric)
                if stat is not None and stat.value is not None:
                    points.append((i, dataset_id, stat.value, stat.low, stat.high))
        found = found or bool(points)
        lows = [v if lo is None else min(lo, v) for _, _, v, lo, _ in points]
        highs = [v if hi is None else max(hi, v) for _, _, v, _, hi in points]
        lower = max(min(lows, default=0.0), 0.0)
        upper = max(highs, default=1.0)
        if metric == "dice":
            upper = min(upper, 1.0)
        ticks = nice_ticks(lower, upper)
        bottom, top = ticks[0], ticks[-1]

        def x(value: float, x0: float = x0, bottom: float = bottom, top: float = top) -> float:
            return round(x0 + PANEL_W * min(max((value - bottom) / (top - bottom), 0.0), 1.0), 2)

        dots = []
        for i, dataset_id, value, low, high in points:
            j = index[dataset_id]
            cy = round(rows[i].y + (j - (n - 1) / 2) * spread, 2)
            ci, lo, hi = "", None, None
            if low is not None and high is not None:
                ci = f" (95% interval {low:.4f} to {high:.4f}{unit}, from the release)"
                lo, hi = x(low), x(high)
                if not low <= value <= high:
                    ci += " - the estimate lies outside its interval"
            dots.append(
                Dot(
                    cx=x(value),
                    cy=cy,
                    lo=lo,
                    hi=hi,
                    css=f"ds-{j % PALETTE}",
                    title=f"{board.rows[i].label} on {names[dataset_id]}: {region} {title} "
                    f"mean {value:.4f}{unit}{ci}",
                )
            )
        panels.append(
            Panel(
                title=f"{region} {title}{unit and f' ({unit.strip()})'}",
                hint=hint,
                x0=x0,
                x1=x0 + PANEL_W,
                ticks=tuple(Tick(x(t), _fmt_tick(t)) for t in ticks),
                dots=tuple(dots),
            )
        )
    if not found:
        return None
    return Chart(
        region=region,
        width=LABEL_W + len(panels) * (PANEL_W + GAP) - GAP + RIGHT,
        height=int(plot_bottom + BOTTOM),
        plot_top=plot_top,
        plot_bottom=plot_bottom,
        row_height=ROW_H,
        rows=rows,
        panels=tuple(panels),
    )


# -- forest plots of the pooled leaderboard (issue 15) ----------------------------------------

FOREST_W = 720
FOREST_LABEL_W = 200
FOREST_ROW_H = 22
FOREST_TOP = 30
FOREST_BOTTOM = 44


@dataclass(frozen=True)
class ForestRow:
    """One site (``diamond`` False: estimate and 95% interval) or the pooled figure."""

    label: str
    y: float
    cx: float | None
    lo: float | None
    hi: float | None
    diamond: bool
    mock: bool
    title: str
    #: The interval runs past the axis on that side (its whisker ends in an arrow there).
    clipped_low: bool = False
    clipped_high: bool = False

    @property
    def arrows(self) -> tuple[str, ...]:
        """Arrowheads (polygon points) at the whisker's ends that run past the axis."""
        out = []
        if self.clipped_low and self.lo is not None:
            out.append(f"{self.lo},{self.y} {self.lo + 6},{self.y - 4} {self.lo + 6},{self.y + 4}")
        if self.clipped_high and self.hi is not None:
            out.append(f"{self.hi},{self.y} {self.hi - 6},{self.y - 4} {self.hi - 6},{self.y + 4}")
        return tuple(out)

    @property
    def diamond_points(self) -> str:
        """The pooled diamond: the interval's ends and the estimate, half a row high."""
        if self.cx is None:
            return ""
        lo = self.lo if self.lo is not None else self.cx
        hi = self.hi if self.hi is not None else self.cx
        h = FOREST_ROW_H * 0.35
        return f"{lo},{self.y} {self.cx},{self.y - h} {hi},{self.y} {self.cx},{self.y + h}"


@dataclass(frozen=True)
class Forest:
    model_id: int
    title: str
    width: int
    height: int
    x0: float
    x1: float
    plot_top: float
    plot_bottom: float
    ticks: tuple[Tick, ...]
    rows: tuple[ForestRow, ...]
    #: Where the axis starts when it is zoomed (:func:`axis_note`); empty when it starts at 0.
    note: str = ""


#: Padding on each side of a forest axis, as a share of the drawn values' span.
FOREST_PAD = 0.08
#: The narrowest span a proportion's axis is zoomed to (so equal values still get an axis).
FOREST_MIN_SPAN = 0.02
#: How far beyond the estimates and pooled intervals a site's interval may stretch the axis,
#: as a share of their span (the estimates keep at least about half of the axis).
FOREST_REACH = 0.5


def forest_axis(lows: list[float], highs: list[float], *, unit: str, bounded: bool,
                core: list[float] | None = None) -> tuple[float, ...]:
    """Ticks of a forest plot's axis, chosen from what is drawn (``lows`` and ``highs``: the
    estimates and interval ends). A proportion (Dice, AUROC; ``bounded``) gets the drawn span
    with padding, kept within [0, 1], starting at its floor 0 when that costs at most half the
    axis (the values' span is at least the gap down to 0) and otherwise zoomed, which
    :func:`axis_note` then says; a distance or count runs from 0 to its largest value.

    ``core`` (the estimates and the pooled intervals) must always be on the axis; the other
    intervals then reach at most :data:`FOREST_REACH` of the core's span beyond it on each side,
    so one wide site interval cannot squeeze every estimate into a clump (its whisker ends in an
    arrow)."""
    values = [*lows, *highs]
    if not bounded:
        return nice_ticks(0.0, max([*values, 1e-9]))
    if not values:
        return nice_ticks(0.0, 1.0)
    low, high = max(min(values), 0.0), min(max(values), 1.0)
    if core:
        inner_low, inner_high = max(min(core), 0.0), min(max(core), 1.0)
        reach = FOREST_REACH * max(inner_high - inner_low, FOREST_MIN_SPAN)
        low = max(min(low, inner_low), inner_low - reach)
        high = min(max(high, inner_high), inner_high + reach)
    if high - low < FOREST_MIN_SPAN:  # equal values still get a readable axis around them
        low = max(min(low, high - FOREST_MIN_SPAN / 2), 0.0)
        high = min(max(high, low + FOREST_MIN_SPAN), 1.0)
        low = max(min(low, high - FOREST_MIN_SPAN), 0.0)
    span = high - low
    lower = max(low - FOREST_PAD * span, 0.0)
    upper = min(high + FOREST_PAD * span, 1.0)
    if lower <= span:
        lower = 0.0
    return tuple(t for t in nice_ticks(lower, upper) if -1e-9 <= t <= 1.0 + 1e-9)


def axis_note(ticks: tuple[float, ...], *, bounded: bool) -> str:
    """What a reader must know about a proportion's zoomed axis: where it starts when that is
    not the metric's floor 0 (empty otherwise)."""
    if not bounded or not ticks or ticks[0] <= 0.0:
        return ""
    return f"axis from {_fmt_tick(ticks[0])}, not 0: zoomed on the intervals"


def build_forest(model_id: int, title: str, sites: list[tuple[str, float | None, float | None,
                                                              float | None, bool]],
                 pooled: tuple[float | None, float | None, float | None],
                 ticks: tuple[float, ...], unit: str, note: str = "") -> Forest:
    """A model's forest plot: one row per site (``(label, value, low, high, mock)``) and the
    pooled diamond, on the shared axis ``ticks`` (``note``: where a zoomed axis starts). A row
    without a value (not informative: the release noise dominates it) draws its interval only
    (dashed, in the template); its title says so and gives its interval."""
    x0, x1 = float(FOREST_LABEL_W), float(FOREST_W - 16)
    bottom, top = ticks[0], ticks[-1]

    def x(value: float | None) -> float | None:
        if value is None:
            return None
        return round(x0 + (x1 - x0) * min(max((value - bottom) / (top - bottom), 0.0), 1.0), 2)

    def text(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}{unit}"

    def caption(label: str, value: float | None, low: float | None, high: float | None) -> str:
        note = " not informative" if value is None and low is not None else ""
        interval = "" if low is None else f" (95% CI {text(low)} to {text(high)})"
        return f"{label}: {text(value)}{note}{interval}"

    rows = []
    for i, (label, value, low, high, mock) in enumerate(sites):
        y = FOREST_TOP + i * FOREST_ROW_H + FOREST_ROW_H / 2
        rows.append(ForestRow(label, y, x(value), x(low), x(high), False, mock,
                              caption(label, value, low, high),
                              low is not None and low < bottom - 1e-9,
                              high is not None and high > top + 1e-9))
    y = FOREST_TOP + len(sites) * FOREST_ROW_H + FOREST_ROW_H / 2 + 6
    value, low, high = pooled
    rows.append(ForestRow("pooled", y, x(value), x(low), x(high), True, False,
                          caption("pooled", value, low, high)))
    plot_bottom = y + FOREST_ROW_H / 2 + 4
    return Forest(model_id, title, FOREST_W, int(plot_bottom + FOREST_BOTTOM), x0, x1,
                  float(FOREST_TOP - 6), plot_bottom,
                  tuple(Tick(v, _fmt_tick(t)) for t in ticks if (v := x(t)) is not None),
                  tuple(rows), note)
