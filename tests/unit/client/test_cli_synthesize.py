"""``sealbench dataset synthesize``: the demo data of the plug-in that ``--definition`` (or
``--benchmark``) names, under a demo ``--variant`` the plug-in offers; the client names no
benchmark of its own, so without either it refuses, listing the shipped definitions."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
from typer.testing import CliRunner

from sealbench.client.cli import app


def test_post_treatment_cases_synthesized(runner: CliRunner, cli_home: Path,
                                          tmp_path: Path) -> None:
    out = tmp_path / "raw"
    result = runner.invoke(app, ["dataset", "synthesize", str(out), "--cases", "2",
                                 "--definition", "brats-2025-gli", "--variant", "small",
                                 "--first-seed", "4"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["BraTS-GLI-00004-000",
                                                     "BraTS-GLI-00005-000"]
    seg = out / "BraTS-GLI-00004-000" / "BraTS-GLI-00004-000-seg.nii.gz"
    labels = np.asanyarray(nib.load(seg).dataobj)
    assert labels.shape == (64, 64, 48) and 4 in np.unique(labels)


def test_metastasis_cases_synthesized(runner: CliRunner, cli_home: Path,
                                      tmp_path: Path) -> None:
    out = tmp_path / "raw"
    result = runner.invoke(app, ["dataset", "synthesize", str(out), "--cases", "1",
                                 "--definition", "brats-2025-met", "--variant", "small"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir()] == ["BraTS-MET-00001-000"]


def test_a_definitions_own_grid(runner: CliRunner, cli_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "raw"
    result = runner.invoke(app, ["dataset", "synthesize", str(out), "--cases", "1",
                                 "--definition", "brats-small"])
    assert result.exit_code == 0, result.output
    case = next(out.iterdir())
    t1n = np.asanyarray(nib.load(case / f"{case.name}-t1n.nii.gz").dataobj)
    assert t1n.shape == (64, 64, 48)


def test_without_a_contract_refused_listing_the_shipped_definitions(
        runner: CliRunner, cli_home: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["dataset", "synthesize", str(tmp_path / "raw")])
    assert result.exit_code == 3
    said = " ".join(result.output.split())
    assert "--benchmark ID" in said and "--definition NAME" in said
    assert "brats-small" in said and "wdbc" in said
    assert not (tmp_path / "raw").exists()


def test_a_variant_the_plugin_does_not_offer_refused(runner: CliRunner, cli_home: Path,
                                                     tmp_path: Path) -> None:
    unknown = runner.invoke(app, ["dataset", "synthesize", str(tmp_path / "raw"),
                                  "--definition", "brats", "--variant", "tiny"])
    assert unknown.exit_code == 3
    assert "offers the demo variants small, full" in " ".join(unknown.output.split())
    none = runner.invoke(app, ["dataset", "synthesize", str(tmp_path / "raw"),
                               "--definition", "wdbc", "--variant", "small"])
    assert none.exit_code == 3
    assert "offers no demo variants" in " ".join(none.output.split())
    assert not (tmp_path / "raw").exists()
