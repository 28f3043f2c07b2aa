# mypy: disable-error-code="no-untyped-call"
"""The resumable run over a folder of studies, the hospital's acceptance, and the hand-off to the
BraTS preparation.

``studies_dir`` holds one folder per patient: a DICOM study (any layout of files inside) with its
annotation as a NIfTI file or a DICOM-SEG object on the grid of one of its series, or (``source
="nifti"``) native-space NIfTI files named ``..._<modality>.nii.gz`` / ``...-<modality>.nii.gz``
and ``..._seg.nii.gz``. The work folder (0700, the hospital's) holds::

    pseudonyms.json            folder / study UID -> case id (0600, :mod:`.pseudonyms`)
    cases/<case>/              the case on the contract's grid, in the BraTS 2023 layout
    review/<case>/             review.json, overview.png, registration.png (:mod:`.review`)
    ingest.json                the run's summary: every case's review and the declared preparation
    accepted/<case>/           what the hospital accepted (hard links), the input of
                               ``sealbench dataset prepare``
    accepted/ingestion.json    how they were prepared, no case in it (:mod:`.provenance`):
                               ``dataset prepare`` puts it in the prepared ``dataset.json`` and
                               ``dataset register`` sends it to the registry

Each case is built in a hidden ``.partial-<case>-<random>`` folder and renamed into place when
whole; its review is renamed last, so a case whose review exists is finished and a rerun (after
Ctrl-C, a crash or new studies) skips it. Leftover partial folders are removed at the start.
A study that fails is rejected with its reason (:mod:`.errors`), under its pseudonym; the
others go on. An error of the imaging libraries themselves rejects the study by the error's type
alone: their messages may quote a file name or a header. Nothing under ``accepted/`` exists
until :func:`accept` is called with the case ids the hospital accepted (the CLI asks, or takes
``--accept-all`` for scripts).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import SimpleITK as sitk  # noqa: N813
from pydantic import BaseModel, ConfigDict, Field

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.files import write_private

from ..cases import encode_nifti
from ..contract import BratsContract
from ..synthetic import brats_affine
from .dicom import Study, read_study, series_volume
from .errors import AnnotationError, IngestError, StudyError
from .geometry import template_on_grid
from .provenance import PROVENANCE_FILE, IngestProvenance, ProvenanceGrid, software_versions
from .pseudonyms import Pseudonyms
from .register import DECLARED, BrainExtractor, MorphologicalBrainExtractor, register_case
from .review import CaseReview, SeriesUsed, overview_png, registration_png, review_case
from .sequences import DEFAULT_MAPPING, SequenceMapping, recognise

__all__ = ["ACCEPTED_DIR", "CASES_DIR", "REVIEW_DIR", "IngestOptions", "IngestReport", "Source",
           "accept", "ingest", "summary"]

logger = logging.getLogger(__name__)

CASES_DIR = "cases"
REVIEW_DIR = "review"
ACCEPTED_DIR = "accepted"
REVIEW_FILE = "review.json"
SUMMARY_FILE = "ingest.json"
Source = Literal["dicom", "nifti"]
ProgressFn = Callable[[int, int], None]
_GRID_TOLERANCE = 1e-3
_FROZEN = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class IngestOptions:
    """How to ingest: the source kind, the mapping file's content, the reference sequence the
    plug-in names, and the brain extractor."""

    source: Source = "dicom"
    mapping: SequenceMapping = DEFAULT_MAPPING
    reference: str = "t1c"
    extractor: BrainExtractor | None = None


class IngestReport(BaseModel):
    """The run's summary (``ingest.json``, version 1): the declared preparation and every case's
    review, by pseudonym."""

    model_config = _FROZEN

    format: Literal["sealbench/ingest"] = "sealbench/ingest"
    version: Literal[1] = 1
    #: ``{"shape": [X, Y, Z], "spacing_mm": [x, y, z]}``: the grid the cases are on.
    contract_grid: dict[str, list[int] | list[float]]
    preparation: dict[str, str]
    cases: tuple[CaseReview, ...]
    source: Source = "dicom"
    #: The versions of the libraries that prepared the cases (:mod:`.provenance`).
    software: dict[str, str] = Field(default_factory=dict)

    @property
    def ready(self) -> tuple[str, ...]:
        return tuple(c.case_id for c in self.cases if c.status == "ready")


def _visible_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def _corners(image: sitk.Image) -> npt.NDArray[np.float64]:
    size = image.GetSize()
    points = [image.TransformIndexToPhysicalPoint((i, j, k)) for i in (0, size[0] - 1)
              for j in (0, size[1] - 1) for k in (0, size[2] - 1)]
    return np.array(sorted(tuple(round(v, 2) for v in p) for p in points), dtype=np.float64)


def _same_grid(a: sitk.Image, b: sitk.Image) -> bool:
    """Whether ``a`` and ``b`` have the same voxel lattice, whatever the order or sense of their
    axes (a DICOM-SEG may run its frames the other way from its source series)."""
    return sorted(a.GetSize()) == sorted(b.GetSize()) and np.allclose(
        sorted(a.GetSpacing()), sorted(b.GetSpacing()), atol=_GRID_TOLERANCE) and np.allclose(
        _corners(a), _corners(b), atol=0.05)


def _classes(annotation: sitk.Image, mapping: SequenceMapping,
             contract: BratsContract) -> sitk.Image:
    """The annotation's values as class indices, through the mapping file's labels."""
    values = sitk.GetArrayFromImage(annotation)
    if not np.issubdtype(values.dtype, np.integer):
        if not np.array_equal(values, np.round(values)):
            raise AnnotationError("the annotation holds non-integer values")
        values = values.astype(np.int64)
    present = {int(v) for v in np.unique(values)} - {0}
    unknown = sorted(present - set(mapping.annotation_labels))
    if unknown:
        raise AnnotationError(f"annotation label values {unknown} are not in the mapping file's "
                              f"annotation_labels {sorted(mapping.annotation_labels)}")
    lut = np.zeros(int(max(present, default=0)) + 1, dtype=np.uint8)
    for value, tissue in mapping.annotation_labels.items():
        if value < len(lut):
            lut[value] = contract.label_map.tissues.index(tissue) + 1
    image = sitk.GetImageFromArray(lut[values])
    image.CopyInformation(annotation)
    return image


def _dicom_inputs(study: Study, options: IngestOptions, contract: BratsContract,
                  ) -> tuple[dict[str, sitk.Image], dict[str, SeriesUsed], sitk.Image, str]:
    found = recognise(study.series, options.mapping, contract.modalities)
    images = {m: series_volume(s) for m, s in found.items()}
    used = {m: SeriesUsed(number=s.number, size=images[m].GetSize(),
                          spacing_mm=tuple(round(v, 4) for v in images[m].GetSpacing()))
            for m, s in found.items()}
    sources = [*study.niftis, *study.segmentations, *study.structures]
    if len(sources) != 1:
        raise AnnotationError(f"the study holds {len(sources)} annotations (NIfTI, DICOM-SEG or "
                              "RTSTRUCT); one is needed")
    if study.structures:
        from .rtstruct import read_rtstruct, referenced_series

        uid = referenced_series(study.structures[0])
        drawn_on = [m for m, s in found.items() if s.uid == uid]
        if not drawn_on:
            raise AnnotationError("the RTSTRUCT's contours are drawn on a series that is not "
                                  "one of the recognised sequences")
        annotation = read_rtstruct(study.structures[0], images[drawn_on[0]], options.mapping,
                                   contract)
    elif study.segmentations:
        from .dicomseg import read_dicom_seg

        annotation = read_dicom_seg(study.segmentations[0], options.mapping, contract)
    else:
        annotation = _classes(_read_nifti(study.niftis[0], "the annotation"), options.mapping,
                              contract)
    for name, image in images.items():
        if _same_grid(annotation, image):
            return images, used, annotation, name
    raise AnnotationError("the annotation's grid is not the grid of any recognised series "
                          "(draw it on one of the study's series)")


def _read_nifti(path: Path, what: str) -> sitk.Image:
    try:
        image = sitk.ReadImage(str(path))
    except RuntimeError as exc:
        raise StudyError(f"{what} cannot be read as NIfTI") from exc
    if image.GetDimension() != 3 or image.GetNumberOfComponentsPerPixel() != 1:
        raise StudyError(f"{what} is not a 3-D single-channel volume")
    return image


def _nifti_inputs(folder: Path, mapping: SequenceMapping, contract: BratsContract,
                  ) -> tuple[dict[str, sitk.Image], dict[str, SeriesUsed], sitk.Image, str]:
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    by_part: dict[str, list[Path]] = {}
    for path in files:
        stem = path.name.lower().removesuffix(".gz").removesuffix(".nii")
        for part in contract.parts:
            if stem.endswith((f"_{part}", f"-{part}")):
                by_part.setdefault(part, []).append(path)
    problems = [f"{part}: {len(by_part.get(part, []))} files" for part in contract.parts
                if len(by_part.get(part, [])) != 1]
    if problems:
        raise StudyError("native NIfTI folder needs one file per part named ..._<part>.nii.gz: "
                         + "; ".join(problems))
    images = {m: sitk.Cast(_read_nifti(by_part[m][0], m), sitk.sitkFloat32)
              for m in contract.modalities}
    used = {m: SeriesUsed(number=0, size=image.GetSize(),
                          spacing_mm=tuple(round(v, 4) for v in image.GetSpacing()))
            for m, image in images.items()}
    annotation = _classes(_read_nifti(by_part[contract.seg_name][0], "the annotation"),
                          mapping, contract)
    for name, image in images.items():
        if _same_grid(annotation, image):
            return images, used, annotation, name
    raise AnnotationError("the annotation's grid is not the grid of any sequence")


def _build_case(folder: Path, study: Study | None, case_id: str, partial: Path,
                contract: BratsContract, options: IngestOptions) -> CaseReview:
    """Ingest one study into ``partial`` (``case/`` and ``review/``); returns its review."""
    if study is not None:
        images, used, classes, annotated = _dicom_inputs(study, options, contract)
    else:
        images, used, classes, annotated = _nifti_inputs(folder, options.mapping, contract)
    extractor = options.extractor or MorphologicalBrainExtractor()
    registered = register_case(images, options.reference, contract, annotation=classes,
                               annotated=annotated, extractor=extractor)
    template = template_on_grid(contract.shape)
    template_ml = float((template.mask > 0.5).sum()) * float(np.prod(contract.spacing_mm)) / 1e3
    review = review_case(case_id, registered, used, contract, template_ml)
    case_dir = partial / CASES_DIR
    case_dir.mkdir()
    affine = brats_affine(contract.shape, contract.spacing_mm)
    for name in contract.modalities:
        (case_dir / contract.file_name(case_id, name)).write_bytes(
            encode_nifti(registered.modalities[name], affine))
    assert registered.classes is not None
    labels = contract.label_map.from_class_indices(registered.classes)
    (case_dir / contract.file_name(case_id, contract.seg_name)).write_bytes(
        encode_nifti(labels, affine))
    review_dir = partial / REVIEW_DIR
    review_dir.mkdir()
    (review_dir / "overview.png").write_bytes(overview_png(registered, contract))
    (review_dir / "registration.png").write_bytes(
        registration_png(registered, options.reference, template.mask))
    return review


def _finish(work_dir: Path, partial: Path, case_id: str, review: CaseReview) -> None:
    """Move a finished case into place: its files, then its review (the done marker)."""
    review_dir = partial / REVIEW_DIR
    review_dir.mkdir(exist_ok=True)
    (review_dir / REVIEW_FILE).write_bytes(canonical_json(review.model_dump(mode="json")))
    if (partial / CASES_DIR).exists():
        (partial / CASES_DIR).rename(work_dir / CASES_DIR / case_id)
    review_dir.rename(work_dir / REVIEW_DIR / case_id)
    shutil.rmtree(partial)


def _reviews(work_dir: Path) -> dict[str, CaseReview]:
    out = {}
    for folder in _visible_dirs(work_dir / REVIEW_DIR):
        path = folder / REVIEW_FILE
        if path.is_file():
            out[folder.name] = CaseReview.model_validate_json(path.read_bytes())
    return out


def _start(work_dir: Path) -> None:
    """Create the work folder (0700) or clean what an interrupted run left."""
    work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    work_dir.chmod(0o700)
    for name in (CASES_DIR, REVIEW_DIR):
        (work_dir / name).mkdir(exist_ok=True)
    for leftover in work_dir.glob(".partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    done = set(_reviews(work_dir))
    for folder in _visible_dirs(work_dir / CASES_DIR):
        if folder.name not in done:  # interrupted between its two renames
            shutil.rmtree(folder)


def ingest(studies_dir: Path, work_dir: Path, contract: BratsContract,
           options: IngestOptions = IngestOptions(), *,
           progress: ProgressFn | None = None) -> IngestReport:
    """Ingest every study folder under ``studies_dir`` into ``work_dir`` (resuming: finished
    cases are not redone); returns the run's summary, also written to ``ingest.json``."""
    if not studies_dir.is_dir():
        raise IngestError(f"studies folder {studies_dir} is not a directory")
    options.mapping.check(contract)
    if options.reference not in contract.modalities:
        raise IngestError(f"reference sequence {options.reference!r} is not one of "
                          f"{contract.modalities}")
    folders = _visible_dirs(studies_dir)
    if not folders:
        raise IngestError(f"no study folders in {studies_dir} (one folder per patient)")
    _start(work_dir)
    pseudonyms = Pseudonyms(work_dir, contract)
    done = _reviews(work_dir)
    for index, folder in enumerate(folders, start=1):
        study: Study | None = None
        error: StudyError | None = None
        try:
            study = read_study(folder) if options.source == "dicom" else None
        except StudyError as exc:
            error = exc
        case_id = pseudonyms.case_id(folder.name, study.study_uid if study else "")
        if case_id not in done:
            partial = work_dir / f".partial-{case_id}-{secrets.token_hex(4)}"
            partial.mkdir()
            try:
                if error is not None:
                    raise error
                review = _build_case(folder, study, case_id, partial, contract, options)
            except StudyError as exc:
                shutil.rmtree(partial / CASES_DIR, ignore_errors=True)
                review = CaseReview(case_id=case_id, status="rejected", reason=str(exc))
                logger.warning("case %s rejected: %s", case_id, exc)
            except Exception as exc:  # noqa: BLE001 - pydicom, SimpleITK, highdicom, nibabel
                # A foreign library's message may quote a path or a header (a patient's name):
                # only the error's type is kept, and the case is rejected like any other.
                shutil.rmtree(partial / CASES_DIR, ignore_errors=True)
                review = CaseReview(case_id=case_id, status="rejected", reason=(
                    f"the study could not be read ({type(exc).__name__}); its message is not "
                    "shown as it may quote patient data"))
                logger.warning("case %s rejected: %s", case_id, review.reason)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            _finish(work_dir, partial, case_id, review)
            done[case_id] = review
        if progress is not None:
            progress(index, len(folders))
    declared = {key: str(value) for key, value in DECLARED.items()}
    declared["brain_extraction"] = (options.extractor or MorphologicalBrainExtractor()).name
    declared["reference"] = options.reference
    report = IngestReport(contract_grid={"shape": list(contract.shape),
                                         "spacing_mm": list(contract.spacing_mm)},
                          preparation=declared,
                          cases=tuple(done[k] for k in sorted(done)),
                          source=options.source, software=software_versions())
    write_private(work_dir / SUMMARY_FILE, canonical_json(report.model_dump(mode="json")))
    return report


