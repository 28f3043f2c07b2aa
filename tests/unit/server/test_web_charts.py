"""The dashboard's chart geometry (issue 31 item 7): a forest plot's axis is chosen from the
data (WDBC's AUROCs of 0.93 to 0.99 were one clump at the right edge of a fixed 0-1 axis),
shows the metric's floor when that costs little and otherwise says where it starts; a site
interval far wider than the rest ends in an arrow instead of squeezing the estimates; and a dot
plot's whisker is exactly its estimate's 95% interval, never stretched to reach the dot (an
estimate outside its interval is drawn hollow and says so)."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from sealbench.server.web._charts import (
    Chart,
    Dot,
    Forest,
    Panel,
    RowLabel,
    Tick,
    axis_note,
    build_forest,
    forest_axis,
)
from sealbench.server.web._render import TEMPLATES_DIR, Templates

Site = tuple[str, float | None, float | None, float | None, bool]
Models = dict[str, tuple[list[Site], tuple[float, float, float]]]


def _forests(models: Models) -> list[Forest]:
    """Forest plots of ``models`` on one shared axis, chosen as the pooled page chooses it."""
    drawn = [(v, lo, hi) for sites, _ in models.values() for _, v, lo, hi, _ in sites
             if v is not None]
    drawn += [pooled for _, pooled in models.values()]
    lows = [x for v, lo, _ in drawn for x in (v, lo) if x is not None]
    highs = [x for v, _, hi in drawn for x in (v, hi) if x is not None]
    core = [x for _, pooled in models.values() for x in pooled]
    core += [v for v, _, _ in drawn]
    ticks = forest_axis(lows, highs, unit="", bounded=True, core=core)
    note = axis_note(ticks, bounded=True)
    return [build_forest(i, name, sites, pooled, ticks, "", note)
            for i, (name, (sites, pooled)) in enumerate(models.items())]


def _estimates(forest: Forest) -> list[float]:
    return [r.cx for r in forest.rows if r.cx is not None and not r.diamond]


def _wdbc_like() -> Models:
    """Three models' AUROCs of 0.93 to 0.99 at two large sites, intervals about +-0.01."""
    out: Models = {}
    for name, auroc in (("logreg", 0.93), ("mlp", 0.96), ("boosted", 0.99)):
        sites: list[Site] = [(f"site-{k}", auroc - 0.004 * k, auroc - 0.004 * k - 0.012,
                              min(auroc - 0.004 * k + 0.012, 1.0), False) for k in range(2)]
        out[name] = (sites, (auroc - 0.002, auroc - 0.01, min(auroc + 0.006, 1.0)))
    return out


def test_wdbc_like_aurocs_spread_over_the_axis() -> None:
    forests = _forests(_wdbc_like())
    xs = [x for f in forests for x in _estimates(f)]
    f = forests[0]
    width = f.x1 - f.x0
    assert max(xs) - min(xs) > 0.4 * width, (xs, [t.label for t in f.ticks])
    labels = [t.label for t in f.ticks]
    assert float(labels[0]) >= 0.85 and float(labels[-1]) <= 1.0  # zoomed, within [0, 1]
    assert all(float(a) < float(b) for a, b in itertools.pairwise(labels))
    assert f.note == f"axis from {labels[0]}, not 0: zoomed on the intervals"
    for forest in forests:  # every drawn interval fits on the axis: nothing clipped
        for row in forest.rows:
            assert not row.clipped_low and not row.clipped_high
            assert row.lo is not None and row.hi is not None
            assert f.x0 <= row.lo <= row.hi <= f.x1


def test_one_wide_site_interval_ends_in_an_arrow_instead_of_squeezing_the_rest() -> None:
    models = _wdbc_like()
    sites, pooled = models["mlp"]
    models["mlp"] = ([*sites, ("small-site", 0.95, 0.61, 1.0, False)], pooled)
    forests = _forests(models)
    xs = [x for f in forests for x in _estimates(f)]
    f = forests[0]
    assert max(xs) - min(xs) > 0.4 * (f.x1 - f.x0)
    (small,) = [r for r in forests[1].rows if r.label == "small-site"]
    assert small.clipped_low and not small.clipped_high and small.lo == f.x0
    assert len(small.arrows) == 1 and small.arrows[0].startswith(f"{f.x0},")
    assert "95% CI 0.6100 to 1.0000" in small.title  # the whole interval, one hover away


