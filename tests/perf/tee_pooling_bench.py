"""Pooling inside the TEE (issue 27) against per-site private releases and exact figures,
measured side by side in one run: interval width against the non-private one, figures shown,
ranking agreement; then the aggregator's time and peak memory at FeTS scale.

Three boards over the same cases, per simulated board:
- **exact**: no privacy (BraTS: the normal 95% interval on every case's value; WDBC: the pooled
  release with the noise switched off, exact AUROC with DeLong's interval on the bins);
- **per-site private**: each site releases under the pin's ε (OpenDP), the board pools the
  releases (every site's noise adds up);
- **TEE-pooled**: every site's exact results pooled in the aggregator, one release at the same
  ε over all cases (``sealbench.benchmarks.pooling``).

BraTS: per-case Dice drawn like the shipped models' (``privacy_bench.MODELS``: a reference
around 0.81 and a weak baseline around 0.56 over WT/TC/ET, a tenth of cases missed), headline
mean Dice, under two mechanisms on the same cases (issue 41): **old**, the release before issue
41 (sigma from Bun & Steinke's zCDP conversion, no second moment: the sampling term at the
Bhatia-Davis bound), and **new**, the pin's today (sigma from the exact Gaussian curve, the
headline's private second moment: the sampling term read from the data); the goal at FeTS scale,
TEE-pooled at ε 1, is a headline interval at most 1.3 times the non-private one.
WDBC: the two shipped models' scores on the 398 held-out cases, sites drawn with
replacement (the demo's 3 sites as split, 3 x 5, FeTS 32 x 50). Width: median ratio of the 95%
interval to the exact board's on the same cases. Shown: figures informative enough to show.
Ranking (the board's rank-group rule, ``privacy_bench._outcome``) against the order of the two
models on all the board's cases exactly: right, tied (or not shown), wrong.

FeTS scale: 41 models x 32 sites x 50 cases. For each model the aggregator decrypts 32
``pool.sealed`` objects and opens the statistics documents (commitment check, JSON, the plug-in's
per-case parser) and pools them under one
OpenDP release; time and the peak of Python allocations (tracemalloc) over all 41 models.

    python tests/perf/tee_pooling_bench.py [--runs 200] [--epsilon 1 --epsilon 2]
        [--benchmark brats|wdbc|all] [--no-fets]
"""

from __future__ import annotations

import argparse
import math
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from privacy_bench import (
    MECHANISMS,
    MODELS,
    _board_sites,
    _cases,
    _outcome,
    _summary,
    _wdbc_scored,
    brats_spec,
)

from sealbench.benchmarks import pooling
from sealbench.benchmarks.brats.metrics import BRATS_2023_GLI_METRICS, CaseScores, RegionScores
from sealbench.benchmarks.brats.published import figures as brats_figures
from sealbench.benchmarks.brats.published import pool as brats_pool
from sealbench.benchmarks.interface import MetricRef
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import LocalExact, OpenDPGaussian
from sealbench.benchmarks.wdbc import summary as ws
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.envelope import DataKey
from sealbench.crypto.pool_statistics import decrypt_statistics, encrypt_statistics
from sealbench.crypto.sealing import generate_recipient_key, open_sealed, pooled_release_info, seal

Shown = tuple[float | None, float, float]
METHODS = ("per-site", "TEE")
BRATS_SCENARIOS = {"3x5": (3, 5), "32x50": (32, 50)}
WDBC_SCENARIOS: dict[str, tuple[int, int] | None] = {"demo 3 sites": None, "3x5": (3, 5),
                                                     "32x50": (32, 50)}


@dataclass
class _Row:
    ratios: list[float] = field(default_factory=list)
    shown: int = 0
    outcome: dict[str, int] = field(
        default_factory=lambda: {"right": 0, "tied": 0, "wrong": 0})


def _print_header(what: str) -> None:
    print(what)
    print(f"{'scenario':<13} {'eps':>4} {'board':<12} {'width/exact':>11} {'shown':>6} "
          f"{'right':>6} {'tied':>6} {'wrong':>6}")


def _median(ratios: list[float]) -> str:
    finite = [r for r in ratios if math.isfinite(r)]
    return f"{np.median(finite):.2f}" if finite else "n/a"


def _print_rows(name: str, epsilon: float, table: dict[str, _Row], boards: int) -> None:
    for method, row in table.items():
        print(f"{name:<13} {epsilon:>4g} {method:<12} {_median(row.ratios):>11} "
              f"{row.shown / (2 * boards):>6.0%} {row.outcome['right'] / boards:>6.0%} "
              f"{row.outcome['tied'] / boards:>6.0%} {row.outcome['wrong'] / boards:>6.0%}")


