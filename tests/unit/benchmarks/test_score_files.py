"""Scoring predictions on disk (``benchmark score --pin``): files paired as the official
``brats-evaluate`` pairs them, the summary JSON identical to what the official command writes on
the same folders, the CSV with the official parser's columns and values, and refusals that name
the case."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
import shutil
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest

from sealbench.benchmarks import registry
from sealbench.benchmarks.brats import InvalidPredictionError
from sealbench.benchmarks.brats.errors import CaseError
from sealbench.benchmarks.brats.score_files import pair_files
from sealbench.benchmarks.brats.scoring2025 import GLI_2025, MET_2025
from sealbench.benchmarks.interface import ScoresFiles
from sealbench.contract.pin import BenchmarkPin

ZOOMS = (1.0, 1.0, 1.0)


def _write(path: Path, labels: np.ndarray, zooms: tuple[float, ...] = ZOOMS,
           affine: np.ndarray | None = None) -> None:
    affine = np.diag([*zooms, 1.0]) if affine is None else affine
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), affine), path)


def _generated(tmp_path: Path, pin: str, n: int, seed: int) -> tuple[Path, Path]:
    """Truth: the pin's demo cases' label files; predictions: each truth shifted by one voxel
    and with one lesion's worth of labels dropped, named as a team would name them."""
    plugin = registry.load(BenchmarkPin.parse(pin))
    raw = tmp_path / "raw"
    ids = plugin.write_demo_dataset(raw, n, seed=seed)
    truth, preds = tmp_path / "truth", tmp_path / "preds"
    truth.mkdir()
    preds.mkdir()
    for i, case_id in enumerate(ids):
        shutil.copy(raw / case_id / f"{case_id}-seg.nii.gz", truth / f"{case_id}.nii.gz")
        image = nib.load(truth / f"{case_id}.nii.gz")
        labels = np.asanyarray(image.dataobj)
        pred = np.roll(labels, 1 + i % 2, axis=i % 3)
        pred[pred == (1 + i % 3)] = 0
        _write(preds / f"team-{case_id.split('-', 2)[2]}.nii.gz", pred, affine=image.affine)
    return truth, preds


def test_files_paired_by_subject_id_as_the_official_evaluator_does() -> None:
    pairing = pair_files(
        ["BraTS-GLI-00002-000.nii.gz", "BraTS-GLI-00001-000.nii.gz", "notes.txt",
         "no-id.nii.gz", "BraTS-GLI-00003-000.nii.gz"],
        ["x-00001-000.nii.gz", "BraTS-GLI-00002-000.nii.gz", "y-00009-000.nii.gz", "z.csv"])
    assert pairing.pairs == (("BraTS-GLI-00001-000.nii.gz", "x-00001-000.nii.gz"),
                             ("BraTS-GLI-00002-000.nii.gz", "BraTS-GLI-00002-000.nii.gz"))
    assert pairing.missings == ("BraTS-GLI-00003-000.nii.gz", "no-id.nii.gz")
    assert pairing.extras == ("y-00009-000.nii.gz",)


def test_two_predictions_claiming_one_case_refused() -> None:
    with pytest.raises(CaseError, match=re.escape("a-00001-000.nii.gz, b-00001-000.nii.gz")):
        pair_files(["BraTS-GLI-00001-000.nii.gz"], ["a-00001-000.nii.gz", "b-00001-000.nii.gz"])


@pytest.mark.parametrize("pin", ["brats-2025-gli/1-64x64x48", "brats-2025-met/1-64x64x48",
                                 "brats-2023-gli/1-64x64x48"])
def test_generated_cases_scored_end_to_end(pin: str, tmp_path: Path) -> None:
    truth, preds = _generated(tmp_path, pin, 3, seed=11)
    (truth / "BraTS-GLI-00077-000.nii.gz").write_bytes((truth.iterdir().__next__()).read_bytes())
    plugin = registry.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, ScoresFiles)
    seen: list[tuple[str, int, int]] = []
    scores = plugin.score_files(truth, preds, on_case=lambda *a: seen.append(a))
    assert scores.n_scored == 3 and [s[1:] for s in seen] == [(1, 3), (2, 3), (3, 3)]
    assert scores.missings == ("BraTS-GLI-00077-000.nii.gz",)
    doc = json.loads(scores.to_json())
    assert [row["subject_name"] for row in doc["metrics"]] == [s[0] for s in seen]
    groups = {"brats-2025-gli": [g.name for g in GLI_2025.groups],
              "brats-2025-met": [g.name for g in MET_2025.groups],
              "brats-2023-gli": ["WT", "TC", "ET"]}[pin.split("/")[0]]
    for row in doc["metrics"]:
        assert list(row) == [*groups, "subject_name"]
    rows = list(csv.DictReader(io.StringIO(scores.to_csv().decode())))
    assert [r["subject_id"] for r in rows][-4:] == ["BraTS-GLI-00077-000.nii.gz", "mean", "std",
                                                   "median"]


