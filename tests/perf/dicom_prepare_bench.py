# mypy: disable-error-code="no-untyped-call"
"""DICOM ingestion at full size (issue 43): seconds per case and peak memory, the round trip
against the phantoms' own benchmark-space volumes, and the reference model's figures on prepared
vs direct cases, side by side.

    .venv/bin/python tests/perf/dicom_prepare_bench.py [--cases 2] [--first-seed 910100]
        [--threads 2] [--shape 240x240x155] [--isotropic] [--decompose]
        [--model [NAME=]FILE.onnx ...]

The parent writes the phantom DICOM studies (:mod:`sealbench.benchmarks.brats.ingest.phantom`:
240 x 240 x 155 truth, four series in their own geometries, planted identifiers, NIfTI
annotation in BraTS 2021 labels); a fresh child process (so its peak RSS, ``VmHWM``, is the
ingestion's own) ingests them with ``--threads`` threads (SimpleITK's and the BLAS pools) and
reports wall and CPU seconds per case. The parent then compares each prepared case with its
truth (Dice of WT, TC, ET and the brain mask) and runs the shipped reference model on the
prepared and the direct (truth) modalities. Goals: <= 60 s per case on 2 cores, <= 2 GiB, Dice
>= 0.95 on every region and the brain, the model's figures within 0.02. The per-case seconds
include conversion, registration, resampling, the review images and writing; not the phantom.
``--model`` (repeatable) runs these ONNX files instead of the shipped reference, each on the same
prepared and direct cases (a retrained model beside the one before it: ``git show
REV:benchmarks/brats/model/brats_unet.onnx > before.onnx``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

MAPPING = {1: "NETC", 2: "SNFH", 4: "ET"}


def _hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(studies: str, work: str, shape: tuple[int, int, int], threads: int,
           out: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    import SimpleITK as sitk  # noqa: N813

    from sealbench.benchmarks.brats.contract import BRATS_2023_GLI
    from sealbench.benchmarks.brats.ingest.pipeline import IngestOptions, ingest
    from sealbench.benchmarks.brats.ingest.sequences import DEFAULT_MAPPING

    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(threads)
    contract = BRATS_2023_GLI.with_shape(shape)
    mapping = DEFAULT_MAPPING.model_copy(update={"annotation_labels": MAPPING})
    times: list[tuple[float, float]] = []
    last = [time.perf_counter(), time.process_time()]

    def progress(done: int, total: int) -> None:
        now = [time.perf_counter(), time.process_time()]
        times.append((now[0] - last[0], now[1] - last[1]))
        last[:] = now

    start = time.perf_counter(), time.process_time()
    baseline = _hwm_mib()
    report = ingest(Path(studies), Path(work), contract, IngestOptions(mapping=mapping),
                    progress=progress)
    out.send({"times": times, "wall": time.perf_counter() - start[0],
              "cpu": time.process_time() - start[1], "peak_mib": _hwm_mib(),
              "baseline_mib": baseline, "ready": list(report.ready),
              "reviews": [c.model_dump(mode="json") for c in report.cases]})


def _acquired_and_back(array: np.ndarray, spec: Any, contract: Any) -> np.ndarray:
    """``array`` (a direct modality on the grid) acquired in ``spec``'s geometry (its spacing
    and tilt about the grid's centre, a thick slice the mean of three samples across it, as the
    phantom's scanner does) and resampled back cubically through the known geometry: what the
    protocol's resolution alone loses, without registration, extraction, noise or a head."""
    import SimpleITK as sitk  # noqa: N813

    from sealbench.benchmarks.brats.ingest.geometry import grid_image, to_array
    from sealbench.benchmarks.brats.ingest.phantom import rotation

    image = grid_image(contract, array)
    direction = rotation(spec.tilt_deg)
    sub = 3 if spec.spacing[2] > 1.5 else 1
    fine = (spec.spacing[0], spec.spacing[1], spec.spacing[2] / sub)
    centre = np.array(image.TransformContinuousIndexToPhysicalPoint(
        [(n - 1) / 2 for n in image.GetSize()]))
    size = [int(np.ceil(f / s)) for f, s in zip(spec.fov_mm, fine, strict=True)]
    size[2] -= size[2] % sub
    half = np.array([(n - 1) * s for n, s in zip(size, fine, strict=True)]) / 2
    samples = sitk.Image(size, sitk.sitkFloat32)
    samples.SetSpacing(fine)
    samples.SetDirection(tuple(direction.ravel()))
    samples.SetOrigin(tuple(centre - direction @ half))
    acquired = to_array(sitk.Resample(image, samples, sitk.Transform(), sitk.sitkBSpline, 0.0,
                                      sitk.sitkFloat32))
    acquired = acquired.reshape(size[0], size[1], -1, sub).mean(axis=3).astype(np.float32)
    slices = sitk.GetImageFromArray(np.ascontiguousarray(np.transpose(acquired, (2, 1, 0))))
    slices.SetSpacing(spec.spacing)
    slices.SetDirection(tuple(direction.ravel()))
    slices.SetOrigin(tuple(np.array(samples.GetOrigin())
                           + direction[:, 2] * fine[2] * (sub - 1) / 2))
    back = to_array(sitk.Resample(slices, image, sitk.Transform(), sitk.sitkBSpline, 0.0,
                                  sitk.sitkFloat32)).astype(np.float32)
    back[array <= 0] = 0.0
    return np.maximum(back, 0.0)


