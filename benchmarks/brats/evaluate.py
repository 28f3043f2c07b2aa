"""Held-out evaluation of a model on synthetic full-size cases (the quality figures in
``docs/benchmarks.md``).

    python -m sealbench.benchmarks.brats.evaluate --model brats_unet brats_unet_weak --cases 20

Cases are generated from seeds ``900000..`` (never used for training), segmented with
:class:`OnnxSegmenter` and scored with the benchmark's metrics spec; the public summary and the
mean inference time per case of each model are printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Mapping, Sequence

from .cases import Case
from .contract import BRATS_2023_GLI, BratsContract
from .definition import load_definition, load_model_bytes
from .inference import OnnxSegmenter, remove_small_components
from .metrics import BRATS_2023_GLI_METRICS, CaseResult, MetricsSpec, score_case
from .summary import PublicSummary, aggregate
from .synthetic import case_id_for, generate_case

__all__ = ["HELD_OUT_SEED", "evaluate_models", "main"]

logger = logging.getLogger(__name__)

HELD_OUT_SEED = 900_000


def evaluate_models(models: Mapping[str, bytes], n_cases: int = 20, *,
                    contract: BratsContract = BRATS_2023_GLI,
                    spec: MetricsSpec = BRATS_2023_GLI_METRICS,
                    threads: int | None = None,
                    min_component_voxels: int = 0) -> dict[str, tuple[PublicSummary, float]]:
    """For each model: the summary over ``n_cases`` held-out synthetic cases (each generated
    once and given to every model) and its mean inference seconds per case. With
    ``min_component_voxels``, each model is also scored after removing smaller tumour
    components from its prediction (reported as ``<name>+cc<min_component_voxels>``)."""
    segmenters = {name: OnnxSegmenter(data, contract, threads=threads)
                  for name, data in models.items()}
    variants = [*models] + ([f"{n}+cc{min_component_voxels}" for n in models]
                            if min_component_voxels else [])
    results: dict[str, list[CaseResult]] = {name: [] for name in variants}
    seconds = dict.fromkeys(variants, 0.0)
    for i in range(n_cases):
        seed = HELD_OUT_SEED + i
        synthetic = generate_case(seed, contract.shape, contract)
        case = Case(case_id=case_id_for(seed % 100_000), modalities=synthetic.modalities,
                    affine=synthetic.affine, seg=None)
        truth = contract.label_map.from_class_indices(synthetic.classes)
        for name, segmenter in segmenters.items():
            start = time.perf_counter()
            prediction = segmenter.segment(case)
            seconds[name] += time.perf_counter() - start
            results[name].append(score_case(prediction, truth, spec, contract.spacing_mm,
                                            case_id=case.case_id))
            if min_component_voxels:
                cleaned = remove_small_components(prediction.copy(), min_component_voxels)
                variant = f"{name}+cc{min_component_voxels}"
                seconds[variant] = seconds[name]
                results[variant].append(score_case(cleaned, truth, spec, contract.spacing_mm,
                                                   case_id=case.case_id))
        logger.info("case %d/%d scored", i + 1, n_cases)
    return {name: (aggregate(results[name], spec), seconds[name] / n_cases) for name in variants}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the summary's mean Dice/HD95 per region as JSON."""
    parser = argparse.ArgumentParser(prog="python -m sealbench.benchmarks.brats.evaluate")
    parser.add_argument("--model", nargs="+", default=["brats_unet"],
                        help="shipped model names")
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-component-voxels", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    definition = load_definition()
    models = {name: load_model_bytes(definition.model(name)) for name in args.model}
    report = {}
    evaluated = evaluate_models(models, args.cases, threads=args.threads,
                                min_component_voxels=args.min_component_voxels)
    for name, (summary, seconds) in evaluated.items():
        report[name] = {
            "cases": summary.n_cases, "inference_seconds_per_case": round(seconds, 2),
            "mean": {region: {metric: round(stats.mean, 4) for metric, stats in metrics.items()
                              if metric in ("dice", "hd95", "lesion_dice", "lesion_hd95")}
                     for region, metrics in summary.regions.items()},
        }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
