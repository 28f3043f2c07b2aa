"""The planner (benchmarks/planning.py) against the real release and estimate code: what it
predicts a board will read must be what releasing and pooling actually give."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from sealbench.benchmarks import planning
from sealbench.benchmarks import release as rel
from sealbench.benchmarks.presentation import (
    Direction,
    Group,
    MetricRef,
    MetricSpec,
    Presentation,
)

_SIMULATIONS = 200


class _Plugin:
    """A plug-in as the planner reads it: its presentation and release specs (a column mean
    headline over regions, as BraTS's Dice), at ε 1."""

    def __init__(self, *, tee: bool) -> None:
        self.presentation = Presentation(
            metrics=(MetricSpec("dice", "Dice", "", Direction.HIGHER, False),),
            groups=(Group("WT", "WT"), Group("TC", "TC"), Group("ET", "ET")),
            headline=MetricRef("dice"), columns=(MetricRef("dice"),))
        self.release_spec = rel.ReleaseSpec(
            columns=tuple(rel.Column(f"dice:{g}", 0.0, 1.0) for g in ("WT", "TC", "ET")))
        if tee:
            self.pooled_release_spec = self.release_spec


def _cases(n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-case values at 0 or 1, half each (per region alike): the spread is 0.5, the
    widest a value in [0, 1] can have, the planner's default and the estimate's bound alike."""
    column = np.array([i % 2 for i in range(n)], dtype=float)
    rng.shuffle(column)
    return np.stack([column, column, column], axis=1)


def _headline(releases: list[rel.Release]) -> rel.Estimate:
    """The headline as BraTS's plug-in pools it: the per-case mean over regions per release,
    then the case-weighted pool (benchmarks/brats/published.py)."""
    averages = [rel.ReleasedColumn(
        key="dice", low=0.0, high=1.0,
        sum=sum(r.column(f"dice:{g}").sum for g in ("WT", "TC", "ET")) / 3,
        sd=math.sqrt(sum(r.column(f"dice:{g}").sd ** 2 for g in ("WT", "TC", "ET"))) / 3)
        for r in releases]
    return rel.pooled_mean(averages, [r.n_cases for r in releases])


def _simulate(sites: int, cases: int, *, tee: bool) -> tuple[list[float], list[bool]]:
    rng = np.random.default_rng(sites * 1000 + cases)
    plugin = _Plugin(tee=tee)
    halves, informative = [], []
    for _ in range(_SIMULATIONS):
        data = [_cases(cases, rng) for _ in range(sites)]
        if tee:
            releases = [rel.release(np.concatenate(data), plugin.release_spec,
                                    rel.OpenDPGaussian())]
        else:
            releases = [rel.release(d, plugin.release_spec, rel.OpenDPGaussian()) for d in data]
        estimate = _headline(releases)
        centre = estimate.shown
        halves.append(max(estimate.high - centre, centre - estimate.low))
        informative.append(estimate.informative)
    return halves, informative


@pytest.mark.parametrize(("sites", "cases", "tee"), [
    (32, 50, True), (3, 200, True), (5, 400, False), (10, 300, False)])
def test_predicted_half_width_matches_releasing_and_pooling_within_ten_percent(
        sites: int, cases: int, tee: bool) -> None:
    planned = planning.plan(_Plugin(tee=tee), sites=sites, cases=cases)
    assert planned.pooled_in_tee is tee
    halves, _ = _simulate(sites, cases, tee=tee)
    simulated = statistics.median(halves)
    assert planned.pooled_half_width is not None
    assert abs(planned.pooled_half_width - simulated) <= 0.10 * simulated, (
        planned.pooled_half_width, simulated)


@pytest.mark.parametrize(("sites", "tee"), [(1, True), (4, False)])
def test_a_figure_shows_from_the_planned_case_count_and_not_well_before(
        sites: int, tee: bool) -> None:
    """At the planned count the estimate is informative; at two thirds of it, not (the
    rule is the noise's alone, so it holds draw by draw)."""
    plugin = _Plugin(tee=tee)
    noise = planning.figure_noise(plugin.release_spec, "dice", 1, releases=1 if tee else sites,
                                  tee_pooled=tee)
    assert noise is not None
    needed = noise.shows_from()
    per_site = math.ceil(needed / sites)
    _, shown = _simulate(sites, per_site, tee=tee)
    assert all(shown)
    _, early = _simulate(sites, max(1, (2 * needed) // (3 * sites)), tee=tee)
    assert not any(early)


def test_the_reason_is_computed_from_the_release_not_canned() -> None:
    plugin = _Plugin(tee=False)
    at_one = planning.reason_for(plugin, "dice", n_cases=10, n_sites=1, tee_pooled=False,
                                 epsilons=[1.0])
    plugin.release_spec = rel.ReleaseSpec(columns=plugin.release_spec.columns, epsilon=4.0)
    at_four = planning.reason_for(plugin, "dice", n_cases=10, n_sites=1, tee_pooled=False,
                                  epsilons=[4.0])
    assert at_one.startswith("privacy noise at ε 1 over 10 cases spreads ±")
    assert "ε 4 over 10 cases" in at_four
    needed = [int(t.rsplit("from about ", 1)[1].split()[0].replace(",", ""))
              for t in (at_one, at_four)]
    assert needed[0] > 2 * needed[1]  # more budget, fewer cases needed


def test_a_group_figure_is_one_column_and_a_ratio_mean_pays_for_its_count_column() -> None:
    spec = rel.ReleaseSpec(columns=(rel.Column("pq:a", 0.0, 1.0), rel.Column("pq:b", 0.0, 1.0),
                                    rel.Column("defined:a", 0.0, 1.0),
                                    rel.Column("defined:b", 0.0, 1.0)))
    assert planning.noise_factor(spec, "pq:a") == pytest.approx(math.sqrt(2))
    assert planning.noise_factor(spec, "pq") == pytest.approx(1.0)
    assert planning.noise_factor(spec, "auroc") is None


def test_singular_and_plural() -> None:
    assert planning.plural(1, "site") == "1 site"
    assert planning.plural(3, "site") == "3 sites"
    assert planning.plural(0, "case") == "0 cases"


def test_a_plugin_that_states_its_figure_noise_is_planned_by_it() -> None:
    """An AUROC-like figure whose noise is 2/n (Laplace over the statistic's own
    sensitivity): it shows from the smallest n with 4 * 1.96 * 2 / n <= 1, that is 16."""

    class _Stated(_Plugin):
        def figure_noise_se(self, metric: str, n_cases: int, *, epsilon: float,
                            tee_pooled: bool) -> float | None:
            return 2.0 / (epsilon * n_cases) if metric == "dice" else None

    plugin = _Stated(tee=True)
    noise = planning.figure_noise(plugin.release_spec, "dice", 10, tee_pooled=True,
                                  plugin=plugin)
    assert noise is not None
    assert noise.se == pytest.approx(0.2)
    assert noise.shows_from() == math.ceil(8 * rel.Z95)
    assert "shows from about 16 cases pooled in the TEE" in planning.reason_for(
        plugin, "dice", n_cases=10, n_sites=3, tee_pooled=True, epsilons=[1.0])


def test_wdbc_plans_its_pooled_auroc_by_its_own_sensitivity_and_keeps_the_split() -> None:
    """WDBC's TEE-pooled AUROC is released alone by Laplace at its share of the release's ε over
    its sensitivity 1/k (k = n/3): the plan reads that noise, and `--epsilon` rescales the
    whole split release (headline and breakdown), never adding ε to it."""
    from sealbench.benchmarks.registry import load
    from sealbench.benchmarks.wdbc import summary as wdbc_summary
    from sealbench.contract.pin import BenchmarkPin

    plugin = load(BenchmarkPin.parse("wdbc/1"))
    noise = planning.figure_noise(plugin.pooled_release_spec, "auroc", 220, tee_pooled=True,
                                  plugin=plugin)
    assert noise is not None
    share = wdbc_summary.AUROC_EPSILON_SHARE
    assert noise.se == pytest.approx(math.sqrt(2) / 73 / share)
    at_two = planning.plan(plugin, sites=2, cases=110, epsilon=2.0)
    at_one = planning.plan(plugin, sites=2, cases=110, epsilon=1.0)
    assert at_one.pooled_shows_from == planning.plan(plugin, sites=2, cases=110).pooled_shows_from
    assert at_two.pooled_shows_from is not None and at_one.pooled_shows_from is not None
    assert at_two.pooled_shows_from < at_one.pooled_shows_from
    assert at_one.pooled_half_width is not None and at_one.pooled_half_width < 0.06
