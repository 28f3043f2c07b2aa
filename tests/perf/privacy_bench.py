"""Utility of private releases (issues 25, 41): interval width against the non-private width,
coverage, figures shown and ranking agreement, over epsilon and case counts, the mechanism
before issue 41 and today's measured side by side in one run.

BraTS: per-case Dice drawn like the shipped models' (a reference around 0.81 and a weak baseline
around 0.56 mean Dice over WT/TC/ET, each with a tenth of cases missed: Dice 0), released with
the BraTS plug-in's spec (Dice per region, OpenDP Gaussian noise) over ``n`` cases: one site's
release, or the aggregator's TEE-pooled release over every site's ``n`` cases (the same
computation); ``--brats-sites K`` splits the cases over K per-site releases pooled on the board
instead. Two mechanisms on the same cases:

- **old** (before issue 41): sigma from Bun & Steinke's zCDP conversion at the stated (ε, δ), no
  second moment, the sampling term at the Bhatia-Davis bound;
- **new** (the pin today): sigma from the exact Gaussian curve (``ReleaseSpec.sigma``), and the
  headline's private second moment, so the sampling term is read from the data.

The non-private width is the normal 95% interval from every case's exact value (what a board
computing from per-case values would show). Coverage: the headline's interval holds the model's
population mean. Shown: figures informative enough to show. Ranking: the board's rank-group rule
(intervals that overlap share a rank): "right" = the reference strictly above the weak model.

WDBC: the two shipped models (logistic regression, MLP) scored once on the 398 held-out cases (the
171 cases they were trained on are left out), each site released with the plug-in's spec at each
epsilon (and as an exact release, the consented ``-exact`` variant) and pooled by the plug-in.
Scenarios: the demo's three sites as the demo splits them (100, 120, 178 cases; only the noise
varies), FeTS scale, 32 sites x 50 cases drawn with replacement from the 398 (one draw per simulated
board, every epsilon and both models on the same cases), and the larger resampled scales 32 x 2000
and 32 x 8000 (``--large-runs`` boards; or any ``--scale``), to find where the two models part.
Resampling repeats the 398 cases' own gap between the models: it shows what the board could resolve,
not that the models differ beyond those cases. Width: the pooled AUROC's 95% interval, and its ratio
to the exact release's on the same cases (DeLong on the bins, no noise: what an exact board shows).
Shown: the pooled AUROC informative (a value, so ranked); "site shown" the same per site. Ranking
against all the board's cases together: "right" = the board's two rank groups in the order of the
two models' AUROC on every case together (raw scores, no bins, no noise), "tied" = one rank group
(or a figure not shown), "wrong" = the other order; "= exact" = the private board's outcome is the
exact board's on the same cases.

    python tests/perf/privacy_bench.py [--runs 200] [--large-runs 50] [--benchmark brats|wdbc|all]
        [--scale SITESxCASES ...] [--epsilon EPS ...] [--brats-sites K]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from sealbench.benchmarks.brats.metrics import BRATS_2023_GLI_METRICS
from sealbench.benchmarks.brats.published import PublishedSummary, pool, release_spec
from sealbench.benchmarks.interface import MetricRef
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import (
    LocalExact,
    NoiseSource,
    OpenDPGaussian,
    ReleaseSpec,
    epsilon_of,
    release,
)
from sealbench.benchmarks.wdbc import summary as wdbc_summary
from sealbench.benchmarks.wdbc.data import load_wdbc, split_cases
from sealbench.benchmarks.wdbc.metrics import auroc as exact_auroc

#: BraTS: total cases (issue 41 part 10's sizes) and the epsilons per release.
BRATS_CASES = (5, 12, 50, 500, 1600)
BRATS_EPSILONS = (0.5, 1.0, 2.0, 4.0)
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
MODELS = {"reference": (14.0, 1.6), "weak": (5.0, 3.0)}  # Beta(a, b) of a detected case's Dice
#: Each model's population mean of the headline (a tenth of cases missed, Dice 0).
POPULATION = {m: 0.9 * a / (a + b) for m, (a, b) in MODELS.items()}
MECHANISMS = ("old", "new")


def _cases(rng: np.random.Generator, model: str, n: int) -> np.ndarray:
    a, b = MODELS[model]
    values = rng.beta(a, b, size=(n, 3))
    values[rng.random(n) < 0.1] = 0.0
    return values


def bun_steinke_rho(epsilon: float, delta: float) -> float:
    """The zCDP rho the first calibration used at (ε, δ): ``(√(ε + L) - √L)²``, ``L = ln 1/δ``
    (Bun & Steinke 2016, Prop. 1.3 inverted)."""
    log = math.log(1 / delta)
    return (math.sqrt(epsilon + log) - math.sqrt(log)) ** 2


def brats_spec(epsilon: float, mechanism: str = "new") -> ReleaseSpec:
    """The BraTS pin's release at ``epsilon``: today's (``new``), or the one before issue 41
    (``old``: no second moment, and the sigma of Bun & Steinke's conversion, which the exact
    curve states as a smaller ε; the noise is the same)."""
    spec = replace(release_spec(BRATS_2023_GLI_METRICS), epsilon=epsilon)
    if mechanism == "new":
        return spec
    old = replace(spec, moments=())
    return replace(old, epsilon=epsilon_of(bun_steinke_rho(epsilon, spec.delta), spec.delta))


def _summary(rows: np.ndarray, epsilon: float, mechanism: str = "new") -> PublishedSummary:
    made = release(rows, brats_spec(epsilon, mechanism), OpenDPGaussian())
    return PublishedSummary(metrics_id="sealbench/brats-lesionwise", metrics_version=1,
                            n_cases=made.n_cases, release=made)


def _headline(summaries: list[PublishedSummary]) -> tuple[float | None, float, float]:
    figure = next(f for f in pool(summaries, BRATS_2023_GLI_METRICS).figures
                  if f.ref == MetricRef("dice"))
    assert figure.low is not None and figure.high is not None
    return figure.value, figure.low, figure.high


def _brats(runs: int, sites: int = 1) -> None:
    rng = np.random.default_rng(20261204)
    layout = ("one release over the cases (a site's, or TEE-pooled)" if sites == 1
              else f"{sites} per-site releases pooled on the board")
    print(f"BraTS headline mean Dice, {layout}; old | new")
    print(f"{'cases':>6} {'eps':>4} | {'width':>5} {'cover':>6} {'shown':>6} {'right':>6} | "
          f"{'width':>5} {'cover':>6} {'shown':>6} {'right':>6}")
    started = time.perf_counter()
    for n in BRATS_CASES:
        for epsilon in BRATS_EPSILONS:
            ratios: dict[str, list[float]] = {m: [] for m in MECHANISMS}
            covered = dict.fromkeys(MECHANISMS, 0)
            shown = dict.fromkeys(MECHANISMS, 0)
            right = dict.fromkeys(MECHANISMS, 0)
            for _ in range(runs):
                boards: dict[str, dict[str, tuple[float | None, float, float]]] = {
                    m: {} for m in MECHANISMS}
                for model in MODELS:
                    every = _cases(rng, model, n)
                    parts = np.array_split(every, sites)
                    means = every.mean(axis=1)
                    plain = 2 * 1.96 * means.std(ddof=1) / math.sqrt(n)
                    for mechanism in MECHANISMS:
                        value, low, high = _headline(
                            [_summary(rows, epsilon, mechanism) for rows in parts])
                        boards[mechanism][model] = (value, low, high)
                        ratios[mechanism].append((high - low) / plain if plain > 0 else math.inf)
                        covered[mechanism] += low <= POPULATION[model] <= high
                        shown[mechanism] += value is not None
                for mechanism in MECHANISMS:
                    right[mechanism] += _outcome(boards[mechanism]["reference"],
                                                 boards[mechanism]["weak"], True) == "right"
            cells = []
            for mechanism in MECHANISMS:
                finite = [r for r in ratios[mechanism] if math.isfinite(r)]
                width = f"{np.median(finite):5.2f}" if finite else "  n/a"
                cells.append(f"{width} {covered[mechanism] / (2 * runs):>6.1%} "
                             f"{shown[mechanism] / (2 * runs):>6.0%} "
                             f"{right[mechanism] / runs:>6.0%}")
            print(f"{n:>6} {epsilon:>4g} | {cells[0]} | {cells[1]}")
    print(f"({runs} simulated boards per row, both models; {time.perf_counter() - started:.0f} s; "
          "width: median ratio of the headline's 95% interval to the non-private one; cover: "
          "intervals holding the population mean; shown: figures informative enough to show; "
          "right: boards ranking the reference above the weak model)")


# -- WDBC ----------------------------------------------------------------------------------------

#: name -> (sites, cases per site), None for the demo's own sites; the large scales (where the
#: two models part, if anywhere) run ``--large-runs`` boards.
WDBC_SCENARIOS: dict[str, tuple[int, int] | None] = {
    "demo 3 sites": None, "FeTS 32x50": (32, 50), "32x2000": (32, 2000), "32x8000": (32, 8000)}
WDBC_LARGE = ("32x2000", "32x8000")
WDBC_EXACT = replace(wdbc_summary.RELEASE_SPEC, exact=True)
Shown = tuple[float | None, float, float]  # a pooled AUROC: value (None: not shown), low, high


@dataclass(frozen=True)
class _Scored:
    """Every held-out case: its label, the demo sites' case indices, and per model its score
    and release row."""

    labels: np.ndarray
    sites: tuple[np.ndarray, ...]
    scores: dict[str, np.ndarray]
    rows: dict[str, np.ndarray]


def _wdbc_scored() -> _Scored:
    plugin = PluginRegistry().get("wdbc")
    split = split_cases(load_wdbc())
    cases = [c for site in split.sites.values() for c in site]
    bounds = np.cumsum([0, *(len(site) for site in split.sites.values())])
    scores, rows = {}, {}
    for shipped in plugin.shipped_models:
        runner = plugin.load_model(plugin.model_bytes(shipped.name))
        results = [plugin.score(c, runner.predict(c)) for c in cases]
        typed = [r for r in results if isinstance(r, wdbc_summary.WdbcCaseResult)]
        assert len(typed) == len(cases) and all(r.score is not None for r in typed)
        scores[shipped.name] = np.array([float(r.score or 0.0) for r in typed])
        rows[shipped.name] = wdbc_summary.contributions(typed)
    return _Scored(np.array([bool(c.malignant) for c in cases]),
                   tuple(np.arange(a, b) for a, b in itertools.pairwise(bounds)), scores, rows)


def _board_sites(rng: np.random.Generator, scored: _Scored,
                 scale: tuple[int, int] | None) -> Sequence[np.ndarray]:
    """One board's sites as case indices: the demo's own sites (``scale`` None), or ``scale``
    = (sites, cases per site) drawn with replacement from the held-out cases."""
    if scale is None:
        return scored.sites
    count, per_site = scale
    return [rng.integers(0, len(scored.labels), per_site) for _ in range(count)]


def _wdbc_board(sites: Sequence[np.ndarray], epsilon: float | None,
                noise: NoiseSource) -> tuple[Shown, int]:
    """One model's pooled AUROC from one release per site (its rows), and how many sites
    showed theirs."""
    spec = WDBC_EXACT if epsilon is None else wdbc_summary.release_spec(epsilon=epsilon)
    source = LocalExact() if spec.exact else noise
    summaries = [wdbc_summary.WdbcSummary(plugin="wdbc/1", n_cases=len(rows),
                                          release=release(rows, spec, source))
                 for rows in sites]
    site_shown = sum(wdbc_summary.figures(x)[0].value is not None for x in summaries)
    figure = wdbc_summary.pool(summaries, spec).figures[0]
    assert figure.ref == MetricRef("auroc") and figure.low is not None and figure.high is not None
    return (figure.value, figure.low, figure.high), site_shown


def _outcome(first: Shown, second: Shown, first_above: bool) -> str:
    """The board's rank-group outcome for two models (server/services/leaderboard.py: 95%
    intervals that overlap share a rank; a figure not shown is not ranked): "right" when the
    two rank groups are in the order of ``first_above``, "tied", or "wrong"."""
    if first[0] is None or second[0] is None or (second[1] <= first[2] and first[1] <= second[2]):
        return "tied"
    return "right" if (first[1] > second[2]) == first_above else "wrong"


@dataclass
class _Row:
    """One scenario at one epsilon, over its simulated boards."""

    ratios: list[float] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)
    shown: int = 0
    site_shown: int = 0
    agree: int = 0
    outcome: dict[str, int] = field(
        default_factory=lambda: {"right": 0, "tied": 0, "wrong": 0})


def _wdbc(runs: int, large_runs: int, scenarios: dict[str, tuple[int, int] | None],
          epsilons: tuple[float | None, ...]) -> None:
    rng = np.random.default_rng(20261205)
    noise = OpenDPGaussian()
    scored = _wdbc_scored()
    first, second = scored.scores  # the reference (logistic regression), then the MLP
    print(f"WDBC: pooled AUROC of {first} and {second}; cases from the {len(scored.labels)} "
          "held-out ones")
    print(f"{'scenario':<14} {'eps':>5} {'width':>7} {'/exact':>7} {'shown':>6} "
          f"{'site shown':>10} {'right':>6} {'tied':>6} {'wrong':>6} {'= exact':>7}")
    started = time.perf_counter()
    for name, scale in scenarios.items():
        boards_run = large_runs if name in WDBC_LARGE else runs
        table = {epsilon: _Row() for epsilon in (*epsilons, None)}  # None: the exact release
        halves, gaps, n_sites = [], [], 0
        for _ in range(boards_run):
            sites = _board_sites(rng, scored, scale)
            n_sites = len(sites)
            every = np.concatenate(sites)
            truth = {m: exact_auroc(scored.labels[every], p[every]).value
                     for m, p in scored.scores.items()}
            a, b = truth[first], truth[second]
            assert a is not None and b is not None
            site_rows = {m: [r[index] for index in sites] for m, r in scored.rows.items()}
            exact = {m: _wdbc_board(x, None, noise)[0] for m, x in site_rows.items()}
            exact_outcome = _outcome(exact[first], exact[second], a > b)
            halves.append((exact[first][2] - exact[first][1]
                           + exact[second][2] - exact[second][1]) / 2)
            first_value, second_value = exact[first][0], exact[second][0]
            assert first_value is not None and second_value is not None
            gaps.append(abs(first_value - second_value))
            for epsilon, row in table.items():
                boards = {}
                for model, x in site_rows.items():
                    boards[model], k = ((exact[model], len(sites)) if epsilon is None
                                        else _wdbc_board(x, epsilon, noise))
                    row.site_shown += k
                    row.shown += boards[model][0] is not None
                    row.widths.append(boards[model][2] - boards[model][1])
                    row.ratios.append(row.widths[-1] / (exact[model][2] - exact[model][1]))
                result = _outcome(boards[first], boards[second], a > b)
                row.outcome[result] += 1
                row.agree += result == exact_outcome
        n = boards_run
        for epsilon, row in table.items():
            label = "exact" if epsilon is None else f"{epsilon:g}"
            print(f"{name:<14} {label:>5} {np.median(row.widths):>7.4f} "
                  f"{np.median(row.ratios):>7.1f} {row.shown / (2 * n):>6.0%} "
                  f"{row.site_shown / (2 * n * n_sites):>10.0%} "
                  f"{row.outcome['right'] / n:>6.0%} {row.outcome['tied'] / n:>6.0%} "
                  f"{row.outcome['wrong'] / n:>6.0%} {row.agree / n:>7.0%}")
        # Without noise the rank groups part only when the gap between the two binned AUROCs
        # exceeds the sum of their half-widths, which shrinks as 1/sqrt(cases).
        cases = len(every)
        half, gap = float(np.median(halves)), float(np.median(gaps))
        print(f"  {name} ({n} boards): exact board's median sum of AUROC half-widths "
              f"{half:.4f}, median gap {gap:.4f}: parting them needs about "
              f"{cases * (half / gap) ** 2:,.0f} cases even without noise")
    print(f"({time.perf_counter() - started:.0f} s; width: median pooled AUROC 95% interval "
          "width, /exact: its median ratio to the exact release's on the same cases)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--benchmark", choices=("brats", "wdbc", "all"), default="all")
    parser.add_argument("--large-runs", type=int, default=50,
                        help="WDBC boards per row at the large scales (32x2000, 32x8000)")
    parser.add_argument("--scale", action="append", metavar="SITESxCASES",
                        help="WDBC: these resampled scales instead of the shipped scenarios "
                             "(--runs boards each)")
    parser.add_argument("--epsilon", action="append", type=float,
                        help=f"WDBC: these epsilons instead of {', '.join(map(str, EPSILONS))}")
    parser.add_argument("--brats-sites", type=int, default=1,
                        help="BraTS: split each board's cases over this many per-site releases "
                             "pooled on the board (default 1: one release over all of them)")
    args = parser.parse_args()
    if args.benchmark in ("brats", "all"):
        _brats(args.runs, args.brats_sites)
    if args.benchmark in ("wdbc", "all"):
        scenarios = dict(WDBC_SCENARIOS)
        if args.scale:
            sizes = [tuple(int(x) for x in scale.split("x")) for scale in args.scale]
            scenarios = {f"{k}x{n}": (k, n) for k, n in sizes}
        _wdbc(args.runs, args.large_runs, scenarios, tuple(args.epsilon or EPSILONS))


if __name__ == "__main__":
    main()
