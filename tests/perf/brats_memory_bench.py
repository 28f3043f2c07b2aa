"""Peak memory of BraTS inference on a full-size (240x240x155) case: whole grid vs the brain's
bounding box, one pass vs sliding window, side by side (the first line is the ratios' base).

    .venv/bin/python tests/perf/brats_memory_bench.py [--model brats_unet] [--threads 2]
        [--model-file other.onnx]

Each configuration runs in a fresh child process (so its peak RSS is its own): it builds one
anatomy-based case (seed 910000, never used in training; generated once by the parent and
loaded by each child from a temporary .npz), measures the RSS before inference,
loads the model into :class:`OnnxSegmenter` and segments the case once; the child's peak RSS
(``VmHWM``), the inference seconds, and the agreement of the labels with the whole-volume
pass are printed, with each peak as a ratio of the whole-volume one. The case and the model
are part of every figure (the enclave holds them too). Record results in docs/performance.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("whole grid, one pass", {"mode": "whole", "crop": False}),
    ("whole grid, sliding 128^3 0.5", {"mode": "sliding", "crop": False, "overlap": 0.5}),
    ("whole grid, sliding 128^3 0.125", {"mode": "sliding", "crop": False, "overlap": 0.125}),
    ("brain crop, sliding 128^3 0.125", {"mode": "sliding", "overlap": 0.125}),
    ("brain crop, one pass (default)", {}),
]


def _hwm_kib() -> int:
    """This process's peak RSS in KiB (VmHWM: reset at exec, unlike ``ru_maxrss``, which a
    spawned child inherits from its parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(model: bytes, case_file: Path, options: dict[str, Any], threads: int,
           queue: Any) -> None:
    from sealbench.benchmarks.brats import BRATS_2023_GLI, Case, OnnxSegmenter

    with np.load(case_file) as saved:
        case = Case(case_id="BraTS-GLI-10000-000",
                    modalities={m: saved[m] for m in BRATS_2023_GLI.modalities},
                    affine=saved["affine"], seg=None)
    before = _hwm_kib()
    segmenter = OnnxSegmenter(model, BRATS_2023_GLI, threads=threads, **options)
    start = time.perf_counter()
    labels = segmenter.segment(case)
    seconds = time.perf_counter() - start
    peak = _hwm_kib()
    queue.put((before, peak, seconds, labels))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="brats_unet")
    parser.add_argument("--model-file", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.model_file is not None:
        model = args.model_file.read_bytes()
        name = args.model_file.name
    else:
        from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes

        model = load_model_bytes(load_definition().model(args.model))
        name = args.model
    from sealbench.benchmarks.brats.anatomy import generate_anatomy_case

    made = generate_anatomy_case(910_000)
    case_file = Path(tempfile.mkdtemp()) / "case.npz"
    np.savez(case_file, affine=made.affine, **made.modalities)
    del made
    context = mp.get_context("spawn")
    print(f"model {name}: {len(model) / 1e6:.1f} MB; {args.threads} threads; "
          "peak RSS of a fresh process (case + model + inference)")
    reference: np.ndarray | None = None
    whole_peak = 0.0
    for label, options in CONFIGS:
        queue = context.Queue()
        child = context.Process(target=_child,
                                args=(model, case_file, options, args.threads, queue))
        child.start()
        before, peak, seconds, labels = queue.get()
        child.join()
        peak_gib, before_gib = peak / 2**20, before / 2**20
        if reference is None:
            reference, whole_peak = labels, peak_gib
        agree = float((labels == reference).mean())
        print(f"{label:32s} peak {peak_gib:5.2f} GiB (case alone {before_gib:4.2f}) "
              f"x{peak_gib / whole_peak:4.2f} of whole; {seconds:6.1f} s; "
              f"labels equal to whole-volume on {agree:.5f} of voxels")


if __name__ == "__main__":
    main()
