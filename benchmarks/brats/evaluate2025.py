"""Held-out figures of models on a BraTS 2025 pin (``brats-2025-gli``, ``brats-2025-met``).

    python -m sealbench.benchmarks.brats.evaluate2025 --pin brats-2025-gli/1-64x64x48 \\
        --model ref=ref.onnx --model weak=weak.onnx --seed 900000 --cases 12

Each case is the pin's demo case of its seed (:mod:`.tasks2025`, geometric anatomy), written as
a raw case, prepared by the plug-in and loaded as the enclave loads it
(:func:`.evaluate.prepared_case`), segmented by :class:`.inference.OnnxSegmenter` and scored by
the plug-in (:meth:`.plugin2025.Brats2025Benchmark.score`: the official 2025 figures). Printed
per model and group: the mean over cases of the global Dice and of ``pq_dsc``, NaN (nothing in
truth nor prediction) skipped as the official parser skips it, and the count of such cases.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sealbench.benchmarks import registry
from sealbench.benchmarks import release as rel
from sealbench.contract.pin import BenchmarkPin

from .evaluate import prepared_case
from .inference import OnnxSegmenter
from .plugin2025 import Brats2025Benchmark
from .results2025 import CaseScores2025
from .tasks2025 import generate_task_case

__all__ = ["evaluate_2025", "main"]


def _mean(values: Sequence[float]) -> float | None:
    finite = [v for v in values if not math.isnan(v)]
    return round(math.fsum(finite) / len(finite), 4) if finite else None


def evaluate_2025(models: Mapping[str, bytes], plugin: Brats2025Benchmark, *, seed: int,
                  n_cases: int, tumour_free: int = 0,
                  sites: int = 0) -> dict[str, dict[str, Any]]:
    """Per model: per group the mean global Dice (``dsc``) and ``pq_dsc`` over the held-out
    cases of seeds ``seed..seed+n_cases-1`` (then ``tumour_free`` tumour-free ones from
    ``seed + 10000``), the NaN count, the failures and the seconds per case; with ``sites``,
    also the private and exact pooled releases of the cases dealt to that many sites
    (:func:`released_and_pooled`)."""
    plan: list[tuple[int, int | None]] = [(seed + i, None) for i in range(n_cases)]
    plan += [(seed + 10_000 + j, 0) for j in range(tumour_free)]
    # as the enclave's runner segments (:meth:`.plugin2025.Brats2025Benchmark.load_model`)
    segmenters = {name: OnnxSegmenter(data, plugin.contract, undeclared=None)
                  for name, data in models.items()}
    scores: dict[str, list[CaseScores2025]] = {name: [] for name in models}
    failures = dict.fromkeys(models, 0)
    seconds = dict.fromkeys(models, 0.0)
    with tempfile.TemporaryDirectory(prefix="sealbench-evaluate2025-") as work:
        for case_seed, foci in plan:
            made = generate_task_case(plugin.demo_kind, case_seed, plugin.contract.shape,
                                      plugin.contract, foci=foci, anatomy="geometric")
            case_id = f"{plugin.case_prefix}-{case_seed % 100_000:05d}-000"
            case = prepared_case(made, case_id, plugin, Path(work))
            for name, segmenter in segmenters.items():
                start = time.perf_counter()
                prediction = segmenter.segment(case)
                seconds[name] += time.perf_counter() - start
                result = plugin.score(case, prediction)
                if isinstance(result, CaseScores2025):
                    scores[name].append(result)
                else:
                    failures[name] += 1
    out: dict[str, dict[str, Any]] = {}
    for name, rows in scores.items():
        groups = {}
        for group in (g.name for g in plugin.scoring.groups):
            dsc = [r.groups[group].global_bin_dsc for r in rows]
            pq = [r.groups[group].pq_dsc for r in rows]
            groups[group] = {"dsc": _mean(dsc), "pq_dsc": _mean(pq),
                             "nan": sum(math.isnan(v) for v in pq)}
        out[name] = {"groups": groups, "failures": failures[name], "cases": len(plan),
                     "seconds_per_case": round(seconds[name] / max(1, len(plan)), 3)}
        if sites:
            out[name]["released"] = released_and_pooled(plugin, rows, sites)
    return out


def released_and_pooled(plugin: Brats2025Benchmark, rows: Sequence[CaseScores2025],
                        sites: int) -> dict[str, Any]:
    """The cases dealt round-robin to ``sites`` sites; each site's summary released as an
    enclave releases it (the pin's release spec, OpenDP's Gaussian noise) and the releases
    pooled by the plug-in as the leaderboard pools them; beside it the same pooling of exact
    releases. Per figure: ``[value, low, high]``."""
    dealt = [list(rows[i::sites]) for i in range(sites)]

    def pooled(noise: rel.NoiseSource) -> dict[str, list[float | None]]:
        summaries = [plugin.summarise(site, noise) for site in dealt if site]
        figures = plugin.pool(summaries).figures
        return {str(f.ref): [_round(f.value), _round(f.low), _round(f.high)] for f in figures}

    return {"sites": sites, "private": pooled(rel.OpenDPGaussian()),
            "exact": pooled(rel.LocalExact())}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m sealbench.benchmarks.brats.evaluate2025",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pin", required=True, type=BenchmarkPin.parse,
                        help="e.g. brats-2025-gli/1-64x64x48")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FILE")
    parser.add_argument("--seed", type=int, default=900_000)
    parser.add_argument("--cases", type=int, default=12)
    parser.add_argument("--tumour-free", type=int, default=0)
    parser.add_argument("--sites", type=int, default=0,
                        help="also deal the cases to this many sites, release each site's "
                             "summary with differentially private noise as an enclave does and "
                             "pool them as the leaderboard does")
    args = parser.parse_args(argv)
    plugin = registry.load(args.pin)
    if not isinstance(plugin, Brats2025Benchmark):
        parser.error(f"{args.pin} is not a BraTS 2025 pin")
    models = {}
    for item in args.model:
        name, _, path = item.partition("=")
        if not path:
            parser.error(f"--model takes NAME=FILE, received {item!r}")
        models[name] = Path(path).read_bytes()
    if args.sites < 0:
        parser.error("--sites must be 0 or more")
    figures = evaluate_2025(models, plugin, seed=args.seed, n_cases=args.cases,
                            tumour_free=args.tumour_free, sites=args.sites)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