def accept(work_dir: Path, case_ids: Iterable[str]) -> tuple[str, ...]:
    """Make ``accepted/`` hold exactly ``case_ids`` (each a ready case), as hard links of their
    files, and ``ingestion.json`` (how they were prepared, from the run's ``ingest.json``);
    built beside and renamed into place, so it is whole or absent."""
    try:
        run = IngestReport.model_validate_json((work_dir / SUMMARY_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        raise IngestError(f"{work_dir} holds no readable {SUMMARY_FILE}: run the ingestion "
                          "first") from exc
    reviews = _reviews(work_dir)
    chosen = tuple(sorted(set(case_ids)))
    problems = [c for c in chosen if c not in reviews or reviews[c].status != "ready"]
    if problems:
        raise IngestError(f"cases {problems} are not ready cases of {work_dir}")
    if not chosen:
        raise IngestError("no case to accept")
    tmp = work_dir / f".accepted-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        shape, spacing = run.contract_grid["shape"], run.contract_grid["spacing_mm"]
        provenance = IngestProvenance(
            source=run.source,
            contract_grid=ProvenanceGrid(shape=(int(shape[0]), int(shape[1]), int(shape[2])),
                                         spacing_mm=(spacing[0], spacing[1], spacing[2])),
            preparation=run.preparation, software=run.software, accepted_cases=len(chosen))
        (tmp / PROVENANCE_FILE).write_bytes(canonical_json(provenance.model_dump(mode="json")))
        for case_id in chosen:
            (tmp / case_id).mkdir()
            for path in sorted((work_dir / CASES_DIR / case_id).iterdir()):
                os.link(path, tmp / case_id / path.name)
        target = work_dir / ACCEPTED_DIR
        old = work_dir / f".accepted-old-{secrets.token_hex(4)}"
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return chosen


def summary(work_dir: Path) -> Mapping[str, CaseReview]:
    """The reviews of every finished case in ``work_dir``, by case id."""
    return _reviews(work_dir)