def _score(table: dict[str, _Row], method: str, shown: dict[str, Shown],
           exact: dict[str, Shown], first_above: bool) -> None:
    row = table[method]
    first, second = shown
    for model, figure in shown.items():
        row.shown += figure[0] is not None
        plain = exact[model][2] - exact[model][1]  # 0 where an exact AUROC is 1 at tiny n
        row.ratios.append((figure[2] - figure[1]) / plain if plain > 0 else math.nan)
    row.outcome[_outcome(shown[first], shown[second], first_above)] += 1


# -- BraTS -----------------------------------------------------------------------------------------


def _headline(figures: Sequence[object]) -> Shown:
    figure = next(f for f in figures if getattr(f, "ref", None) == MetricRef("dice"))
    return figure.value, figure.low, figure.high  # type: ignore[attr-defined]


def _brats(runs: int, epsilons: Sequence[float]) -> None:
    rng = np.random.default_rng(20261205)
    _print_header("BraTS: headline mean Dice, reference vs weak (old: before issue 41; new: "
                  "the pin today)")
    spec = BRATS_2023_GLI_METRICS
    goal: dict[str, float] = {}
    for name, (n_sites, per_site) in BRATS_SCENARIOS.items():
        for epsilon in epsilons:
            boards = [f"{method} {mechanism}" for method in METHODS for mechanism in MECHANISMS]
            table = {b: _Row() for b in boards}
            for _ in range(runs):
                rows = {m: [_cases(rng, m, per_site) for _ in range(n_sites)] for m in MODELS}
                exact: dict[str, Shown] = {}
                shown: dict[str, dict[str, Shown]] = {b: {} for b in boards}
                truth = {}
                for model, sites in rows.items():
                    every = np.concatenate(sites)
                    means = every.mean(axis=1)
                    truth[model] = float(means.mean())
                    half = 1.96 * means.std(ddof=1) / math.sqrt(means.size)
                    exact[model] = (truth[model], truth[model] - half, truth[model] + half)
                    for mechanism in MECHANISMS:
                        shown[f"per-site {mechanism}"][model] = _headline(brats_pool(
                            [_summary(r, epsilon, mechanism) for r in sites], spec).figures)
                        # the aggregator's release: one over every case (pool_exact's BraTS path)
                        shown[f"TEE {mechanism}"][model] = _headline(
                            brats_figures(_summary(every, epsilon, mechanism), spec))
                above = truth["reference"] > truth["weak"]
                for board in boards:
                    _score(table, board, shown[board], exact, above)
            _print_rows(name, epsilon, table, runs)
            if name == "32x50" and epsilon == 1.0:
                goal = {m: float(np.median(table[f"TEE {m}"].ratios)) for m in MECHANISMS}
    if goal:
        sigma = {m: brats_spec(1.0, m).sigma for m in MECHANISMS}
        print(f"FeTS 32x50 TEE-pooled at eps 1: headline width / non-private {goal['old']:.2f} "
              f"old (sigma {sigma['old']:.2f}, Bhatia-Davis) -> {goal['new']:.2f} new (sigma "
              f"{sigma['new']:.2f}, second moment); goal <= 1.3: "
              f"{'met' if goal['new'] <= 1.3 else 'NOT met'}")


# -- WDBC ------------------------------------------------------------------------------------------


def _wdbc(runs: int, epsilons: Sequence[float]) -> None:
    rng = np.random.default_rng(20261206)
    scored = _wdbc_scored()
    first, second = scored.scores
    results = {m: [ws.WdbcCaseResult(case_id=str(i), malignant=bool(scored.labels[i]),
                                     score=float(p[i])) for i in range(len(p))]
               for m, p in scored.scores.items()}
    _print_header(f"WDBC: pooled AUROC, {first} vs {second}")

    def auroc(summary: ws.WdbcSummary) -> Shown | None:
        """The AUROC figure; None where it is undefined (one class only, no noise)."""
        figure = ws.figures(summary)[0]
        if figure.low is None or figure.high is None:
            return None
        return figure.value, figure.low, figure.high

    for name, scale in WDBC_SCENARIOS.items():
        for epsilon in epsilons:
            spec = ws.release_spec(epsilon=epsilon)
            table = {m: _Row() for m in METHODS}
            used = 0
            for _ in range(runs):
                sites = _board_sites(rng, scored, scale)
                every = np.concatenate(sites)
                exact: dict[str, Shown] = {}
                private: dict[str, Shown] = {}
                tee: dict[str, Shown] = {}
                for model in scored.scores:
                    cases = [results[model][i] for i in every]
                    plain = auroc(ws.pooled_summary(cases, "wdbc/1", LocalExact(), spec))
                    if plain is None:
                        break  # a board of one class: no AUROC to compare (left out)
                    exact[model] = plain
                    site_summaries = [ws.summarise([results[model][i] for i in s], "wdbc/1",
                                                   OpenDPGaussian(), spec) for s in sites]
                    private[model] = auroc_pooled(ws.pool(site_summaries, spec).figures[0])
                    pooled = auroc(ws.pooled_summary(cases, "wdbc/1", OpenDPGaussian(), spec))
                    tee[model] = pooled if pooled is not None else (None, 0.0, 1.0)
                else:
                    first_value, second_value = exact[first][0], exact[second][0]
                    assert first_value is not None and second_value is not None
                    _score(table, "per-site", private, exact, first_value > second_value)
                    _score(table, "TEE", tee, exact, first_value > second_value)
                    used += 1
            _print_rows(f"{name} ({used})" if used != runs else name, epsilon, table, used)


