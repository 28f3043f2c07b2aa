"""``sealbench dataset ingest`` (issue 43): the default mapping written and edited, a phantom
DICOM study ingested under the small shipped definition, nothing accepted without the hospital's
word, then accepted and prepared by ``dataset prepare``; no planted identifier in the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("pydicom")

from sealbench.benchmarks.brats.contract import BRATS_2023_GLI_SMALL
from sealbench.benchmarks.brats.ingest.phantom import write_study
from sealbench.client.cli import app


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SEALBENCH_CONFIG_DIR", str(tmp_path / "home"))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER",
                 "SEALBENCH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_ingest_review_accept_prepare(home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    studies, work = tmp_path / "studies", tmp_path / "work"
    study = write_study(studies, 4, BRATS_2023_GLI_SMALL)
    mapping = tmp_path / "mapping.json"
    wrote = runner.invoke(app, ["dataset", "ingest", str(studies), str(work), "--definition",
                                "brats-small", "--write-mapping", str(mapping)])
    assert wrote.exit_code == 0, wrote.output
    edited = json.loads(mapping.read_text())
    assert edited["annotation_labels"] == {"1": "NETC", "2": "SNFH", "3": "ET"}
    refused = runner.invoke(app, ["dataset", "ingest", str(studies), str(work), "--definition",
                                  "brats-small", "--mapping", str(mapping)])
    assert refused.exit_code == 0, refused.output
    assert "label values [4] are not in the mapping" in refused.output
    assert "nothing accepted" in refused.output
    # The hospital's annotations are in BraTS 2021 values: it says so and ingests again (the
    # rejected case is kept as rejected: a finished case is not redone, so it starts afresh).
    edited["annotation_labels"] = {"1": "NETC", "2": "SNFH", "4": "ET"}
    mapping.write_text(json.dumps(edited))
    work = tmp_path / "work2"
    ran = runner.invoke(app, ["dataset", "ingest", str(studies), str(work), "--definition",
                              "brats-small", "--mapping", str(mapping)])
    assert ran.exit_code == 0, ran.output
    assert "nothing accepted" in ran.output
    review = json.loads((work / "review" / "BraTS-GLI-00001-000" / "review.json").read_text())
    assert review["status"] == "ready", review
    assert not (work / "accepted").exists()
    accepted = runner.invoke(app, ["dataset", "ingest", str(studies), str(work), "--definition",
                                   "brats-small", "--mapping", str(mapping), "--accept-all"])
    assert accepted.exit_code == 0, accepted.output
    assert "accepted 1 case" in accepted.output
    prepared = runner.invoke(app, ["dataset", "prepare", str(work / "accepted"),
                                   str(tmp_path / "prepared"), "--definition", "brats-small"])
    assert prepared.exit_code == 0, prepared.output
    output = (wrote.output + refused.output + ran.output + accepted.output
              + prepared.output).lower()
    assert not [s for s in study.phi.strings() if s.lower() in output]
