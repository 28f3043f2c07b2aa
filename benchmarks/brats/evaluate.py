"""Held-out evaluation of shipped models on new synthetic cases (the quality figures in
``docs/benchmarks.md``), scored as the enclave scores them, and the tuning of the post-processing
on a validation split.

    python -m sealbench.benchmarks.brats.evaluate --seed 900000 --cases 20 \
        --model brats_unet brats_unet_weak
    python -m sealbench.benchmarks.brats.evaluate --seed 800000 --cases 8 --tune

Cases are generated from seeds ``S, S+1, ...`` (anatomy-based by default, :mod:`.anatomy`;
``--synthetic cartoon`` for :mod:`.synthetic`'s) and go the way a hospital's cases go to the
enclave (:func:`prepared_cases`, one case at a time): written as raw NIfTI files
(:func:`.synthetic.write_case`, the BraTS orientation), prepared by the plug-in
(:meth:`.plugin.BratsBenchmark.prepare`: reoriented to RAS+, z-scored, stored as int16) into a
temporary folder, and loaded from the prepared bytes the manifest lists by the plug-in's
layout (``open_dataset(...).load``), as the enclave loads a decrypted case. Each is segmented
with :class:`OnnxSegmenter` (the model's declared post-processing on, unless
``--no-postprocess``) and scored by the plug-in against the prepared ground truth, so a figure
here is the figure the enclave computes for the same case, not one on the generator's arrays.
One line per model and kind is printed, e.g. ``brats_unet lesion-wise Dice WT 0.83 TC 0.81 ET
0.77``. ``--tumour-free N`` adds N tumour-free cases (seeds ``S+10000, ...``, each that seed's
brain with no tumour), where any predicted tumour scores 0. ``--tune`` instead picks the
post-processing thresholds on the (prepared) cases (:func:`.postprocess.tune`) and prints them
as JSON. Training uses seeds ``100000..``: use seeds far from them (the defaults do).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from sealbench.crypto.manifest import Manifest

from .cases import Case
from .contract import BRATS_2023_GLI, BratsContract
from .definition import load_definition, load_model_bytes
from .inference import OnnxSegmenter
from .metrics import BRATS_2023_GLI_METRICS, CaseResult, MetricsSpec
from .plugin import BratsBenchmark
from .postprocess import PostProcess, tune
from .summary import MetricName, PublicSummary, aggregate
from .synthetic import SyntheticCase, case_id_for, generate_case, write_case

__all__ = ["HELD_OUT_SEED", "evaluate_models", "main", "prepared_case", "prepared_cases",
           "tune_postprocess"]

logger = logging.getLogger(__name__)

HELD_OUT_SEED = 900_000
VALIDATION_SEED = 800_000
#: With ``--tumour-free N``, tumour-free case ``j`` has seed ``S + TUMOUR_FREE_OFFSET + j``.
TUMOUR_FREE_OFFSET = 10_000


def _generator(kind: str) -> Callable[..., SyntheticCase]:
    if kind == "anatomy":
        from .anatomy import generate_anatomy_case

        return generate_anatomy_case
    return generate_case


def prepared_case(made: SyntheticCase, case_id: str, plugin: BratsBenchmark,
                  work: Path) -> Case:
    """``made`` as the enclave's plug-in sees it: written as a raw case folder
    (:func:`.synthetic.write_case`), prepared by ``plugin`` under ``work`` (reoriented to RAS+,
    z-scored and stored as int16, :mod:`.prepare`), and loaded, ground truth included, by the
    layout the plug-in opens from the prepared ``dataset.json``, from the prepared bytes the
    manifest lists (each checked against it), as the enclave loads a decrypted case. What was
    written under ``work`` is removed before returning;
    :class:`~sealbench.benchmarks.interface.PreparationError` when the plug-in rejects the
    case."""
    raw, out = work / f"raw-{case_id}", work / f"prepared-{case_id}"
    try:
        write_case(made, raw, case_id, plugin.contract)
        plugin.prepare(raw, out, strict=True)
        data = out / plugin.layout.data_dir
        manifest = Manifest.from_bytes((out / plugin.layout.manifest_file).read_bytes())
        layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
        (paths,) = layout.group(entry.path for entry in manifest.entries).values()
        files = {}
        for path in paths:
            files[path] = (data / path).read_bytes()
            manifest.verify(path, files[path])
        return layout.load(files)
    finally:
        shutil.rmtree(raw, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def prepared_cases(n_cases: int, seed: int, synthetic: str, plugin: BratsBenchmark,
                   tumour_free: int = 0) -> Iterator[Case]:
    """The ``n_cases`` cases of seeds ``seed, seed+1, ...`` as the generator draws them, then
    ``tumour_free`` tumour-free ones (seeds from ``seed + TUMOUR_FREE_OFFSET``), one at a time,
    each as the enclave loads it (:func:`prepared_case`; case id from the seed modulo 100000),
    through a temporary folder removed at the end."""
    generate = _generator(synthetic)
    plan: list[tuple[int, int | None]] = [(seed + i, None) for i in range(n_cases)]
    plan += [(seed + TUMOUR_FREE_OFFSET + j, 0) for j in range(tumour_free)]
    with tempfile.TemporaryDirectory(prefix="sealbench-evaluate-") as work:
        for case_seed, foci in plan:
            made = generate(case_seed, plugin.contract.shape, plugin.contract, foci=foci)
            case = prepared_case(made, case_id_for(case_seed % 100_000), plugin, Path(work))
            del made  # one case in memory at a time: the prepared one
            yield case


def evaluate_models(models: Mapping[str, bytes], n_cases: int = 20, *,
                    seed: int = HELD_OUT_SEED, synthetic: str = "anatomy",
                    contract: BratsContract = BRATS_2023_GLI,
                    spec: MetricsSpec = BRATS_2023_GLI_METRICS,
                    threads: int | None = None, postprocess: bool = True,
                    tumour_free: int = 0) -> dict[str, tuple[PublicSummary, float]]:
    """For each model: the summary over ``n_cases`` new synthetic cases from ``seed`` on and
    ``tumour_free`` tumour-free ones (each generated and prepared once and given to every model
    as the enclave loads it, :func:`prepared_cases`) and its mean inference seconds per case.
    Each case is scored as the plug-in on ``contract`` scores it in the enclave
    (:meth:`.plugin.BratsBenchmark.score`: a prediction it cannot score is a failure)."""
    plugin = BratsBenchmark(contract, spec)
    segmenters = {name: OnnxSegmenter(data, contract, threads=threads,
                                      postprocess="declared" if postprocess else None)
                  for name, data in models.items()}
    results: dict[str, list[CaseResult]] = {name: [] for name in models}
    seconds = dict.fromkeys(models, 0.0)
    total = n_cases + tumour_free
    for i, case in enumerate(prepared_cases(n_cases, seed, synthetic, plugin, tumour_free)):
        for name, segmenter in segmenters.items():
            start = time.perf_counter()
            prediction = segmenter.segment(case)
            seconds[name] += time.perf_counter() - start
            results[name].append(plugin.score(case, prediction))
        logger.info("case %d/%d scored", i + 1, total)
    return {name: (aggregate(results[name], spec), seconds[name] / total) for name in models}


def tune_postprocess(model: bytes, n_cases: int, *, seed: int = VALIDATION_SEED,
                     synthetic: str = "anatomy", contract: BratsContract = BRATS_2023_GLI,
                     threads: int | None = None,
                     tumour_free: int = 0) -> tuple[PostProcess, float]:
    """Post-processing thresholds for ``model`` tuned on ``n_cases`` validation cases and
    ``tumour_free`` tumour-free ones, each as the enclave loads it (:func:`prepared_cases`)."""
    plugin = BratsBenchmark(contract)
    segmenter = OnnxSegmenter(model, contract, threads=threads, postprocess=None)
    predictions, truths = [], []
    for i, case in enumerate(prepared_cases(n_cases, seed, synthetic, plugin, tumour_free)):
        assert case.seg is not None  # the plug-in's layout loads the ground truth
        predictions.append(segmenter.segment_raw(case))
        truths.append(contract.label_map.to_class_indices(case.seg))
        logger.info("validation case %d/%d segmented", i + 1, n_cases + tumour_free)
    return tune(predictions, truths, contract.spacing_mm)


def _line(name: str, kind: str, summary: PublicSummary, metric: MetricName) -> str:
    values = " ".join(f"{region} {summary.regions[region][metric].mean:.3f}"
                      for region in ("WT", "TC", "ET"))
    return f"{name} {kind} {values}"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: one line per model and kind (Dice, lesion-wise Dice, HD95, seconds)."""
    parser = argparse.ArgumentParser(prog="python -m sealbench.benchmarks.brats.evaluate")
    parser.add_argument("--model", nargs="*", default=["brats_unet"],
                        help="shipped model names (none: only --model-file)")
    parser.add_argument("--model-file", type=Path, nargs="+", default=[],
                        help="ONNX files to evaluate as well (named by their file stem), e.g. "
                             "training snapshots")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"first case seed (default {HELD_OUT_SEED}, {VALIDATION_SEED} with "
                             "--tune)")
    parser.add_argument("--cases", type=int, default=20,
                        help="cases as the generator draws them (about 5 %% tumour-free)")
    parser.add_argument("--tumour-free", type=int, default=0, metavar="N",
                        help=f"also N tumour-free cases (seeds from S+{TUMOUR_FREE_OFFSET}): a "
                             "model's false positives on healthy anatomy score Dice 0 there, "
                             "an empty prediction 1")
    parser.add_argument("--synthetic", choices=("anatomy", "cartoon"), default="anatomy")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-postprocess", action="store_true",
                        help="score the raw arg-max, without the declared post-processing")
    parser.add_argument("--tune", action="store_true",
                        help="tune the post-processing of the (first) model on the cases")
    args = parser.parse_args(argv)
    if args.cases < 0 or args.tumour_free < 0 or args.cases + args.tumour_free < 1:
        parser.error("--cases and --tumour-free must not be negative and give at least 1 case")
    if not args.model and not args.model_file:
        parser.error("name a model with --model or --model-file")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    definition = load_definition()
    models = {name: load_model_bytes(definition.model(name)) for name in args.model}
    for path in args.model_file:
        try:
            models[path.stem] = path.read_bytes()
        except OSError as exc:
            parser.error(f"--model-file {path}: {exc.strerror}")
    if args.tune:
        name = next(iter(models))
        chosen, score = tune_postprocess(
            models[name], args.cases, seed=VALIDATION_SEED if args.seed is None else args.seed,
            synthetic=args.synthetic, threads=args.threads, tumour_free=args.tumour_free)
        print(json.dumps({"model": name, "postprocess": chosen.model_dump(),
                          "mean_lesion_dice": round(score, 4)}))
        return 0
    evaluated = evaluate_models(models, args.cases,
                                seed=HELD_OUT_SEED if args.seed is None else args.seed,
                                synthetic=args.synthetic, threads=args.threads,
                                postprocess=not args.no_postprocess,
                                tumour_free=args.tumour_free)
    for name, (summary, seconds) in evaluated.items():
        print(_line(name, "Dice", summary, "dice"))
        print(_line(name, "lesion-wise Dice", summary, "lesion_dice"))
        print(_line(name, "HD95 mm", summary, "hd95"))
        print(f"{name} inference s/case {seconds:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
