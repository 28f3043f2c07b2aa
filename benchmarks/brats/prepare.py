"""Dataset preparation, what a hospital runs before registering: validate, normalise, write.

``raw_dir`` holds one folder per case, all in one release's layout (:mod:`.layouts`): BraTS 2023
(``<id>/<id>-{t1n,t1c,t2w,t2f,seg}.nii.gz``) or BraTS 2021
(``BraTS2021_XXXXX/BraTS2021_XXXXX_{t1,t1ce,t2,flair,seg}.nii.gz``, renamed and relabelled into
the contract's convention); a folder mixing both is refused whole. Every case is checked against
the contract (:func:`.cases.load_raw_case`: names, all parts present, readable bounded
gzip/NIfTI, orientation made RAS+ losslessly or an oblique case rejected, then the contract's
grid (shape and spacing), identical affines, finite intensities, labels in the map); a case that
fails is rejected with a reason and the others go on. A case on another grid than the
contract's is rejected, never resampled: a benchmark's data is on its grid. Accepted cases are
z-scored inside the brain mask and written in the prepared layout described in :mod:`.cases`,
with ``dataset.json``, ``statistics.json`` (:mod:`.statistics`: counts and the contract's
grid, nothing computed from a case) and the canonical manifest of ``data/``
(:func:`sealbench.crypto.manifest.build_manifest`).

A raw folder written by ``sealbench dataset ingest`` (its ``accepted/``) also holds
``ingestion.json``, how the cases were brought onto the grid
(:class:`.ingest.provenance.IngestProvenance`: the method, no case): it is validated (an invalid
one stops the preparation, nothing written) and kept in ``dataset.json`` under ``ingestion``,
so the manifest's digest covers it and ``dataset register`` sends it to the registry.

Hidden entries (names starting with a dot: ``.DS_Store``, ``._*`` resource forks, editor
files) are not cases and not parts of one: they are skipped, neither read nor reported.

Everything is written into a hidden sibling ``.<out>.partial-<random>`` and renamed to ``out_dir``
only when all of it succeeded, so a prepared dataset either appears whole or not at all.
"""

from __future__ import annotations

import gzip
import io
import logging
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import nibabel
import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.manifest import build_manifest

from .cases import (
    CASES_DIR,
    DATASET_FILE,
    INTENSITY_SLOPE,
    PREPARED_FORMAT,
    STATISTICS_FILE,
    encode_nifti,
    load_raw_case,
    max_volume_bytes,
)
from .contract import BratsContract
from .errors import CaseContractError, CaseError, PreparationError
from .ingest.provenance import MAX_PROVENANCE_BYTES, PROVENANCE_FILE, IngestProvenance
from .layouts import RawLayout, folder_layout
from .normalise import brain_mask, normalise_modalities
from .statistics import DatasetStatistics, dataset_statistics

__all__ = [
    "DATA_DIR",
    "MANIFEST_FILE",
    "REPORT_FILE",
    "CaseRejection",
    "CasesRejectedError",
    "NoValidCasesError",
    "PreparationReport",
    "ProgressFn",
    "prepare_dataset",
]

logger = logging.getLogger(__name__)

DATA_DIR = "data"
MANIFEST_FILE = "manifest.json"
REPORT_FILE = "preparation_report.json"