def test_brats_like_dice_keeps_every_interval_and_says_where_the_axis_starts() -> None:
    models: Models = {name: ([(f"hospital-{k}", dice - 0.01 * k, dice - 0.01 * k - 0.02,
                       dice - 0.01 * k + 0.02, False) for k in range(3)],
                     (dice - 0.01, dice - 0.02, dice))
              for name, dice in (("ref", 0.85), ("small", 0.83), ("weak", 0.6))}
    forests = _forests(models)
    f = forests[0]
    bottom, top = float(f.ticks[0].label), float(f.ticks[-1].label)
    assert 0.0 < bottom <= 0.56 and 0.87 <= top <= 1.0
    assert f.note.startswith(f"axis from {f.ticks[0].label}, not 0")
    xs = [x for forest in forests for x in _estimates(forest)]
    assert max(xs) - min(xs) > 0.4 * (f.x1 - f.x0)
    for forest in forests:
        for row in forest.rows:
            assert not row.clipped_low and not row.clipped_high


def test_values_near_the_floor_keep_it_on_the_axis() -> None:
    ticks = forest_axis([0.12, 0.3], [0.5, 0.7], unit="", bounded=True, core=[0.2, 0.6])
    assert ticks[0] == 0.0 and ticks[-1] <= 1.0
    assert axis_note(ticks, bounded=True) == ""


def test_equal_values_get_a_readable_axis_around_them() -> None:
    for value in (1.0, 0.97, 0.5):
        ticks = forest_axis([value], [value], unit="", bounded=True, core=[value])
        assert 0.0 <= ticks[0] <= value <= ticks[-1] <= 1.0
        assert ticks[-1] - ticks[0] >= 0.02 and len(ticks) >= 3


def test_a_distance_runs_from_zero() -> None:
    ticks = forest_axis([3.1, 7.0], [9.0, 17.4], unit="mm", bounded=False)
    assert ticks[0] == 0.0 and ticks[-1] >= 17.4
    assert axis_note(ticks, bounded=False) == ""


def _chart(dot: Dot) -> Chart:
    panel = Panel("WT Dice", "higher is better", 190.0, 570.0,
                  (Tick(190.0, "0.5"), Tick(570.0, "1")), (dot,))
    return Chart("WT", 600, 120, 40.0, 80.0, 40.0, (RowLabel(60.0, "m1", 40.0, True),),
                 (panel,))


def _render(chart: Chart, tmp_path: Path) -> str:
    """The dashboard's own ``chart`` macro, rendered by its environment."""
    shutil.copyfile(TEMPLATES_DIR / "_macros.html", tmp_path / "_macros.html")
    (tmp_path / "one.html").write_text('{% from "_macros.html" import chart %}{{ chart(c) }}')
    return Templates(tmp_path).render("one.html", {"c": chart})


def test_whisker_is_the_interval_as_given_and_a_dot_outside_it_is_hollow(tmp_path: Path) -> None:
    inside = Dot(cx=400.0, cy=60.0, lo=350.0, hi=450.0, css="ds-0", title="m1 on d1")
    assert inside.inside
    svg = _render(_chart(inside), tmp_path)
    assert 'class="dot ds-0"' in svg
    assert 'x1="350.0" x2="450.0"' in svg  # the interval's ends, capped
    assert svg.count('class="cap"') == 2
    outside = Dot(cx=500.0, cy=60.0, lo=350.0, hi=450.0, css="ds-0", title="m1 on d1")
    assert not outside.inside
    svg = _render(_chart(outside), tmp_path)
    assert 'class="dot ds-0 outside"' in svg
    assert 'x1="350.0" x2="450.0"' in svg and 'x2="500.0"' not in svg  # never stretched
    no_interval = Dot(cx=400.0, cy=60.0, lo=None, hi=None, css="ds-1", title="m1 on d2")
    svg = _render(_chart(no_interval), tmp_path)
    assert no_interval.inside and 'class="interval"' not in svg and 'class="cap"' not in svg
