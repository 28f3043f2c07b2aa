"""The small demo benchmark (brats-small, 64x64x48) as the demo runs it: raw synthetic cases
prepared under its contract (RAS+), loaded from the prepared bytes, segmented by its models and
scored. Its reference model really segments on this grid and ranks above its baseline, which is
why the definition ranks them so (docs/benchmarks.md, section 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sealbench.benchmarks.brats import (
    OnnxSegmenter,
    case_files_from_manifest_paths,
    load_case_from_bytes,
    score_case,
)
from sealbench.benchmarks.brats.definition import (
    ModelReference,
    load_model_bytes,
    load_small_definition,
)
from sealbench.benchmarks.brats.prepare import DATA_DIR, MANIFEST_FILE, prepare_dataset
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
from sealbench.crypto.manifest import Manifest

HELD_OUT = range(900000, 900004)  # never used in training (train.py)


def _mean_wt_dice(ref: ModelReference, prepared: Path) -> float:
    definition = load_small_definition()
    contract = definition.contract
    manifest = Manifest.from_bytes((prepared / MANIFEST_FILE).read_bytes())
    segmenter = OnnxSegmenter(load_model_bytes(ref), contract, threads=2)
    dice = []
    grouped = case_files_from_manifest_paths([e.path for e in manifest.entries], contract)
    for parts in grouped.values():
        files = {p: (prepared / DATA_DIR / p).read_bytes() for p in parts.values()}
        case = load_case_from_bytes(files, contract)
        assert case.seg is not None and case.shape == (64, 64, 48)
        scores = score_case(segmenter.segment(case), case.seg, definition.metrics,
                            contract.spacing_mm)
        dice.append(scores.regions["WT"].dice)
    return float(np.mean(dice))


def test_small_benchmark_reference_segments_and_outranks_its_baseline(tmp_path: Path) -> None:
    definition = load_small_definition()
    raw, prepared = tmp_path / "raw", tmp_path / "prepared"
    for index, seed in enumerate(HELD_OUT):
        case = generate_case(seed, definition.contract.shape, definition.contract)
        write_case(case, raw, case_id_for(index), definition.contract)
    report = prepare_dataset(raw, prepared, definition.contract)
    assert len(report.accepted) == len(HELD_OUT)
    reference = _mean_wt_dice(definition.reference_model, prepared)
    (baseline_ref,) = definition.baseline_models
    baseline = _mean_wt_dice(baseline_ref, prepared)
    assert reference > 0.4, reference
    assert reference > baseline + 0.2, (reference, baseline)
