"""Prepare -> load from in-memory bytes -> infer with the shipped model -> score -> summarise,
on small generated cases: the path the enclave takes, without the encryption around it."""

from __future__ import annotations

from pathlib import Path

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI,
    BRATS_2023_GLI_METRICS,
    CaseFailure,
    CaseResult,
    OnnxSegmenter,
    aggregate,
    case_files_from_manifest_paths,
    load_case_from_bytes,
    score_or_fail,
)
from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes
from sealbench.benchmarks.brats.prepare import DATA_DIR, MANIFEST_FILE, prepare_dataset
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
from sealbench.crypto.manifest import Manifest

# Half the BraTS grid in each axis: tumours keep nearly their full size, so the reference model
# (trained on full-size cases) sees what it was trained for, and the test stays fast.
MEDIUM = BRATS_2023_GLI.with_shape((128, 128, 96))


def test_prepare_infer_score_on_generated_cases(tmp_path: Path) -> None:
    small_contract = MEDIUM
    raw, out = tmp_path / "raw", tmp_path / "prepared"
    for seed in (1, 2, 5):
        write_case(generate_case(seed, MEDIUM.shape, MEDIUM), raw, case_id_for(seed), MEDIUM)
    report = prepare_dataset(raw, out, small_contract)
    manifest = Manifest.from_bytes((out / MANIFEST_FILE).read_bytes())
    model = load_model_bytes(load_definition().reference_model)
    segmenter = OnnxSegmenter(model, small_contract, threads=2)
    results: list[CaseResult] = []
    by_case = case_files_from_manifest_paths([e.path for e in manifest.entries], small_contract)
    for case_id, parts in by_case.items():
        files = {}
        for path in parts.values():
            data = (out / DATA_DIR / path).read_bytes()
            manifest.verify(path, data)
            files[path] = data
        case = load_case_from_bytes(files, small_contract)
        assert case.seg is not None
        prediction = segmenter.segment(case)
        results.append(score_or_fail(case_id, prediction, case.seg, BRATS_2023_GLI_METRICS,
                                     small_contract.spacing_mm))
    results.append(CaseFailure(case_id="BraTS-GLI-09999-000", reason="prediction missing"))
    summary = aggregate(results, BRATS_2023_GLI_METRICS)
    assert list(by_case) == list(report.accepted)
    assert (summary.n_cases, summary.n_failed) == (4, 1)
    scored = [r for r in results if not isinstance(r, CaseFailure)]
    # The shipped model really segments (on this half-size grid it scores 0.75-0.95 Dice; an
    # untrained or mis-wired model scores near 0): every region of every case above 0.7.
    dice = {(r.case_id, k): r.regions[k].dice for r in scored for k in ("WT", "TC", "ET")}
    assert min(dice.values()) > 0.7, dice
