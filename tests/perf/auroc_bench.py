"""WDBC's TEE-pooled AUROC (issue 41 part 6), old against new, measured side by side in one run
on the same cases and printed as ratios to the non-private interval.

- **exact**: no privacy: the AUROC of the board's raw scores with DeLong's 95% interval
  (``benchmarks/wdbc/metrics.py``), what the private intervals are measured against;
- **old**: the pooled release before part 6 (version 2): one Gaussian release at the whole
  (ε, δ) holding the Mann-Whitney pair count and the class indicator beside the Brier column and
  the score bins, its sigma from Bun & Steinke's zCDP conversion (the calibration of then), the
  AUROC ``U/(P·N)`` from the noisy sums (Fieller, DeLong on the noisy bins);
- **new**: today's (version 3): the AUROC computed exactly over every case and released alone
  by Laplace at 0.95·ε with sensitivity 1/k (k a third of the cases,
  ``benchmarks/wdbc/private_auroc.py``), the breakdown Gaussian at the rest.

The two shipped models' scores on the held-out cases (``privacy_bench._wdbc_scored``); boards:
the demo's two sites (referral and screening, every held-out case: 220), the three demo sites
(398), and sites drawn with replacement from the 398 (3 x 50, FeTS scale 32 x 50). Per row:
median width of the 95% interval over the exact one, coverage of the AUROC of all 398 cases
(boards drawn with replacement only: a board of fixed cases has no sampling to cover), share of
figures shown, the board's rank-group outcome against the order of the two models on the
board's cases exactly (right, tied or not shown, wrong), and the median half-width.

    python tests/perf/auroc_bench.py [--runs 200] [--epsilon 1 --epsilon 2]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from privacy_bench import _board_sites, _outcome, _wdbc_scored, bun_steinke_rho

from sealbench.benchmarks.release import OpenDPGaussian, epsilon_of, release
from sealbench.benchmarks.wdbc import metrics
from sealbench.benchmarks.wdbc import summary as ws

Shown = tuple[float | None, float, float]
METHODS = ("old", "new")
SCENARIOS: dict[str, tuple[int, int] | str | None] = {
    "demo 2 sites": "demo", "3 sites": None, "3x50": (3, 50), "32x50": (32, 50)}


@dataclass
class _Row:
    ratios: list[float] = field(default_factory=list)
    halves: list[float] = field(default_factory=list)
    covered: int = 0
    shown: int = 0
    outcome: dict[str, int] = field(
        default_factory=lambda: {"right": 0, "tied": 0, "wrong": 0})


def _old(cases: list[ws.WdbcCaseResult], epsilon: float) -> Shown:
    """The version 2 pooled AUROC at ``epsilon`` under the calibration of then."""
    spec = ws.release_spec(epsilon=epsilon)
    spec = replace(spec, epsilon=epsilon_of(bun_steinke_rho(epsilon, spec.delta), spec.delta))
    rows = ws.contributions(cases)
    malignant = np.asarray([1.0 if c.malignant else 0.0 for c in cases])
    with_pairs = np.concatenate(
        [rows[:, :1], ws.pair_shares(cases)[:, None], malignant[:, None], rows[:, 1:]], axis=1)
    made = release(with_pairs, ws.legacy_pooled_release_spec(spec), OpenDPGaussian())
    figure = ws.figures(ws.WdbcSummary(plugin="wdbc/1", n_cases=len(cases), release=made))[0]
    return _shown(figure)


def _new(cases: list[ws.WdbcCaseResult], epsilon: float) -> Shown:
    summary = ws.pooled_summary(cases, "wdbc/1", OpenDPGaussian(),
                                ws.release_spec(epsilon=epsilon))
    return _shown(ws.figures(summary)[0])


def _shown(figure: object) -> Shown:
    low, high = getattr(figure, "low", None), getattr(figure, "high", None)
    if low is None or high is None:
        return None, 0.0, 1.0
    return getattr(figure, "value", None), low, high


def _run(runs: int, epsilons: Sequence[float]) -> None:
    rng = np.random.default_rng(20261207)
    scored = _wdbc_scored()
    first, second = scored.scores
    labels = scored.labels
    population = {m: metrics.auroc(labels, p).value for m, p in scored.scores.items()}
    results = {m: [ws.WdbcCaseResult(case_id=str(i), malignant=bool(labels[i]),
                                     score=float(p[i])) for i in range(len(p))]
               for m, p in scored.scores.items()}
    print(f"WDBC TEE-pooled AUROC, {first} vs {second}; old (version 2, pair count) | new "
          "(version 3, exact AUROC by Laplace)")
    print(f"{'board':<13} {'eps':>4} {'width/exact':>15} {'coverage':>13} {'shown':>11} "
          f"{'right':>11} {'tied':>11} {'wrong':>9} {'half-width':>13}")
    for name, scale in SCENARIOS.items():
        for epsilon in epsilons:
            table = {m: _Row() for m in METHODS}
            resampled = isinstance(scale, tuple)
            for _ in range(runs):
                if scale == "demo":
                    sites: Sequence[np.ndarray] = scored.sites[:2]
                else:
                    sites = _board_sites(rng, scored, scale if resampled else None)  # type: ignore[arg-type]
                every = np.concatenate(sites)
                exact: dict[str, metrics.Auroc] = {
                    m: metrics.auroc(labels[every], scored.scores[m][every])
                    for m in scored.scores}
                if any(a.ci_low is None for a in exact.values()):
                    continue
                first_above = (exact[first].value or 0) > (exact[second].value or 0)
                for method, make in (("old", _old), ("new", _new)):
                    row = table[method]
                    shown = {m: make([results[m][i] for i in every], epsilon)
                             for m in scored.scores}
                    for m, figure in shown.items():
                        plain = (exact[m].ci_high or 0) - (exact[m].ci_low or 0)
                        row.ratios.append((figure[2] - figure[1]) / plain if plain > 0
                                          else math.nan)
                        row.halves.append((figure[2] - figure[1]) / 2)
                        row.shown += figure[0] is not None
                        row.covered += figure[1] <= (population[m] or 0) <= figure[2]
                    row.outcome[_outcome(shown[first], shown[second], first_above)] += 1
            boards = sum(table["new"].outcome.values())

            def pair(values: dict[str, str]) -> str:
                return f"{values['old']:>6} | {values['new']:<6}"

            def median(xs: list[float]) -> str:
                finite = [x for x in xs if math.isfinite(x)]
                return f"{np.median(finite):.2f}" if finite else "n/a"

            cover = {m: (f"{table[m].covered / (2 * boards):.0%}" if resampled else "-")
                     for m in METHODS}
            print(f"{name:<13} {epsilon:>4g} "
                  f"{pair({m: median(table[m].ratios) for m in METHODS})} "
                  f"{pair(cover)} "
                  f"{pair({m: f'{table[m].shown / (2 * boards):.0%}' for m in METHODS})} "
                  + " ".join(pair({m: f"{table[m].outcome[o] / boards:.0%}" for m in METHODS})
                             for o in ("right", "tied", "wrong"))
                  + f" {pair({m: f'{np.median(table[m].halves):.3f}' for m in METHODS})}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="simulated boards per row")
    parser.add_argument("--epsilon", action="append", type=float,
                        help="the privacy loss of one pooled release (default: 1 and 2)")
    args = parser.parse_args()
    started = time.perf_counter()
    _run(args.runs, tuple(args.epsilon or (1.0, 2.0)))
    print(f"({args.runs} boards per row, {time.perf_counter() - started:.0f} s; width: median "
          "ratio of the 95% interval to DeLong's on the same cases, exact)")


if __name__ == "__main__":
    main()
