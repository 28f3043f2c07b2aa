"""``sealbench dataset synthesize --kind``: post-treatment and metastasis cases under the 2025
names and labels, from the 2025 task's generator; an unknown kind refused."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
from typer.testing import CliRunner

from sealbench.client.cli import app


def test_post_treatment_cases_synthesized(runner: CliRunner, cli_home: Path,
                                          tmp_path: Path) -> None:
    out = tmp_path / "raw"
    result = runner.invoke(app, ["dataset", "synthesize", str(out), "--cases", "2", "--size",
                                 "small", "--kind", "post-treatment", "--first-seed", "4"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["BraTS-GLI-00004-000",
                                                     "BraTS-GLI-00005-000"]
    seg = out / "BraTS-GLI-00004-000" / "BraTS-GLI-00004-000-seg.nii.gz"
    labels = np.asanyarray(nib.load(seg).dataobj)
    assert labels.shape == (64, 64, 48) and 4 in np.unique(labels)


def test_metastasis_cases_synthesized(runner: CliRunner, cli_home: Path,
                                      tmp_path: Path) -> None:
    out = tmp_path / "raw"
    result = runner.invoke(app, ["dataset", "synthesize", str(out), "--cases", "1", "--size",
                                 "small", "--kind", "metastases"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir()] == ["BraTS-MET-00001-000"]


def test_unknown_kind_refused(runner: CliRunner, cli_home: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["dataset", "synthesize", str(tmp_path / "raw"), "--kind",
                                 "meningioma"])
    assert result.exit_code == 3
    assert "--kind must be one of glioma, post-treatment, metastases" in result.output
    assert not (tmp_path / "raw").exists()
