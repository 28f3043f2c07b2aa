"""BraTS 2025 scoring, side by side with the official evaluator, on full-size cases.

    .venv/bin/python tests/perf/brats2025_bench.py [--cases 4] [--repeat 2]

For each full-size (240x240x155, 1 mm) synthetic case with a resection cavity (label 4) and a
perturbed prediction (shifted, eroded or dilated, a lesion dropped, small false positives), this
times in one process, arrays in memory:

* the official ``BraTS_evaluation`` 0.0.10 evaluator (``panoptica`` 2.1.7, ``config_gli``),
* sealbench's :func:`~sealbench.benchmarks.brats.scoring2025.score_case` on the same arrays
  (and checks every value agrees),
* sealbench's BraTS 2023 scoring (:func:`~sealbench.benchmarks.brats.score_case`, WT/TC/ET),

and prints seconds per case and per group, and the ratio official / sealbench. The best of
``--repeat`` runs counts. Record the figures in docs/benchmarks.md. Needs the dev extra (the
official package is a test oracle, never a runtime dependency).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import time
import warnings
from collections.abc import Callable
from importlib.resources import files
from typing import Any, TypeVar

import numpy as np
from scipy import ndimage

from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, score_case
from sealbench.benchmarks.brats.scoring2025 import GLI_2025
from sealbench.benchmarks.brats.scoring2025 import score_case as score_2025
from sealbench.benchmarks.brats.synthetic import generate_case

T = TypeVar("T")
SEEDS = [930_000 + i for i in range(20)]


def full_size_pair(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A full-size truth (the synthetic generator's tumour plus a resection cavity) and a
    perturbed prediction."""
    rng = np.random.default_rng(seed)
    truth = generate_case(seed, foci=int(rng.integers(1, 4))).classes.copy()
    tumour = np.argwhere(truth > 0)
    centre = tumour.mean(axis=0) if len(tumour) else np.array(truth.shape) / 2
    offset = rng.normal(0, 12, 3)
    grid = np.ogrid[tuple(slice(0, n) for n in truth.shape)]
    radii = rng.uniform(6, 14, 3)
    cavity = sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre + offset, radii,
                                                       strict=True)) <= 1.0
    truth[cavity & (truth == 0)] = 4
    pred = np.roll(truth, int(rng.integers(-2, 3)), axis=int(rng.integers(0, 3)))
    for label in (1, 3, 4):
        mask = pred == label
        if rng.uniform() < 0.5:
            pred[mask & ~ndimage.binary_erosion(mask)] = 2 if label != 4 else 0
        else:
            grown = ndimage.binary_dilation(mask) & (pred == 2)
            pred[grown] = label
    for _ in range(int(rng.integers(2, 12))):
        z, y, x = (int(rng.integers(20, n - 20)) for n in truth.shape)
        pred[z:z + int(rng.integers(1, 4)), y:y + 2, x:x + 2] = int(rng.integers(1, 5))
    return truth, pred


def _best(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    assert out is not None
    return best, out


def _same(a: Any, b: Any) -> float:
    """The largest difference between two official-shaped values (inf for a shape mismatch)."""
    if isinstance(a, dict):
        if list(a) != list(b):
            return math.inf
        return max((_same(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        if len(a) != len(b):
            return math.inf
        return max((_same(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    x, y = float(a), float(b)
    if math.isnan(x) or math.isnan(y):
        return 0.0 if math.isnan(x) and math.isnan(y) else math.inf
    if math.isinf(x) or math.isinf(y):
        return 0.0 if x == y else math.inf
    return abs(x - y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from panoptica import Panoptica_Evaluator  # the oracle: dev extra only

    with contextlib.redirect_stdout(io.StringIO()):
        official = Panoptica_Evaluator.load_from_config(
            str(files("brats_evaluation").joinpath("configs", "config_gli.yaml")))
    spacing = (1.0, 1.0, 1.0)
    n_groups = len(GLI_2025.groups)
    t_off, t_ours, t_2023, worst = [], [], [], 0.0
    for seed in SEEDS[:args.cases]:
        truth, pred = full_size_pair(seed)

        def run_official(truth: np.ndarray = truth, pred: np.ndarray = pred) -> dict[str, Any]:
            with contextlib.redirect_stdout(io.StringIO()):
                return {k: r.to_dict(True) for k, r in official.evaluate(
                    pred, truth, voxelspacing=spacing).items()}

        a, off = _best(run_official, args.repeat)
        b, ours = _best(lambda t=truth, p=pred: score_2025(p, t, spacing, GLI_2025), args.repeat)
        legacy_pred = np.where(pred == 4, 0, pred).astype(np.uint8)
        legacy_truth = np.where(truth == 4, 0, truth).astype(np.uint8)
        c, _ = _best(lambda t=legacy_truth, p=legacy_pred: score_case(
            p, t, BRATS_2023_GLI_METRICS, spacing), args.repeat)
        diff = max(_same(off[g], ours[g]) for g in off)
        worst = max(worst, diff)
        t_off.append(a)
        t_ours.append(b)
        t_2023.append(c)
        print(f"seed {seed}: official {a:.3f} s, sealbench 2025 {b:.3f} s (x{a / b:.1f}), "
              f"sealbench 2023 {c:.3f} s; max |difference| {diff:.2e}")
    mo, mu, m3 = (float(np.mean(t)) for t in (t_off, t_ours, t_2023))
    print(f"\n{args.cases} full-size cases, {n_groups} groups (gli), best of {args.repeat}:")
    print(f"  official BraTS_evaluation 0.0.10: {mo:.3f} s/case, {mo / n_groups:.3f} s/group")
    print(f"  sealbench brats-2025-gli/1:       {mu:.3f} s/case, {mu / n_groups:.3f} s/group")
    print(f"  ratio official / sealbench:       x{mo / mu:.1f}")
    print(f"  sealbench brats-2023-gli/1:       {m3:.3f} s/case, {m3 / 3:.3f} s/region")
    print(f"  largest difference on any key:    {worst:.2e}")


if __name__ == "__main__":
    main()
