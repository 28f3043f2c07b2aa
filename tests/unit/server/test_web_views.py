"""The dashboard's pure parts (sessions: test_web_sessions.py): CSRF tokens compare safely,
redirects stay inside the dashboard, summaries are read through the benchmark's plug-in and never
read a missing value as zero, the leaderboard ranks by the plug-in's headline metric in its
direction, chart axes cover every value."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from sealbench.benchmarks.interface import MetricRef
from sealbench.benchmarks.registry import load
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.server.web._charts import build_charts, nice_ticks
from sealbench.server.web._sessions import tokens_match
from sealbench.server.web._state import safe_next
from sealbench.server.web._views import BoardEntry, View, build_board

WHEN = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expected", "received"), [("abc", "abd"), ("abc", ""), ("", ""), (None, "x"), ("abc", None)]
)
def test_forged_or_missing_csrf_token_does_not_match(
    expected: str | None, received: str | None
) -> None:
    assert not tokens_match(expected, received)


def test_matching_csrf_token_matches() -> None:
    assert tokens_match("same-token", "same-token")


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "https://evil.example/",
        "//evil.example",
        "/ui//evil.example",
        "/api/v1/audit",
        "/ui\\\\evil",
        "/ui/\r\nSet-Cookie:x",
        "ui/",
    ],
)
def test_redirect_outside_the_dashboard_refused(target: str | None) -> None:
    assert safe_next(target) == "/ui/"


def test_redirect_inside_the_dashboard_kept() -> None:
    assert safe_next("/ui/benchmarks/3/leaderboard?x=1") == "/ui/benchmarks/3/leaderboard?x=1"


BRATS = View.of("brats-2023-gli/1")


def _summary(dice: dict[str, float], hd95: dict[str, float] | None = None) -> dict[str, object]:
    """A run summary the BraTS plug-in validates, with the given per-region means."""
    plugin = load("brats-2023-gli/1")
    aggregates = plugin.summarise([plugin.failure("BraTS-GLI-00001-000", "x")],
        InsecureFixedNoise()).to_json()
    regions = aggregates["regions"]
    assert isinstance(regions, dict)
    for r, v in dice.items():
        regions[r]["dice"].update(mean=v, q25=v - 0.05, q75=v + 0.02)
    for r, v in (hd95 or {}).items():
        regions[r]["hd95"].update(mean=v, median=v, q25=v - 1.0, q75=v + 1.0)
    return {"aggregates": aggregates}


def test_summary_that_does_not_validate_reads_as_none_not_zero() -> None:
    summary = _summary({"WT": 0.9, "TC": 0.6, "ET": 0.3})
    stat = BRATS.stat(summary, "WT", "dice")
    assert stat is not None and stat.mean == 0.9 and stat.q25 == pytest.approx(0.85)
    assert BRATS.value(summary, MetricRef("dice")) == pytest.approx(0.6)
    assert BRATS.stat({"regions": "garbage"}, "WT", "dice") is None
    broken = _summary({"WT": 0.9})
    del broken["aggregates"]["regions"]["TC"]  # type: ignore[index]
    assert BRATS.value(broken, MetricRef("dice")) is None


def test_bare_public_summary_is_read_too() -> None:
    bare = _summary({"WT": 0.5, "TC": 0.5, "ET": 0.5})["aggregates"]
    assert BRATS.value(bare, MetricRef("dice")) == 0.5  # type: ignore[arg-type]


def test_benchmark_without_its_plugin_shows_nothing() -> None:
    unknown = View.of("brats-1999/1")
    assert unknown.plugin is None and unknown.groups == ()
    assert unknown.value(_summary({"WT": 0.5}), MetricRef("dice")) is None


def test_presentation_drives_groups_metrics_and_direction() -> None:
    assert BRATS.groups == ("WT", "TC", "ET")
    assert BRATS.headline == MetricRef("dice") and BRATS.secondary == MetricRef("hd95")
    assert not BRATS.lower_is_better(BRATS.headline) and BRATS.lower_is_better(BRATS.secondary)
    assert ("hd95", "mm") in BRATS.metrics and all(m != "num_tp" for m, _ in BRATS.metrics)


def _entry(rid: int, model: int, dataset: int, dice: float | None) -> BoardEntry:
    summary = {} if dice is None else _summary({"WT": dice, "TC": dice, "ET": dice}, {"WT": 5.0})
    return BoardEntry(rid, model, f"m{model}", dataset, f"d{dataset}", summary, WHEN)


def test_board_ranks_by_mean_dice_and_leaves_gaps_empty() -> None:
    board = build_board(
        [
            _entry(1, 1, 10, 0.70),
            _entry(2, 2, 10, 0.80),
            _entry(3, 2, 11, 0.62),
            _entry(4, 3, 11, None),
        ],
        BRATS,
    )
    assert [r.model_id for r in board.rows] == [2, 1, 3]
    assert board.rows[0].score == pytest.approx(0.71)  # mean over its two datasets
    assert board.rows[1].score == pytest.approx(0.70)
    assert board.rows[0].cells[0] is not None and board.rows[0].cells[1] is not None
    assert board.rows[1].cells[1] is None  # model 1 has no result on dataset 11
    assert board.rows[2].score is None and board.rows[2].rank == 3


def test_better_model_ranks_first() -> None:
    board = build_board([_entry(1, 1, 10, 0.5), _entry(2, 2, 10, 0.9)], BRATS)
    assert [r.model_id for r in board.rows] == [2, 1]


@pytest.mark.parametrize(("lower", "upper"), [(0.62, 0.93), (0.0, 1.0), (3.1, 17.4), (5.0, 5.0)])
def test_ticks_cover_the_values(lower: float, upper: float) -> None:
    ticks = nice_ticks(lower, upper)
    assert ticks[0] <= lower and ticks[-1] >= upper and len(ticks) >= 2
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1


def test_chart_dots_stay_inside_their_panel() -> None:
    board = build_board(
        [_entry(1, 1, 10, 0.7), _entry(2, 2, 10, 0.95), _entry(3, 2, 11, 0.2)], BRATS)
    charts = build_charts(board)
    assert [c.region for c in charts] == ["WT", "TC", "ET"]
    for chart in charts:
        for panel in chart.panels:
            for dot in panel.dots:
                assert panel.x0 <= dot.lo <= dot.cx <= dot.hi <= panel.x1
    # every validated summary has every region's HD95: three dots in each panel
    assert len(charts[0].panels[0].dots) == 3 and len(charts[1].panels[1].dots) == 3


def test_no_chart_without_values() -> None:
    assert build_charts(build_board([_entry(1, 1, 10, None)], BRATS)) == ()
