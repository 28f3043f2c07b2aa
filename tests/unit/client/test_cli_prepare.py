"""``sealbench dataset prepare`` without a registry: its ``--json`` output is the preparation
as a JSON object (accepted and rejected cases with reasons, digest, statistics), and hidden
files in the raw folder are not reported as rejected cases."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sealbench.client.cli import app


def test_prepare_json_is_an_object_with_each_rejection(cli_home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    raw, prepared = tmp_path / "raw", tmp_path / "prepared"
    made = runner.invoke(app, ["dataset", "synthesize", str(raw), "--cases", "2",
                               "--definition", "brats-small"])
    assert made.exit_code == 0, made.output
    (raw / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    broken = sorted(p for p in raw.iterdir() if p.is_dir())[1]
    next(broken.glob("*-t2w.nii.gz")).unlink()
    result = runner.invoke(app, ["dataset", "prepare", str(raw), str(prepared), "--definition",
                                 "brats-small", "--json"])
    assert result.exit_code == 11, result.output  # prepared, but a case was rejected
    report = json.loads(result.stdout)
    assert isinstance(report, dict)
    assert len(report["accepted"]) == 1
    assert report["rejected"] == [{"case": broken.name, "reason": "missing t2w"}]
    assert report["dataset_digest"].startswith("sha256:")
    assert report["statistics"]["n_cases"] == 1
