"""Bring your own model: an exported MONAI SegResNet next to the shipped reference model.

    .venv/bin/python tests/perf/byo_model_bench.py [--cases 3] [--threads 2] [--size small]
        [--init-filters 16]

Exports a SegResNet (random weights: speed and memory do not depend on the values; the MONAI
BraTS recipe's blocks_down=(1, 2, 2, 4), blocks_up=(1, 1, 1), ``--init-filters`` 16 as there)
with ``sealbench.client.assets.model_export``, then runs each model over the same synthetic cases in
a fresh child process and prints, side by side: model size, seconds per case, peak RSS of the
inference process, and the ONNX Runtime execution provider that ran. Record results in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from sealbench.benchmarks.brats import BRATS_2023_GLI, OnnxSegmenter
from sealbench.benchmarks.brats.contract import BratsContract
from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes
from sealbench.benchmarks.brats.synthetic import generate_case

SIZES = {"small": (64, 64, 48), "full": BRATS_2023_GLI.shape}


def _child(model: str, shape: tuple[int, int, int], cases: int, threads: int,
           queue: mp.Queue) -> None:  # type: ignore[type-arg]
    contract: BratsContract = BRATS_2023_GLI.with_shape(shape)
    segmenter = OnnxSegmenter(Path(model).read_bytes(), contract, threads=threads)
    times = []
    for seed in range(cases):
        case = generate_case(seed, shape, contract)  # has the modalities segment() reads
        start = time.perf_counter()
        segmenter.segment(case)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((times, peak, segmenter.providers[0]))


def _run(model: Path, shape: tuple[int, int, int], cases: int,
         threads: int) -> tuple[list[float], float, str]:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    child = ctx.Process(target=_child, args=(str(model), shape, cases, threads, queue))
    child.start()
    result: tuple[list[float], float, str] = queue.get()
    child.join()
    return result


def main() -> None:
    import torch
    from monai.networks.nets import SegResNet

    from sealbench.client.assets import model_export
    from sealbench.client.assets import prepare as assets

    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--init-filters", type=int, default=16)
    args = parser.parse_args()
    shape = SIZES[args.size]
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp) / "reference.onnx"
        reference.write_bytes(load_model_bytes(load_definition().reference_model))
        segresnet = Path(tmp) / "segresnet.onnx"
        network = SegResNet(spatial_dims=3, in_channels=4, out_channels=4,
                            init_filters=args.init_filters, blocks_down=(1, 2, 2, 4),
                            blocks_up=(1, 1, 1))
        start = time.perf_counter()
        check = model_export.export_module(network, assets.definition_plugin("brats-small"),
                                           segresnet)
        export_s = time.perf_counter() - start
        assert check.parity is not None
        print(f"grid {'x'.join(map(str, shape))}, {args.cases} cases, {args.threads} threads; "
              f"SegResNet export + checks {export_s:.1f} s, parity max |diff| "
              f"{check.parity.max_abs_diff:.1e}")
        print(f"{'model':<12}{'MB':>8}{'s/case':>10}{'peak RSS MiB':>14}  provider")
        rows = {}
        for name, path in (("reference", reference), ("segresnet", segresnet)):
            times, peak, provider = _run(path, shape, args.cases, args.threads)
            rows[name] = (float(np.mean(times)), peak)
            print(f"{name:<12}{path.stat().st_size / 1e6:8.1f}{rows[name][0]:10.2f}"
                  f"{peak:14.0f}  {provider}")
        ratio_t = rows["segresnet"][0] / rows["reference"][0]
        ratio_m = rows["segresnet"][1] / rows["reference"][1]
        print(f"segresnet / reference: {ratio_t:.2f}x time per case, {ratio_m:.2f}x peak RSS")


if __name__ == "__main__":
    main()