def test_unreadable_prediction_named(tmp_path: Path) -> None:
    truth, preds = _generated(tmp_path, "brats-2025-gli/1-64x64x48", 2, seed=3)
    victim = sorted(preds.iterdir())[1]
    victim.write_bytes(b"\x1f\x8b not really gzip")
    plugin = registry.load(BenchmarkPin.parse("brats-2025-gli/1-64x64x48"))
    assert isinstance(plugin, ScoresFiles)
    with pytest.raises(InvalidPredictionError, match=f"BraTS-GLI-00004-000.*{victim.name}.*"
                       "not a readable NIfTI"):
        plugin.score_files(truth, preds)
    kept = json.loads(plugin.score_files(truth, preds, keep_going=True).to_json())
    assert kept["metrics"][1]["subject_name"] == "BraTS-GLI-00004-000.nii.gz"
    assert "not a readable NIfTI" in kept["metrics"][1]["error"]


def test_shape_mismatch_and_foreign_label_named(tmp_path: Path) -> None:
    truth, preds = tmp_path / "t", tmp_path / "p"
    truth.mkdir()
    preds.mkdir()
    labels = np.zeros((8, 8, 6), np.uint8)
    labels[2:4, 2:4, 2:4] = 3
    _write(truth / "BraTS-MET-00001-000.nii.gz", labels)
    _write(preds / "00001-000.nii.gz", labels[:, :, :5])
    plugin = registry.load(BenchmarkPin.parse("brats-2025-met/1"))
    assert isinstance(plugin, ScoresFiles)
    with pytest.raises(InvalidPredictionError, match=r"BraTS-MET-00001-000.*shape \(8, 8, 5\)"):
        plugin.score_files(truth, preds)
    foreign = labels.copy()
    foreign[0, 0, 0] = 5  # no group of the metastasis task names it
    _write(preds / "00001-000.nii.gz", foreign)
    with pytest.raises(InvalidPredictionError, match=r"BraTS-MET-00001-000.*\[5\]"):
        plugin.score_files(truth, preds)
    _write(preds / "00001-000.nii.gz", labels, (1.0, 1.0, 2.0))
    with pytest.raises(InvalidPredictionError, match="spacing"):
        plugin.score_files(truth, preds)
    moved = np.diag([1.0, 1.0, 1.0, 1.0])
    moved[1, 3] = -63.0
    _write(preds / "00001-000.nii.gz", labels, affine=moved)
    with pytest.raises(InvalidPredictionError, match="origin"):
        plugin.score_files(truth, preds)
    flipped = np.diag([-1.0, 1.0, 1.0, 1.0])
    _write(preds / "00001-000.nii.gz", labels, affine=flipped)
    with pytest.raises(InvalidPredictionError, match="orientation"):
        plugin.score_files(truth, preds)


# -- the official evaluator as the oracle -----------------------------------------------------