def _key(model: str, variant: str, region: str) -> str:
    """A row's key for one model's figure (no model name: the shipped reference alone)."""
    return f"model {model + ' ' if model else ''}{variant} {region}"


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * (a & b).sum() / max(int(a.sum() + b.sum()), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=910100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shape", default="240x240x155")
    parser.add_argument("--isotropic", action="store_true",
                        help="acquire every series at 1 mm isotropic (the preparation's own "
                             "loss, without the thick slices')")
    parser.add_argument("--decompose", action="store_true",
                        help="also run the model on cases that swap single sequences between "
                             "the prepared and the direct case, and on the direct case acquired "
                             "by the protocol's geometry and resampled back (where the model's "
                             "loss comes from)")
    parser.add_argument("--model", action="append", default=[], metavar="[NAME=]FILE",
                        help="an ONNX model to run instead of the shipped reference (repeat to "
                             "compare models on the same cases; NAME defaults to the file's stem)")
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.shape.split("x"))
    assert len(shape) == 3

    import nibabel as nib

    from sealbench.benchmarks.brats.cases import Case
    from sealbench.benchmarks.brats.contract import BRATS_2023_GLI
    from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes
    from sealbench.benchmarks.brats.inference import OnnxSegmenter
    from sealbench.benchmarks.brats.ingest.phantom import ISOTROPIC, SEQUENCES, write_study

    contract = BRATS_2023_GLI.with_shape((shape[0], shape[1], shape[2]))
    root = Path(tempfile.mkdtemp(prefix="dicom-bench-"))
    try:
        studies, work = root / "studies", root / "work"
        written = []
        t0 = time.perf_counter()
        for index in range(args.cases):
            written.append(write_study(studies, args.first_seed + index, contract, foci=1,
                                       sequences=ISOTROPIC if args.isotropic else SEQUENCES))
        print(f"{args.cases} phantom studies written in {time.perf_counter() - t0:.1f} s "
              f"(not counted)")
        load_before = os.getloadavg()[0]
        ctx = mp.get_context("spawn")
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, args=(str(studies), str(work), contract.shape,
                                                 args.threads, send))
        child.start()
        result = receive.recv()
        child.join()
        per_case = [w for w, _ in result["times"]]
        cpu_case = [c for _, c in result["times"]]
        print(f"ingestion, {args.threads} threads: {np.mean(per_case):.1f} s per case wall "
              f"(max {max(per_case):.1f}; goal <= 60), {np.mean(cpu_case):.1f} s CPU per case; "
              f"peak RSS {result['peak_mib']:.0f} MiB (goal <= 2048; "
              f"{result['peak_mib'] / 2048:.2f} of it); load average {load_before:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after (wall time is only clean near 0)")
        models = {"": load_model_bytes(load_definition().reference_model)}
        if args.model:
            models = {}
            for given in args.model:
                name, _, file = given.rpartition("=")
                models[name or Path(file).stem] = Path(file).read_bytes()
        segmenters = {name: OnnxSegmenter(data, contract, threads=args.threads)
                      for name, data in models.items()}
        # Folders and case ids pair up in order: pseudonyms are given in sorted folder order.
        folders = sorted(written, key=lambda s: s.folder.name)
        rows = []
        for study, review in zip(folders, result["reviews"], strict=True):
            case_id = review["case_id"]
            if review["status"] != "ready":
                print(f"{case_id}: rejected: {review['reason']}")
                continue
            folder = work / "cases" / case_id

            def load(part: str, folder: Path = folder, case_id: str = case_id) -> np.ndarray:
                return np.asarray(nib.load(folder / contract.file_name(case_id, part)).dataobj)

            truth = contract.label_map.from_class_indices(study.truth.classes)
            seg = load("seg")
            row: dict[str, Any] = {"case": case_id, "warnings": review["warnings"]}
            for region in ("WT", "TC", "ET"):
                row[region] = _dice(contract.label_map.region_mask(truth, region),
                                    contract.label_map.region_mask(seg, region))
            row["brain"] = _dice(study.brain, load("t1c") > 0)
            prepared = Case(case_id=case_id, affine=study.truth.affine, seg=None,
                            modalities={m: load(m).astype(np.float32)
                                        for m in contract.modalities})
            direct = Case(case_id=case_id, affine=study.truth.affine, seg=None,
                          modalities=dict(study.truth.modalities))
            variants = [("prepared", prepared), ("direct", direct)]
            if args.decompose:
                spec = {s.modality: s for s in (ISOTROPIC if args.isotropic else SEQUENCES)}
                acquired = {m: _acquired_and_back(direct.modalities[m], spec[m], contract)
                            for m in contract.modalities}

                def mixed(modalities: dict[str, np.ndarray], case_id: str = case_id,
                          affine: np.ndarray = study.truth.affine) -> Case:
                    return Case(case_id=case_id, affine=affine, seg=None, modalities=modalities)

                variants += [
                    ("prepared, direct t2f", mixed({**prepared.modalities,
                                                    "t2f": direct.modalities["t2f"]})),
                    ("direct, prepared t2f", mixed({**direct.modalities,
                                                    "t2f": prepared.modalities["t2f"]})),
                    ("direct, t2f acquired", mixed({**direct.modalities,
                                                    "t2f": acquired["t2f"]})),
                    ("direct, all acquired", mixed(acquired)),
                ]
            for label, segmenter in segmenters.items():
                for name, case in variants:
                    labels = segmenter.segment(case)
                    for region in ("WT", "TC", "ET"):
                        row[_key(label, name, region)] = _dice(
                            contract.label_map.region_mask(truth, region),
                            contract.label_map.region_mask(labels, region))
            rows.append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                              for k, v in row.items()}))
        if rows:
            for region in ("WT", "TC", "ET"):
                carried = np.mean([r[region] for r in rows])
                print(f"{region}: round-trip Dice {carried:.4f} (goal >= 0.95; per case "
                      f"{', '.join(f'{r[region]:.4f}' for r in rows)})")
                for label in segmenters:
                    direct = [r[_key(label, "direct", region)] for r in rows]
                    gap = np.mean([r[_key(label, "prepared", region)] - d
                                   for r, d in zip(rows, direct, strict=True)])
                    print(f"    {label or 'reference model'}: direct {np.mean(direct):.4f}, "
                          f"prepared - direct {gap:+.4f} (goal within 0.02)")
                    if args.decompose:
                        parts = []
                        for name in ("prepared, direct t2f", "direct, prepared t2f",
                                     "direct, t2f acquired", "direct, all acquired"):
                            delta = np.mean([r[_key(label, name, region)] - d
                                             for r, d in zip(rows, direct, strict=True)])
                            parts.append(f"{name} {delta:+.4f}")
                        print(f"        each variant - direct: {', '.join(parts)}")
            print(f"brain mask: round-trip Dice {np.mean([r['brain'] for r in rows]):.4f} "
                  "(goal >= 0.95)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
