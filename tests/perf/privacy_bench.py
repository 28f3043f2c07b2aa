"""Utility of private releases (issue 25): interval width against the non-private width, and
ranking agreement, over epsilon and cases per site, measured side by side in one run.

BraTS: per-case Dice drawn like the shipped models' (a reference around 0.90 and a weak baseline
around 0.62 mean Dice over WT/TC/ET, each with a tenth of cases missed), released per site with
the BraTS plug-in's spec (Dice per region, OpenDP Gaussian noise) and pooled by the plug-in. The
non-private width is the normal 95% interval from every case's exact value (what a board
computing from per-case values would show). Ranking: the board's rank-group rule (intervals that
overlap share a rank): "right" = the reference strictly above the weak model, "tied" = one rank
group, "wrong" = the weak model strictly above.

    python tests/perf/privacy_bench.py [--runs 200]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import numpy as np

from sealbench.benchmarks.brats.metrics import BRATS_2023_GLI_METRICS
from sealbench.benchmarks.brats.published import PublishedSummary, pool, release_spec
from sealbench.benchmarks.interface import MetricRef
from sealbench.benchmarks.release import OpenDPGaussian, release

SCENARIOS = {"demo 3x5": (3, 5), "site 1x50": (1, 50), "FeTS 32x50": (32, 50)}
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
MODELS = {"reference": (14.0, 1.6), "weak": (5.0, 3.0)}  # Beta(a, b) of a detected case's Dice


def _cases(rng: np.random.Generator, model: str, n: int) -> np.ndarray:
    a, b = MODELS[model]
    values = rng.beta(a, b, size=(n, 3))
    values[rng.random(n) < 0.1] = 0.0
    return values


def _summary(rows: np.ndarray, epsilon: float) -> PublishedSummary:
    spec = replace(release_spec(BRATS_2023_GLI_METRICS), epsilon=epsilon)
    made = release(rows, spec, OpenDPGaussian())
    return PublishedSummary(metrics_id="sealbench/brats-lesionwise", metrics_version=1,
                            n_cases=made.n_cases, release=made)


def _headline(summaries: list[PublishedSummary]) -> tuple[float | None, float, float]:
    figure = next(f for f in pool(summaries, BRATS_2023_GLI_METRICS).figures
                  if f.ref == MetricRef("dice"))
    assert figure.low is not None and figure.high is not None
    return figure.value, figure.low, figure.high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(20261204)
    print(f"{'scenario':<12} {'eps':>5} {'width private/non-private':>26} {'shown':>6} "
          f"{'right':>6} {'tied':>6} {'wrong':>6}")
    started = time.perf_counter()
    for name, (sites, per_site) in SCENARIOS.items():
        for epsilon in EPSILONS:
            ratios, shown = [], 0
            outcome = {"right": 0, "tied": 0, "wrong": 0}
            for _ in range(args.runs):
                boards = {}
                for model in MODELS:
                    rows = [_cases(rng, model, per_site) for _ in range(sites)]
                    value, low, high = _headline([_summary(r, epsilon) for r in rows])
                    every = np.concatenate(rows).mean(axis=1)
                    plain = 2 * 1.96 * every.std(ddof=1) / math.sqrt(every.size)
                    ratios.append((high - low) / plain)
                    shown += value is not None
                    boards[model] = (value, low, high)
                ref, weak = boards["reference"], boards["weak"]
                if ref[0] is None or weak[0] is None or not (ref[1] > weak[2] or weak[1] > ref[2]):
                    outcome["tied"] += 1
                elif ref[1] > weak[2]:
                    outcome["right"] += 1
                else:
                    outcome["wrong"] += 1
            n = args.runs
            print(f"{name:<12} {epsilon:>5.1f} {np.median(ratios):>26.2f} "
                  f"{shown / (2 * n):>6.0%} {outcome['right'] / n:>6.0%} "
                  f"{outcome['tied'] / n:>6.0%} {outcome['wrong'] / n:>6.0%}")
    print(f"({args.runs} simulated boards per row; {time.perf_counter() - started:.0f} s; "
          "width: median ratio of the pooled headline's 95% interval to the non-private one; "
          "shown: figures informative enough to be shown)")


if __name__ == "__main__":
    main()
