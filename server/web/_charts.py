"""Server-rendered dot plots for the leaderboard: one chart per region, Dice and HD95 side by
side, one row per model, one dot per dataset (its mean over cases) with the interquartile range
as a whisker. Pure geometry: the template draws the SVG, with no script and no inline style
(colours come from CSS classes ``ds-0`` … ``ds-5`` so the Content-Security-Policy holds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sealbench.server.web._views import REGIONS, Board, region_stat

__all__ = ["Chart", "Dot", "Panel", "RowLabel", "Tick", "build_charts", "nice_ticks"]

WIDTH = 720
LABEL_W = 180
PANEL_W = 240
GAP = 40
TOP = 40
ROW_H = 32
BOTTOM = 34
PALETTE = 6
_PANELS = (
    ("dice", "Dice", "higher is better", ""),
    ("hd95", "HD95", "lower is better", " mm"),
)


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Dot:
    cx: float
    cy: float
    lo: float
    hi: float
    css: str
    title: str


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
    rows: tuple[RowLabel, ...]
    panels: tuple[Panel, ...]


def nice_ticks(upper: float, *, target: int = 5) -> tuple[float, ...]:
    """Ticks from 0 to at least ``upper`` with a step of 1, 2 or 5 times a power of ten."""
    if upper <= 0 or not math.isfinite(upper):
        return (0.0, 1.0)
    raw = upper / (target - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    count = math.ceil(upper / step - 1e-9)
    return tuple(round(i * step, 10) for i in range(count + 1))


def _fmt_tick(value: float) -> str:
    return f"{value:g}"


def build_charts(board: Board) -> tuple[Chart, ...]:
    """One chart per region that has at least one value on the board."""
    charts = []
    for region in REGIONS:
        chart = _chart(board, region)
        if chart is not None:
            charts.append(chart)
    return tuple(charts)


def _chart(board: Board, region: str) -> Chart | None:
    by_pair = {(e.model_id, e.dataset_id): e for e in board.entries}
    index = {dataset_id: j for j, (dataset_id, _) in enumerate(board.datasets)}
    names = dict(board.datasets)
    n = max(len(board.datasets), 1)
    spread = min(8.0, 18.0 / n)
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
    for p, (metric, title, hint, unit) in enumerate(_PANELS):
        x0 = LABEL_W + p * (PANEL_W + GAP)
        points = []
        for i, row in enumerate(board.rows):
            for dataset_id, _ in board.datasets:
                entry = by_pair.get((row.model_id, dataset_id))
                stat = None if entry is None else region_stat(entry.summary, region, metric)
                if stat is not None:
                    points.append((i, dataset_id, stat))
        found = found or bool(points)
        ticks: tuple[float, ...]
        if metric == "dice":
            ticks = (0.0, 0.25, 0.5, 0.75, 1.0)
        else:
            upper = max((max(s.mean, s.q75 or 0.0) for _, _, s in points), default=1.0)
            ticks = nice_ticks(upper)
        top = ticks[-1]

        def x(value: float, x0: float = x0, top: float = top) -> float:
            return round(x0 + PANEL_W * min(max(value / top, 0.0), 1.0), 2)

        dots = []
        for i, dataset_id, stat in points:
            j = index[dataset_id]
            cy = round(rows[i].y + (j - (n - 1) / 2) * spread, 2)
            lo = stat.q25 if stat.q25 is not None else stat.mean
            hi = stat.q75 if stat.q75 is not None else stat.mean
            iqr = f" (IQR {lo:.4g} to {hi:.4g}{unit})" if stat.q25 is not None else ""
            dots.append(
                Dot(
                    cx=x(stat.mean),
                    cy=cy,
                    lo=x(lo),
                    hi=x(hi),
                    css=f"ds-{j % PALETTE}",
                    title=f"{board.rows[i].label} on {names[dataset_id]}: {region} {title} "
                    f"mean {stat.mean:.4f}{unit}{iqr}",
                )
            )
        panels.append(
            Panel(
                title=f"{region} {title}{unit and ' (mm)'}",
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
        width=WIDTH,
        height=int(plot_bottom + BOTTOM),
        plot_top=plot_top,
        plot_bottom=plot_bottom,
        rows=rows,
        panels=tuple(panels),
    )