def _official_main(truth: Path, preds: Path, config: str, out: Path) -> dict[str, Any]:
    """The official ``brats-evaluate`` command run in process on the folders. Its own
    ``json.dump`` fails on the numpy scalars in its dictionaries; the module's ``json`` is
    replaced by one that writes them as numbers, nothing else changes."""
    evaluation = pytest.importorskip("brats_evaluation.evaluation")

    def dump(obj: Any, handle: Any, **kwargs: Any) -> None:
        json.dump(obj, handle, default=lambda o: o.item(), **kwargs)

    shim = types.SimpleNamespace(dump=dump)
    argv = ["brats-evaluate", "--ref_path", str(truth), "--pred_path", str(preds), "--config",
            config, "--summary_json", str(out)]
    with (pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore")
        mp.setattr(evaluation, "json", shim)
        mp.setattr(sys, "argv", argv)
        evaluation.main()
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def _close(theirs: Any, ours: Any, where: str) -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), where
        for key in theirs:
            _close(theirs[key], ours[key], f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(theirs, str):
        assert ours == theirs, where
    else:
        a, b = float(theirs), float(ours)
        assert (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= 1e-9, (where, a, b)


@pytest.mark.parametrize(("pin", "config"), [("brats-2025-gli/1-64x64x48", "gli"),
                                             ("brats-2025-met/1-64x64x48", "mets")])
def test_json_equals_the_official_commands_summary(pin: str, config: str,
                                                   tmp_path: Path) -> None:
    pytest.importorskip("panoptica", reason="the official evaluator (dev extra)")
    truth, preds = _generated(tmp_path, pin, 4, seed=21)
    (preds / "team-00099-000.nii.gz").write_bytes(next(preds.iterdir()).read_bytes())
    empty = np.zeros((64, 64, 48), np.uint8)
    _write(truth / "BraTS-GLI-00050-000.nii.gz", empty)  # nothing to find ...
    _write(preds / "x-00050-000.nii.gz", empty)          # ... nothing found
    _write(truth / "BraTS-GLI-00051-000.nii.gz", empty)  # nothing to find, a false positive
    spot = empty.copy()
    spot[30:33, 30:32, 20:22] = 3
    _write(preds / "x-00051-000.nii.gz", spot)
    shutil.copy(next(truth.iterdir()), truth / "BraTS-GLI-00060-000.nii.gz")  # no prediction
    theirs = _official_main(truth, preds, config, tmp_path / "official.json")
    plugin = registry.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, ScoresFiles)
    scores = plugin.score_files(truth, preds)
    assert all("error" not in row for row in theirs["metrics"])
    assert scores.extras == ("team-00099-000.nii.gz",)
    _close(theirs, json.loads(scores.to_json()), "summary")


_CSV_CASES = [
    # pin, official config, parser mode, our options, the parser's arguments
    ("brats-2025-gli/1-64x64x48", "gli", "seg", {}, {}),
    ("brats-2025-met/1-64x64x48", "mets", "mets", {},
     {"vol_threshold": 20.0, "overlap_threshold": 0.1}),
    # thresholds that put the generated metastases on both sides and reject weak matches
    ("brats-2025-met/1-64x64x48", "mets", "mets",
     {"vol_threshold": 60.0, "overlap_threshold": 0.6},
     {"vol_threshold": 60.0, "overlap_threshold": 0.6}),
    ("brats-2025-gli/1-64x64x48", "gli", "mets", {"vol_threshold": 200.0},
     {"vol_threshold": 200.0, "overlap_threshold": 0.1}),
]


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize(("pin", "config", "mode", "options", "arguments"), _CSV_CASES)
def test_csv_equals_the_official_parsers(pin: str, config: str, mode: str,
                                         options: dict[str, float], arguments: dict[str, float],
                                         tmp_path: Path) -> None:
    pytest.importorskip("panoptica", reason="the official evaluator (dev extra)")
    parser = pytest.importorskip("brats_evaluation.metrics_parser")
    truth, preds = _generated(tmp_path, pin, 4, seed=31)
    prefix = next(truth.iterdir()).name.rsplit("-", 2)[0]
    shutil.copy(next(truth.iterdir()), truth / f"{prefix}-00060-000.nii.gz")  # no prediction
    official_json = tmp_path / "official.json"
    _official_main(truth, preds, config, official_json)
    with contextlib.redirect_stdout(io.StringIO()):
        if mode == "seg":
            parser.parse_seg_results(str(official_json), str(tmp_path / "official.csv"))
        else:
            parser.parse_mets_results(str(official_json), arguments["vol_threshold"],
                                      arguments["overlap_threshold"],
                                      str(tmp_path / "official.csv"))
    theirs = list(csv.DictReader((tmp_path / "official.csv").open()))
    plugin = registry.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, ScoresFiles)
    scores = plugin.score_files(truth, preds)
    assert scores.csv_modes == ("seg", "mets")
    ours = list(csv.DictReader(io.StringIO(scores.to_csv(mode, options).decode())))
    assert list(ours[0]) == list(theirs[0])
    assert len(ours) == len(theirs)
    for mine, official in zip(ours, theirs, strict=True):
        assert mine["subject_id"] == official["subject_id"]
        for column, value in official.items():
            if column == "subject_id":
                continue
            a = float(value) if value else math.nan
            b = float(mine[column]) if mine[column] else math.nan
            assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9,
                                                                     abs_tol=1e-12), (
                mine["subject_id"], column, a, b)
    if mode == "mets":  # the rows split lesions both ways somewhere, or the case proves little
        assert any(r[k] for r in ours[:4] for k in r if k.startswith("large_instance_tp"))


def test_csv_mode_and_options_checked(tmp_path: Path) -> None:
    truth, preds = _generated(tmp_path, "brats-2025-met/1-64x64x48", 1, seed=5)
    scores = registry.load(BenchmarkPin.parse("brats-2025-met/1-64x64x48")).score_files(  # type: ignore[attr-defined]
        truth, preds)
    assert scores.to_csv("mets") == scores.to_csv("mets", {"vol_threshold": 20.0})
    with pytest.raises(ValueError, match="no CSV mode 'lesions'; this pin writes seg, mets"):
        scores.to_csv("lesions")
    with pytest.raises(ValueError, match="takes the options vol_threshold, overlap_threshold, "
                                         "not volume"):
        scores.to_csv("mets", {"volume": 3.0})
    with pytest.raises(ValueError, match="seg CSV takes no options"):
        scores.to_csv("seg", {"vol_threshold": 3.0})