ProgressFn = Callable[[int, int], None]
"""Called after each case with (cases done, cases in total)."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CaseRejection(BaseModel):
    """A raw case that was not prepared, and why."""

    model_config = _FROZEN

    case: str
    reason: str


class PreparationReport(BaseModel):
    """Outcome of one preparation (version 2: the statistics of version 2); written to
    ``preparation_report.json``."""

    model_config = _FROZEN

    format: Literal["sealbench/brats-preparation-report"] = "sealbench/brats-preparation-report"
    version: Literal[2] = 2
    contract_id: str
    contract_version: int
    #: The raw layout read (``brats2023`` or ``brats2021``, :mod:`.layouts`).
    layout: str = "brats2023"
    #: Prepared case ids (a BraTS 2021 folder ``BraTS2021_00000`` becomes
    #: ``BraTS-GLI-00000-000``); ``rejected`` names raw folders.
    accepted: tuple[str, ...]
    rejected: tuple[CaseRejection, ...]
    dataset_digest: Sha256Digest
    statistics: DatasetStatistics


_NIFTI1_HEADER = 348


class CasesRejectedError(PreparationError):
    """Some raw cases failed the contract and the caller asked for all or nothing (``strict``);
    ``rejected`` says why for each."""

    def __init__(self, rejected: tuple[CaseRejection, ...], accepted: int) -> None:
        self.rejected = rejected
        super().__init__(
            f"{len(rejected)} of {len(rejected) + accepted} raw cases failed the contract"
        )


class NoValidCasesError(PreparationError):
    """No raw case passed the contract; ``rejected`` says why for each."""

    def __init__(self, rejected: tuple[CaseRejection, ...]) -> None:
        self.rejected = rejected
        super().__init__(f"no case passed the contract ({len(rejected)} rejected)")


def _visible(folder: Path) -> list[Path]:
    """The entries of ``folder`` that are not hidden (see the module's docstring), sorted."""
    return sorted(entry for entry in folder.iterdir() if not entry.name.startswith("."))


def _read_parts(folder: Path, layout: RawLayout, contract: BratsContract) -> dict[str, bytes]:
    """Bytes of each part of a raw case folder (keyed by the contract's part names), after
    checking every file's name (in ``layout``) and size."""
    parts: dict[str, bytes] = {}
    limit = max_volume_bytes(contract)
    for path in _visible(folder):
        if not path.is_file() or path.is_symlink():
            raise CaseContractError(f"{path.name!r} is not a regular file")
        part = layout.file_part(folder.name, path.name, contract.file_suffix)
        if part is None:
            raise CaseContractError(
                f"file {path.name!r} is not named {folder.name}{layout.separator}<part>"
                f"{contract.file_suffix} with part in {tuple(layout.parts)} ({layout.title} "
                "layout)")
        if part in parts:
            raise CaseContractError(f"{part}: more than one file")
        if path.stat().st_size > limit:
            raise CaseContractError(f"{part}: {_too_large(path, contract)}")
        parts[part] = path.read_bytes()
    return parts


def _too_large(path: Path, contract: BratsContract) -> str:
    """Why a file is over the grid's size: the grid its header states, when it can be read."""
    expected = "x".join(map(str, contract.shape))
    try:
        with gzip.open(path) as handle:
            raw = io.BytesIO(handle.read(_NIFTI1_HEADER))
            header = nibabel.Nifti1Header.from_fileobj(raw)  # type: ignore[no-untyped-call]
        found = "x".join(str(int(n)) for n in header.get_data_shape())
    except (OSError, EOFError, ValueError, nibabel.filebasedimages.ImageFileError):
        return f"file larger than a {expected} volume can be ({path.stat().st_size} bytes)"
    return f"grid {found}, but the contract expects {expected}"


def _prepare_case(folder: Path, target: Path, contract: BratsContract,
                  layout: RawLayout) -> str:
    """Prepare one raw case folder into ``target``; returns the prepared case id."""
    if not layout.matches(folder.name):
        raise CaseContractError(
            f"folder name does not match the {layout.title} naming {layout.folder_pattern!r}")
    case_id = layout.case_id(folder.name)
    if (target / case_id).exists():
        raise CaseContractError(f"a case {case_id} was already prepared from another folder")
    case = load_raw_case(case_id, _read_parts(folder, layout, contract), contract,
                         labels=layout.labels)
    assert case.seg is not None  # load_raw_case requires the segmentation
    brain = brain_mask(case.modalities)
    if not brain.any():
        raise CaseContractError("every modality is zero (no brain voxels)")
    normalised = normalise_modalities(case.modalities)
    out = target / case.case_id
    out.mkdir(parents=True)
    for index, name in enumerate(contract.modalities):
        data = encode_nifti(normalised[index], case.affine, slope=INTENSITY_SLOPE)
        (out / contract.file_name(case.case_id, name)).write_bytes(data)
    seg = encode_nifti(case.seg.astype(np.uint8), case.affine)
    (out / contract.file_name(case.case_id, contract.seg_name)).write_bytes(seg)
    return case.case_id


def prepare_dataset(raw_dir: Path, out_dir: Path, contract: BratsContract,
                    progress: ProgressFn | None = None, *,
                    strict: bool = False) -> PreparationReport:
    """Prepare every case folder under ``raw_dir`` into ``out_dir`` (which must not exist).

    Returns the report; raises :class:`NoValidCasesError` when no case passes,
    :class:`CasesRejectedError` when ``strict`` and any case fails, and
    :class:`PreparationError` when ``out_dir`` exists, ``raw_dir`` is not a directory or holds
    no case folder. In every failure nothing is left at ``out_dir`` or beside it."""
    if not raw_dir.is_dir():
        raise PreparationError(f"raw dataset {raw_dir} is not a directory")
    if not any(entry.is_dir() for entry in _visible(raw_dir)):
        example = contract.case_id_pattern.replace(r"\d{5}", "00001").replace(r"\d{3}", "000")
        raise PreparationError(
            f"no case folders in {raw_dir}: expected one folder per case named like {example} "
            f"(pattern {contract.case_id_pattern}) holding "
            f"{', '.join(contract.file_name(example, p) for p in contract.parts)}, or "
            f"BraTS 2021 folders BraTS2021_00001 holding BraTS2021_00001_"
            "{flair,t1,t1ce,t2,seg}.nii.gz"
        )
    if out_dir.exists() or out_dir.is_symlink():
        raise PreparationError(f"output {out_dir} already exists; choose a new path")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.partial-{secrets.token_hex(6)}"
    tmp.mkdir()
    try:
        report = _prepare_into(raw_dir, tmp, contract, progress)
        if strict and report.rejected:
            raise CasesRejectedError(report.rejected, len(report.accepted))
        _publish(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("prepared %d cases (%d rejected) into %s", len(report.accepted),
                len(report.rejected), out_dir)
    return report


def _publish(tmp: Path, out_dir: Path) -> None:
    """Rename the finished ``tmp`` to ``out_dir``, which must still not exist: another
    preparation into the same new path may have finished first (a rename onto its folder fails
    with ENOTEMPTY, or onto a file with ENOTDIR)."""
    try:
        tmp.rename(out_dir)
    except OSError as exc:
        if out_dir.exists() or out_dir.is_symlink():
            raise PreparationError(
                f"output {out_dir} appeared while this preparation ran (another 'prepare' "
                "into the same path finished first?); it was left as it is and nothing of "
                "this run was kept: choose a new path") from exc
        raise


def _ingestion(path: Path) -> dict[str, object]:
    """The ingestion record at ``path``, validated; :class:`PreparationError` (no value of the
    file quoted) when it is not one."""
    try:
        if path.stat().st_size > MAX_PROVENANCE_BYTES:
            raise PreparationError(f"{PROVENANCE_FILE} is larger than "
                                   f"{MAX_PROVENANCE_BYTES // 1024} KiB")
        record = IngestProvenance.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise PreparationError(f"{PROVENANCE_FILE} cannot be read") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc", ())
        # Only a field of the record is named: a key of the file may be anything, a name too.
        where = str(loc[0]) if loc and loc[0] in IngestProvenance.model_fields else "a field"
        problem = "not allowed" if first.get("type") == "extra_forbidden" else "invalid"
        raise PreparationError(
            f"{PROVENANCE_FILE} is not the record 'sealbench dataset ingest' writes ({where} "
            f"{problem}); accept the cases again with 'dataset ingest' or remove the "
            "file") from None
    return record.model_dump(mode="json")


def _prepare_into(raw_dir: Path, tmp: Path, contract: BratsContract,
                  progress: ProgressFn | None) -> PreparationReport:
    entries = _visible(raw_dir)
    ingestion = None
    if (raw_dir / PROVENANCE_FILE).is_file() and not (raw_dir / PROVENANCE_FILE).is_symlink():
        ingestion = _ingestion(raw_dir / PROVENANCE_FILE)
        entries = [e for e in entries if e.name != PROVENANCE_FILE]
    layout = folder_layout([e for e in entries if e.is_dir() and not e.is_symlink()], contract)
    cases_dir = tmp / DATA_DIR / CASES_DIR
    cases_dir.mkdir(parents=True)
    accepted: list[str] = []
    rejected: list[CaseRejection] = []
    for done, entry in enumerate(entries, start=1):
        if not entry.is_dir() or entry.is_symlink():
            rejected.append(CaseRejection(case=entry.name, reason="not a case folder"))
        else:
            try:
                accepted.append(_prepare_case(entry, cases_dir, contract, layout))
            except CaseError as exc:
                if layout.matches(entry.name) and layout.case_id(entry.name) not in accepted:
                    shutil.rmtree(cases_dir / layout.case_id(entry.name), ignore_errors=True)
                rejected.append(CaseRejection(case=entry.name, reason=str(exc)))
                # returned in the report, which the caller shows: a warning here printed each
                # reason a second time
                logger.info("rejected case %s: %s", entry.name, exc)
        if progress is not None:
            progress(done, len(entries))
    if not accepted:
        raise NoValidCasesError(tuple(rejected))
    statistics = dataset_statistics(contract, len(accepted), len(rejected))
    data = tmp / DATA_DIR
    (data / STATISTICS_FILE).write_bytes(statistics.to_canonical_json())
    (data / DATASET_FILE).write_bytes(canonical_json({
        "format": PREPARED_FORMAT, "version": 1, "n_cases": len(accepted),
        "contract": contract.model_dump(mode="json"),
        **({} if ingestion is None else {"ingestion": ingestion}),
    }))
    manifest = build_manifest(data)
    (tmp / MANIFEST_FILE).write_bytes(manifest.to_bytes())
    report = PreparationReport(contract_id=contract.contract_id, layout=layout.name,
                               contract_version=contract.version, accepted=tuple(accepted),
                               rejected=tuple(rejected), dataset_digest=manifest.digest,
                               statistics=statistics)
    (tmp / REPORT_FILE).write_bytes(canonical_json(report.model_dump(mode="json")))
    return report
