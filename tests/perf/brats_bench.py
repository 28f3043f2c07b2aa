"""BraTS benchmark performance on full-size (240x240x155) synthetic cases.

    .venv/bin/python tests/perf/brats_bench.py [--cases 3] [--threads 2]

Prints, side by side on this machine: preparation seconds per case; in-memory case loading;
inference seconds per case and the inference process's peak RSS (a fresh child process that
loads the shipped reference model and runs the cases); metric seconds per case for sealbench's
HD95 vs DeepMind ``surface-distance`` vs ``medpy`` on identical inputs (and whether the HD95
values are identical); and all metrics of one case (every region, legacy and lesion-wise).
Record results in docs/performance.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI,
    BRATS_2023_GLI_METRICS,
    Case,
    OnnxSegmenter,
    load_case_from_bytes,
    score_case,
)
from sealbench.benchmarks.brats._surface import robust_hausdorff, surface_distances
from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes
from sealbench.benchmarks.brats.prepare import DATA_DIR, prepare_dataset
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case

T = TypeVar("T")
SEEDS = [910_000 + i for i in range(10)]


def _infer_child(prepared: str, case_ids: list[str], threads: int, queue: mp.Queue) -> None:
    model = load_model_bytes(load_definition().reference_model)
    segmenter = OnnxSegmenter(model, BRATS_2023_GLI, threads=threads)
    root = Path(prepared) / DATA_DIR / "cases"
    times, predictions = [], {}
    for case_id in case_ids:
        files = {p.name: p.read_bytes() for p in (root / case_id).iterdir()}
        case = load_case_from_bytes(files, BRATS_2023_GLI)
        start = time.perf_counter()
        predictions[case_id] = segmenter.segment(case)
        times.append(time.perf_counter() - start)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    np.savez_compressed(Path(prepared) / "predictions.npz", **predictions)
    queue.put((times, peak_mib))


def _timed(fn: Callable[[], T], repeat: int = 1) -> tuple[float, T]:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value  # repeat >= 1, so value is bound


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import medpy.metric.binary as medpy_binary
    import surface_distance

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    contract, spec = BRATS_2023_GLI, BRATS_2023_GLI_METRICS
    seeds = SEEDS[: args.cases]
    with tempfile.TemporaryDirectory() as tmp:
        raw, prepared = Path(tmp) / "raw", Path(tmp) / "prepared"
        for seed in seeds:
            write_case(generate_case(seed), raw, case_id_for(seed % 100_000), contract)
        prep_s, report = _timed(lambda: prepare_dataset(raw, prepared, contract))
        case_ids = list(report.accepted)
        files = {p.name: p.read_bytes()
                 for p in (prepared / DATA_DIR / "cases" / case_ids[0]).iterdir()}
        load_s, case = _timed(lambda: load_case_from_bytes(files, contract), repeat=3)
        assert isinstance(case, Case) and case.seg is not None
        queue: mp.Queue = mp.get_context("spawn").Queue()
        child = mp.get_context("spawn").Process(
            target=_infer_child, args=(str(prepared), case_ids, args.threads, queue))
        child.start()
        infer_times, peak_mib = queue.get()
        child.join()
        predictions = np.load(prepared / "predictions.npz")
        print(f"cases: {len(case_ids)} full-size (240x240x155), threads: {args.threads}")
        print(f"preparation            {prep_s / len(case_ids):7.2f} s/case")
        print(f"load case from bytes   {load_s:7.2f} s/case")
        print(f"inference (whole vol.) {np.mean(infer_times):7.2f} s/case "
              f"(min {min(infer_times):.2f}, max {max(infer_times):.2f}); "
              f"peak RSS of the inference process {peak_mib:.0f} MiB")
        print("HD95 of one region, seconds (best of 3) and values:")
        print(f"  {'case/region':28s} {'sealbench':>10s} {'surf-dist':>10s} {'medpy':>8s}"
              f"   {'HD95 ours':>10s} {'surf-dist':>10s} {'medpy pooled':>12s}")
        all_metric_s = []
        for case_id in case_ids:
            files = {p.name: p.read_bytes()
                     for p in (prepared / DATA_DIR / "cases" / case_id).iterdir()}
            truth = load_case_from_bytes(files, contract).seg
            assert truth is not None
            pred = predictions[case_id]
            for region in spec.regions:
                gt_m = spec.label_map.region_mask(truth, region)
                pr_m = spec.label_map.region_mask(pred, region)
                if not gt_m.any() or not pr_m.any():
                    continue
                ours_s, ours = _timed(lambda g=gt_m, p=pr_m: robust_hausdorff(
                    surface_distances(g, p, contract.spacing_mm), 95), repeat=3)
                sd_s, sd = _timed(lambda g=gt_m, p=pr_m: surface_distance.compute_robust_hausdorff(
                    surface_distance.compute_surface_distances(g, p, contract.spacing_mm), 95),
                    repeat=3)
                mp_s, pooled = _timed(lambda g=gt_m, p=pr_m: medpy_binary.hd95(
                    p, g, voxelspacing=contract.spacing_mm))
                same = "identical" if ours == sd else f"DIFF {abs(ours - sd):.2e}"
                print(f"  {case_id + ' ' + region:28s} {ours_s:10.3f} {sd_s:10.3f} {mp_s:8.2f}"
                      f"   {ours:10.3f} {sd:10.3f} {pooled:12.3f}  {same}")
            metric_s, scores = _timed(lambda t=truth, p=pred: score_case(
                p, t, spec, contract.spacing_mm), repeat=3)
            all_metric_s.append(metric_s)
            dice = {r: round(s.dice, 3) for r, s in scores.regions.items()}
            print(f"  all metrics, all regions (legacy + lesion-wise) {case_id}: "
                  f"{metric_s:.2f} s; Dice {dice}")
        print(f"all metrics per case   {np.mean(all_metric_s):7.2f} s/case (max "
              f"{max(all_metric_s):.2f})")


if __name__ == "__main__":
    main()