def auroc_pooled(figure: object) -> Shown:
    low, high = getattr(figure, "low", None), getattr(figure, "high", None)
    if low is None or high is None:
        return None, 0.0, 1.0
    return getattr(figure, "value", None), low, high


# -- the aggregator at FeTS scale ------------------------------------------------------------------


def _brats_case(rng: np.random.Generator, case_id: str) -> CaseScores:
    regions = {}
    for region in BRATS_2023_GLI_METRICS.regions:
        dice = float(rng.beta(14, 1.6))
        regions[region] = RegionScores(
            dice=dice, hd95=float(rng.gamma(2, 2)), sensitivity=dice, specificity=1.0,
            lesion_dice=dice, lesion_hd95=float(rng.gamma(2, 2)), num_tp=1, num_fp=0,
            num_fn=0, gt_volume_mm3=float(rng.uniform(1e3, 1e5)),
            pred_volume_mm3=float(rng.uniform(1e3, 1e5)))
    return CaseScores(case_id=case_id, regions=regions)


def _fets(models: int = 41, sites: int = 32, per_site: int = 50) -> None:
    plugins = PluginRegistry()
    rng = np.random.default_rng(41)
    makers: dict[str, Callable[[str], object]] = {
        "brats-2023-gli": lambda cid: _brats_case(rng, cid),
        "wdbc": lambda cid: ws.WdbcCaseResult(case_id=cid, malignant=bool(rng.random() < 0.37),
                                              score=float(rng.random())),
    }
    print(f"aggregator at FeTS scale: {models} models x {sites} sites x {per_site} cases "
          "(pool.sealed decrypted, statistics documents opened and pooled under one OpenDP release "
          "per model, the release sealed to the registry)")
    for name, make in makers.items():
        plugin = plugins.get(name)
        # the documents the sites sealed (not timed: written in the sites' enclaves)
        sealed = []
        for m in range(models):
            docs = []
            for k in range(sites):
                run = f"m{m}-s{k}"
                results = [make(f"{run}-c{i}") for i in range(per_site)]
                doc, commitment = pooling.seal_statistics(plugin.ref, run, results)  # type: ignore[arg-type]
                dek = DataKey.generate()
                blob = encrypt_statistics(dek, run, commitment, doc)
                docs.append((run, dek, blob, commitment))
            sealed.append(docs)
        size = sum(len(blob) for _, _, blob, _ in sealed[0])
        registry, releases = generate_recipient_key(), []
        info = pooled_release_info("pool", "1", "sha256:" + "0" * 64)
        tracemalloc.start()
        started = time.perf_counter()
        for docs in sealed:
            stats = [pooling.open_statistics(
                         plugin, decrypt_statistics(dek, run, commitment, blob), commitment,
                         run_id=run)
                     for run, dek, blob, commitment in docs]
            summary = pooling.pool_exact(plugin, stats, OpenDPGaussian())
            # the release sealed to the registry's pool-release key, as the aggregator writes it
            releases.append(seal(canonical_json(summary.to_json()), registry.public_key(), info))
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        opened = time.perf_counter()
        for release in releases:  # the registry's side: one open per accepted release
            open_sealed(release, registry, info)
        opening = (time.perf_counter() - opened) / models
        print(f"  {name:<15} {elapsed:6.1f} s ({elapsed / models * 1000:5.0f} ms per model), "
              f"peak Python allocations {peak / 2**20:6.1f} MiB; one model's 32 documents "
              f"{size / 2**20:.1f} MiB; the registry opens a release in "
              f"{opening * 1000:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="simulated boards per row")
    parser.add_argument("--epsilon", action="append", type=float,
                        help="the privacy loss per release (default: 1 and 2)")
    parser.add_argument("--benchmark", choices=("brats", "wdbc", "all"), default="all")
    parser.add_argument("--no-fets", action="store_true", help="skip the aggregator timing")
    args = parser.parse_args()
    epsilons = tuple(args.epsilon or (1.0, 2.0))
    started = time.perf_counter()
    if args.benchmark in ("brats", "all"):
        _brats(args.runs, epsilons)
    if args.benchmark in ("wdbc", "all"):
        _wdbc(args.runs, epsilons)
    print(f"({args.runs} boards per row, {time.perf_counter() - started:.0f} s; width: median "
          "ratio of the 95% interval to the exact board's on the same cases)")
    if not args.no_fets:
        _fets()


if __name__ == "__main__":
    main()
