"""``sealbench benchmark score``: the official summary on standard output or written
atomically, the parser's CSV, a pin without a file scorer refused, and nothing written when a
case cannot be scored."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import nibabel as nib
import numpy as np
from typer.testing import CliRunner

from sealbench.client.cli import app


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    truth, preds = tmp_path / "truth", tmp_path / "preds"
    truth.mkdir()
    preds.mkdir()
    rng = np.random.default_rng(4)
    for i in (1, 2):
        labels = np.zeros((16, 16, 12), np.uint8)
        labels[3:9, 4:10, 2:8] = 2
        labels[5:7, 5:8, 4:6] = 3
        labels[12:14, 12:14, 8:10] = 1 + rng.integers(0, 3)
        nib.save(nib.Nifti1Image(labels, np.eye(4)), truth / f"BraTS-GLI-0000{i}-000.nii.gz")
        nib.save(nib.Nifti1Image(np.roll(labels, i, axis=0), np.eye(4)),
                 preds / f"mine-0000{i}-000.nii.gz")
    nib.save(nib.Nifti1Image(labels, np.eye(4)), truth / "BraTS-GLI-00003-000.nii.gz")
    return truth, preds


def _score(runner: CliRunner, truth: Path, preds: Path, *extra: str, pin: str = "brats-2025-gli/1"
           ) -> tuple[int, str, str]:
    result = runner.invoke(app, ["benchmark", "score", "--pin", pin, "--truth", str(truth),
                                 "--predictions", str(preds), *extra])
    return result.exit_code, result.stdout, result.stderr


def test_json_summary_on_stdout(runner: CliRunner, cli_home: Path, tmp_path: Path) -> None:
    truth, preds = _folders(tmp_path)
    code, stdout, stderr = _score(runner, truth, preds)
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert [r["subject_name"] for r in doc["metrics"]] == ["BraTS-GLI-00001-000.nii.gz",
                                                          "BraTS-GLI-00002-000.nii.gz"]
    assert doc["missings"] == ["BraTS-GLI-00003-000.nii.gz"]
    assert {"tp", "rq", "pq_dsc", "global_bin_dsc", "sq_hd95"} <= set(doc["metrics"][0]["wt"])
    assert "without a prediction" in stderr


def test_csv_written_to_output(runner: CliRunner, cli_home: Path, tmp_path: Path) -> None:
    truth, preds = _folders(tmp_path)
    out = tmp_path / "out" / "scores.csv"
    code, _, stderr = _score(runner, truth, preds, "--format", "csv", "--output", str(out),
                             pin="brats-2023-gli/1")
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["subject_id"] for r in rows][-4:] == ["BraTS-GLI-00003-000.nii.gz", "mean", "std",
                                                   "median"]
    assert "lesion_dice_WT" in rows[0] and rows[2]["hd95_ET"] == "374.0"
    assert [p.name for p in out.parent.iterdir()] == ["scores.csv"]


def test_unscorable_case_leaves_no_output(runner: CliRunner, cli_home: Path,
                                          tmp_path: Path) -> None:
    truth, preds = _folders(tmp_path)
    nib.save(nib.Nifti1Image(np.full((16, 16, 12), 9, np.uint8), np.eye(4)),
             preds / "mine-00002-000.nii.gz")
    out = tmp_path / "scores.json"
    code, _, stderr = _score(runner, truth, preds, "--output", str(out))
    assert code == 3
    assert "BraTS-GLI-00002-000.nii.gz" in stderr and "[9]" in stderr
    assert not out.exists() and list(tmp_path.glob(".scores.json*")) == []
    code, _, stderr = _score(runner, truth, preds, "--output", str(out), "--keep-going")
    assert code == 0, stderr
    assert "error" in json.loads(out.read_text())["metrics"][1]


def test_pin_without_a_file_scorer_refused(runner: CliRunner, cli_home: Path,
                                           tmp_path: Path) -> None:
    truth, preds = _folders(tmp_path)
    code, _, stderr = _score(runner, truth, preds, pin="wdbc/1")
    assert code == 3 and "does not score files" in stderr
    code, _, stderr = _score(runner, truth, preds, pin="brats-2031-gli/1")
    assert code == 3


def test_mets_csv_mode_with_thresholds(runner: CliRunner, cli_home: Path,
                                       tmp_path: Path) -> None:
    truth, preds = _folders(tmp_path)
    code, stdout, stderr = _score(runner, truth, preds, "--format", "csv", "--csv-mode", "mets",
                                  "--csv-option", "vol_threshold=10", pin="brats-2025-met/1")
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert [r["subject_id"] for r in rows] == [
        "BraTS-GLI-00001-000.nii.gz", "BraTS-GLI-00002-000.nii.gz",
        "BraTS-GLI-00003-000.nii.gz", "mean", "std", "median"]
    # the 8-voxel lesion is small at 10 and the 36-voxel core large
    assert rows[0]["small_instance_fn_tc"] in ("0", "1") and rows[0]["large_instance_tp_tc"]
    for bad, message in ((["--csv-option", "vol_threshold"], "is not NAME=NUMBER"),
                         (["--csv-option", "size=3"], "not size"),
                         (["--csv-mode", "lesions"], "no CSV mode 'lesions'")):
        code, stdout, stderr = _score(runner, truth, preds, "--format", "csv",
                                      *(["--csv-mode", "mets"] if "--csv-mode" not in bad
                                        else []), *bad, pin="brats-2025-met/1")
        assert code != 0 and message in stderr and not stdout, (bad, stderr)
    code, _, stderr = _score(runner, truth, preds, "--csv-mode", "mets", pin="brats-2025-met/1")
    assert code != 0 and "apply to --format csv" in stderr
