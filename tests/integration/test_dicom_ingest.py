"""A hospital's DICOM studies to benchmark-ready cases (issue 43), end to end on a phantom study.

One synthetic study (:mod:`sealbench.benchmarks.brats.ingest.phantom`: head with skull and scalp,
four series in their own oblique, anisotropic geometries, identifiers planted in every header
field and file name, the annotation in the T1 post-contrast's native space in BraTS 2021 labels)
and a broken copy of it (one FLAIR slice missing) are ingested on a half-size grid (128 x 128 x
96: the anatomy is scaled by 1.5 to fit, so the test stays within a minute on one core; the
full-size round trip is ``tests/perf/dicom_prepare_bench.py``), reviewed, accepted, prepared and
run through the shipped reference model.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from sealbench.benchmarks.brats.cases import Case
from sealbench.benchmarks.brats.contract import BRATS_2023_GLI
from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes
from sealbench.benchmarks.brats.errors import PreparationError
from sealbench.benchmarks.brats.inference import OnnxSegmenter
from sealbench.benchmarks.brats.ingest.phantom import PhantomStudy, write_study
from sealbench.benchmarks.brats.ingest.pipeline import (
    ACCEPTED_DIR,
    CASES_DIR,
    REVIEW_DIR,
    IngestOptions,
    IngestReport,
    accept,
    ingest,
)
from sealbench.benchmarks.brats.ingest.provenance import PROVENANCE_FILE
from sealbench.benchmarks.brats.ingest.pseudonyms import PSEUDONYM_FILE
from sealbench.benchmarks.brats.ingest.sequences import DEFAULT_MAPPING
from sealbench.benchmarks.brats.prepare import prepare_dataset
from sealbench.client.assets.prepare import INGESTION_STATISTIC, dataset_registration
from sealbench.crypto.digest import sha256_digest

pytest.importorskip("pydicom")

HALF = BRATS_2023_GLI.with_shape((128, 128, 96))
#: The phantom's annotation is in BraTS 2021's convention; the mapping file says so.
MAPPING = DEFAULT_MAPPING.model_copy(update={"annotation_labels": {1: "NETC", 2: "SNFH",
                                                                    4: "ET"}})


@dataclass(frozen=True)
class World:
    study: PhantomStudy
    studies: Path
    work: Path
    report: IngestReport
    messages: tuple[str, ...]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("ingest")
    studies, work = root / "studies", root / "work"
    study = write_study(studies, 3, HALF)
    broken = studies / (study.folder.name + "_copy")
    shutil.copytree(study.folder, broken)
    flair = sorted(broken.rglob("*_5_*.dcm"))
    flair[len(flair) // 2].unlink()
    handler = _Collect()
    logging.getLogger("sealbench").addHandler(handler)
    try:
        report = ingest(studies, work, HALF, IngestOptions(mapping=MAPPING))
    finally:
        logging.getLogger("sealbench").removeHandler(handler)
    return World(study=study, studies=studies, work=work, report=report,
                 messages=tuple(handler.messages))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _ready(world: World) -> str:
    (case_id,) = world.report.ready
    return case_id


def _load(path: Path) -> np.ndarray:
    return np.asarray(nib.load(path).dataobj)


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * (a & b).sum() / max(int(a.sum() + b.sum()), 1))


def test_round_trip_matches_the_phantoms_benchmark_space_volumes(world: World) -> None:
    case_id = _ready(world)
    folder = world.work / CASES_DIR / case_id
    seg = _load(folder / HALF.file_name(case_id, "seg"))
    truth = HALF.label_map.from_class_indices(world.study.truth.classes)
    assert world.study.truth.n_lesions > 0 and (truth == 3).any()
    dice = {region: _dice(HALF.label_map.region_mask(truth, region),
                          HALF.label_map.region_mask(seg, region))
            for region in ("WT", "TC", "ET")}
    brain = _load(folder / HALF.file_name(case_id, "t1c")) > 0
    # On this half-scale grid an enhancing rim of 1.5-4 template mm is 1-2.7 voxels thick, so
    # ET keeps a little less than at full size (>= 0.95 there: tests/perf/dicom_prepare_bench).
    assert dice["WT"] >= 0.95 and dice["TC"] >= 0.95 and dice["ET"] >= 0.92, dice
    assert _dice(brain, world.study.brain) >= 0.95
    review = next(c for c in world.report.cases if c.case_id == case_id)
    assert review.warnings == () and review.template_dice is not None
    assert review.template_dice >= 0.9
    assert set(review.series) == set(HALF.modalities)
    assert (world.work / REVIEW_DIR / case_id / "overview.png").read_bytes()[:4] == b"\x89PNG"


def test_study_with_a_missing_slice_is_rejected_naming_the_series(world: World) -> None:
    rejected = [c for c in world.report.cases if c.status == "rejected"]
    assert len(rejected) == 1
    assert rejected[0].reason.startswith("series 5: missing slices"), rejected[0].reason
    assert not (world.work / CASES_DIR / rejected[0].case_id).exists()
    assert any(rejected[0].reason in m for m in world.messages)


def test_pseudonyms_kept_private_and_case_ids_are_them(world: World) -> None:
    path = world.work / PSEUDONYM_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(world.work.stat().st_mode) == 0o700
    text = path.read_text()
    for case in world.report.cases:
        assert case.case_id in text and HALF.is_case_id(case.case_id)
    assert world.study.folder.name in text  # the key stays on the hospital's side, here only


def test_nothing_accepted_until_the_hospital_accepts_then_it_prepares(
        world: World, tmp_path: Path) -> None:
    assert not (world.work / ACCEPTED_DIR).exists()
    with pytest.raises(Exception, match="not ready"):
        accept(world.work, [c.case_id for c in world.report.cases])
    assert not (world.work / ACCEPTED_DIR).exists()
    accepted = accept(world.work, world.report.ready)
    report = prepare_dataset(world.work / ACCEPTED_DIR, tmp_path / "prepared", HALF)
    assert report.accepted == accepted and report.rejected == ()


def test_the_registration_says_how_the_cases_were_prepared_and_names_no_case(
        world: World, tmp_path: Path) -> None:
    accepted = accept(world.work, world.report.ready)
    prepared = tmp_path / "prepared"
    prepare_dataset(world.work / ACCEPTED_DIR, prepared, HALF)
    body = dataset_registration(prepared, "site", sha256_digest(b"r"), None)
    record = body.statistics[INGESTION_STATISTIC]
    assert record["format"] == "sealbench/ingest-provenance" and record["source"] == "dicom"
    assert record["accepted_cases"] == len(accepted)
    assert record["contract_grid"] == {"shape": list(HALF.shape),
                                       "spacing_mm": list(HALF.spacing_mm)}
    steps = record["preparation"]
    assert "MNI ICBM152" in steps["template"] and "rigid" in steps["co_registration"]
    assert steps["brain_extraction"] == "built-in morphological" and steps["reference"] == "t1c"
    assert {"simpleitk", "pydicom", "sealbench"} <= set(record["software"])
    # in the manifest's data (dataset.json), so the digest covers it
    assert b'"ingestion"' in (prepared / "data" / "dataset.json").read_bytes()
    text = json.dumps(body.statistics).lower()
    for case in world.report.cases:  # no pseudonym, no case figure: the method only
        assert case.case_id.lower() not in text
    assert not any(s.lower() in text for s in world.study.phi.strings())
    assert "brain_ml" not in text and "nmi" not in text


def test_a_tampered_ingestion_record_stops_the_preparation(
        world: World, tmp_path: Path) -> None:
    accept(world.work, world.report.ready)
    raw = tmp_path / "raw"
    shutil.copytree(world.work / ACCEPTED_DIR, raw)
    record = json.loads((raw / PROVENANCE_FILE).read_text())
    record["Doe^Jane"] = [{"case_id": "BraTS-GLI-00001-000"}]
    (raw / PROVENANCE_FILE).write_text(json.dumps(record))
    with pytest.raises(PreparationError, match=r"ingestion\.json is not the record") as caught:
        prepare_dataset(raw, tmp_path / "prepared", HALF)
    assert "Doe" not in str(caught.value)
    assert not (tmp_path / "prepared").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_rerun_resumes_without_redoing_finished_cases(world: World) -> None:
    case_id = _ready(world)
    seg = world.work / CASES_DIR / case_id / HALF.file_name(case_id, "seg")
    before = seg.stat().st_mtime_ns
    leftover = world.work / ".partial-BraTS-GLI-00009-000-dead"
    (leftover / CASES_DIR).mkdir(parents=True)
    again = ingest(world.studies, world.work, HALF, IngestOptions(mapping=MAPPING))
    assert again.cases == world.report.cases
    assert seg.stat().st_mtime_ns == before
    assert not leftover.exists()


def _texts(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out = [data]
    if path.name.endswith(".gz"):
        out.append(gzip.decompress(data))
    return out


def test_no_planted_identifier_in_any_file_or_message(world: World, tmp_path: Path) -> None:
    accept(world.work, world.report.ready)
    prepared = tmp_path / "prepared"
    prepare_dataset(world.work / ACCEPTED_DIR, prepared, HALF)
    planted = [s.lower().encode() for s in world.study.phi.strings()]
    assert len(planted) >= 20
    scanned = 0
    for root in (world.work, prepared):
        for path in sorted(root.rglob("*")):
            if path.name == PSEUDONYM_FILE:
                continue
            assert not any(s.decode() in path.name.lower() for s in planted), path.name
            if path.is_file():
                scanned += 1
                for text in _texts(path):
                    low = text.lower()
                    hits = [s for s in planted if s in low]
                    assert not hits, (path.relative_to(root), hits)
    assert scanned > 15
    for message in world.messages + tuple(c.reason for c in world.report.cases):
        assert not any(s.decode() in message.lower() for s in planted), message
    # the scan can find them: the source holds every one
    first = sorted(world.study.folder.rglob("*.dcm"))[0]
    source = (str(first).encode() + first.read_bytes()).lower()
    assert all(s in source for s in planted)


def test_reference_model_figures_on_prepared_match_direct(world: World) -> None:
    case_id = _ready(world)
    folder = world.work / CASES_DIR / case_id
    prepared = Case(case_id=case_id, affine=world.study.truth.affine, seg=None,
                    modalities={m: _load(folder / HALF.file_name(case_id, m)).astype(np.float32)
                                for m in HALF.modalities})
    direct = Case(case_id=case_id, affine=world.study.truth.affine, seg=None,
                  modalities=dict(world.study.truth.modalities))
    segmenter = OnnxSegmenter(load_model_bytes(load_definition().reference_model), HALF,
                              threads=1)
    truth = HALF.label_map.from_class_indices(world.study.truth.classes)
    figures = {}
    for name, case in (("prepared", prepared), ("direct", direct)):
        labels = segmenter.segment(case)
        figures[name] = {r: _dice(HALF.label_map.region_mask(truth, r),
                                  HALF.label_map.region_mask(labels, r))
                         for r in ("WT", "TC", "ET")}
    assert min(figures["direct"].values()) > 0.6, figures  # the model really segments
    # Within 0.02 for WT and TC; on this half-scale grid the enhancing rim is 1-2.7 voxels and
    # the prepared T1c has been through the scanner's sampling and one resampling, so ET is held
    # to 0.05 here and to 0.02 at full size (tests/perf/dicom_prepare_bench.py).
    for region, tolerance in (("WT", 0.02), ("TC", 0.02), ("ET", 0.05)):
        assert abs(figures["prepared"][region] - figures["direct"][region]) <= tolerance, figures
