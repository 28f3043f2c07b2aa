"""The dashboard's pure parts (sessions: test_web_sessions.py): CSRF tokens compare safely,
redirects stay inside the dashboard, summaries (differentially private releases) are read
through the benchmark's plug-in and never read a missing value as zero, a figure the release
noise dominates shows its interval only and never ranks, the leaderboard ranks by the plug-in's
headline metric in its direction, chart whiskers are the releases' intervals and axes cover
every value."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from sealbench.benchmarks.interface import MetricRef
from sealbench.benchmarks.release import Release, column_mean
from sealbench.contract.pin import BenchmarkPin
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


BRATS = View.of(BenchmarkPin.parse("brats-2023-gli/1"))
#: Enough cases that every figure of a release is informative at the pin's epsilon.
MANY = 2000


def test_summary_figures_are_the_release_and_a_broken_one_reads_as_none_not_zero(
        h: Any) -> None:
    summary = h.brats_summary({"WT": 0.9, "TC": 0.6, "ET": 0.3}, MANY)
    stat = BRATS.stat(summary, "WT", "dice")
    assert stat is not None and stat.informative and stat.value == pytest.approx(0.9, abs=1e-12)
    # the interval shown is the release's own (sampling error and release noise), no quantile
    release = Release.from_json(summary["aggregates"]["release"])
    own = column_mean(release, "dice:WT")
    assert (stat.low, stat.high) == (own.low, own.high) and stat.low < 0.9 < stat.high
    assert not hasattr(stat, "q25") and not hasattr(stat, "std")
    assert BRATS.value(summary, MetricRef("dice")) == pytest.approx(0.6, abs=1e-12)
    assert BRATS.release(summary) == release
    assert BRATS.stat({"regions": "garbage"}, "WT", "dice") is None
    broken = h.brats_summary(0.9, MANY)
    columns = broken["aggregates"]["release"]["columns"]
    del columns[1]  # TC
    assert BRATS.value(broken, MetricRef("dice")) is None
    assert BRATS.stat(broken, "WT", "dice") is None and BRATS.release(broken) is None


def test_a_figure_the_noise_dominates_has_no_value_only_its_interval(h: Any) -> None:
    """5 cases at epsilon 1: the noise alone spans more than half of [0, 1] (not
    informative): the view gives no value, never a number or a zero, but the interval."""
    summary = h.brats_summary(0.8, 5)
    for group in (*BRATS.groups, None):
        stat = BRATS.stat(summary, group, "dice")
        assert stat is not None and not stat.informative and stat.value is None
        assert stat.interval is not None and stat.interval[1] - stat.interval[0] > 0.5
    assert BRATS.value(summary, MetricRef("dice")) is None


def test_bare_public_summary_is_read_too(h: Any) -> None:
    bare = h.brats_aggregates(0.5, MANY)
    assert BRATS.value(bare, MetricRef("dice")) == pytest.approx(0.5, abs=1e-12)


def test_benchmark_without_its_plugin_shows_nothing(h: Any) -> None:
    unknown = View.of(BenchmarkPin.parse("brats-1999/1"))
    assert unknown.plugin is None and unknown.groups == ()
    assert unknown.value(h.brats_summary(0.5, MANY), MetricRef("dice")) is None


def test_presentation_drives_groups_metrics_and_direction() -> None:
    assert BRATS.groups == ("WT", "TC", "ET")
    # the release carries Dice alone: no secondary metric (HD95 and the rest left the summary)
    assert BRATS.headline == MetricRef("dice") and BRATS.secondary is None
    assert not BRATS.lower_is_better(BRATS.headline)
    assert BRATS.metrics == (("dice", ""),)


def _entry(h: Any, rid: int, model: int, dataset: int, dice: float | None,
           n_cases: int = MANY) -> BoardEntry:
    summary = {} if dice is None else h.brats_summary(dice, n_cases)
    return BoardEntry(rid, model, f"m{model}", dataset, f"d{dataset}", summary, WHEN)


def test_board_ranks_by_mean_dice_and_leaves_gaps_empty(h: Any) -> None:
    board = build_board(
        [
            _entry(h, 1, 1, 10, 0.70),
            _entry(h, 2, 2, 10, 0.80),
            _entry(h, 3, 2, 11, 0.62),
            _entry(h, 4, 3, 11, None),
        ],
        BRATS,
    )
    assert [r.model_id for r in board.rows] == [2, 1, 3]
    assert board.rows[0].score == pytest.approx(0.71)  # mean over its two datasets
    assert board.rows[1].score == pytest.approx(0.70)
    assert board.rows[0].cells[0] is not None and board.rows[0].cells[1] is not None
    assert board.rows[1].cells[1] is None  # model 1 has no result on dataset 11
    assert board.rows[0].cells[0].secondary is None  # BraTS publishes Dice alone
    # a model without any value is listed last and not ranked
    assert board.rows[2].score is None and board.rows[2].rank is None
    assert [r.rank for r in board.rows[:2]] == [1, 2]


def test_figures_that_are_not_informative_never_count_or_rank(h: Any) -> None:
    """Model 1's 5-case result is not informative: its cell holds no value (its interval
    only), the model's score is its informative result alone; model 3, with nothing
    informative, is not ranked, though its 5-case value would be the best."""
    board = build_board(
        [
            _entry(h, 1, 1, 10, 0.99, n_cases=5),
            _entry(h, 2, 1, 11, 0.60),
            _entry(h, 3, 2, 10, 0.70),
            _entry(h, 4, 3, 10, 0.99, n_cases=5),
        ],
        BRATS,
    )
    assert [(r.model_id, r.rank) for r in board.rows] == [(2, 1), (1, 2), (3, None)]
    noisy = board.rows[1].cells[0]
    assert noisy is not None and noisy.headline is None and not noisy.informative
    assert noisy.interval is not None and noisy.interval[1] - noisy.interval[0] > 0.5
    assert board.rows[1].score == pytest.approx(0.60)
    assert board.rows[2].score is None and board.rows[2].cells[0] is not None
    assert board.rows[0].cells[0] is not None and board.rows[0].cells[0].informative


def test_better_model_ranks_first(h: Any) -> None:
    board = build_board([_entry(h, 1, 1, 10, 0.5), _entry(h, 2, 2, 10, 0.9)], BRATS)
    assert [r.model_id for r in board.rows] == [2, 1]


@pytest.mark.parametrize(("lower", "upper"), [(0.62, 0.93), (0.0, 1.0), (3.1, 17.4), (5.0, 5.0)])
def test_ticks_cover_the_values(lower: float, upper: float) -> None:
    ticks = nice_ticks(lower, upper)
    assert ticks[0] <= lower and ticks[-1] >= upper and len(ticks) >= 2
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1


def test_chart_dots_stay_inside_their_panel(h: Any) -> None:
    board = build_board(
        [_entry(h, 1, 1, 10, 0.7), _entry(h, 2, 2, 10, 0.95), _entry(h, 3, 2, 11, 0.2)], BRATS)
    charts = build_charts(board)
    assert [c.region for c in charts] == ["WT", "TC", "ET"]
    for chart in charts:
        # Dice alone (the release's one metric): one panel, three dots
        (panel,) = chart.panels
        assert len(panel.dots) == 3
        for dot in panel.dots:
            assert panel.x0 <= dot.lo <= dot.cx <= dot.hi <= panel.x1
            assert dot.lo < dot.hi and "95% interval" in dot.title and "IQR" not in dot.title


def test_chart_whisker_is_the_release_interval_and_noisy_figures_are_not_drawn(h: Any) -> None:
    board = build_board(
        [_entry(h, 1, 1, 10, 0.7, n_cases=200), _entry(h, 2, 2, 10, 0.9, n_cases=5)], BRATS)
    (entry,) = [e for e in board.entries if e.result_id == 1]
    stat = BRATS.stat(entry.summary, "WT", "dice")
    assert stat is not None and stat.low is not None and stat.high is not None
    wt = build_charts(board)[0]
    (dot,) = wt.panels[0].dots  # model 2's 5-case figure is not informative: no dot
    assert dot.title.startswith("m1 on d10: WT Dice mean 0.7000")
    assert f"{stat.low:.4f} to {stat.high:.4f}" in dot.title
    panel = wt.panels[0]
    bottom, top = float(panel.ticks[0].label), float(panel.ticks[-1].label)

    def x(value: float) -> float:
        return round(panel.x0 + (panel.x1 - panel.x0) * (value - bottom) / (top - bottom), 2)

    assert bottom <= stat.low and stat.high <= top  # the axis covers the whisker
    assert (dot.lo, dot.cx, dot.hi) == (x(stat.low), x(0.7), x(stat.high))


def test_no_chart_without_values(h: Any) -> None:
    assert build_charts(build_board([_entry(h, 1, 1, 10, None)], BRATS)) == ()
    assert build_charts(build_board([_entry(h, 1, 1, 10, 0.8, n_cases=5)], BRATS)) == ()
