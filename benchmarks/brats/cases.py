"""Cases in memory: bounded NIfTI decoding from bytes, contract checks, and the prepared layout.

The enclave decrypts case files into memory and calls :func:`load_case_from_bytes`; preparation
reads raw files from disk through the same checks. Decoding is bounded: gzip members are
inflated at most to the size the contract's grid allows, so a compression bomb is rejected.

Prepared dataset layout (``format`` ``sealbench/brats-prepared``, version 1; the manifest and
its digest cover everything under ``data/``)::

    <out>/manifest.json                canonical manifest of data/ (sealbench.crypto.manifest)
    <out>/preparation_report.json      accepted and rejected case ids with reasons (owner only)
    <out>/data/dataset.json            format, version, contract, case count
    <out>/data/statistics.json         counts and the contract's grid (:mod:`.statistics`)
    <out>/data/cases/<id>/<id>-{t1n,t1c,t2w,t2f}.nii.gz   z-scored, int16 with scl_slope 1/1000
    <out>/data/cases/<id>/<id>-seg.nii.gz                  uint8 labels, contract convention

All ``.nii.gz`` files are single-member gzip with mtime 0 and no file name, so preparing the
same input twice gives byte-identical files and the same manifest digest. Prepared cases are
RAS+ (:func:`load_raw_case` reorients raw volumes losslessly, :mod:`.orientation`) and on the
contract's grid.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import nibabel as nib
import numpy as np
import numpy.typing as npt

from .contract import BratsContract, LabelMap
from .errors import CaseContractError, CaseFormatError
from .orientation import check_header_orientation, to_ras

__all__ = [
    "CASES_DIR",
    "DATASET_FILE",
    "PREPARED_FORMAT",
    "STATISTICS_FILE",
    "Case",
    "case_files_from_manifest_paths",
    "decode_nifti",
    "encode_nifti",
    "load_case_from_bytes",
    "load_raw_case",
    "prepared_case_path",
]

PREPARED_FORMAT = "sealbench/brats-prepared"
CASES_DIR = "cases"
DATASET_FILE = "dataset.json"
STATISTICS_FILE = "statistics.json"
INTENSITY_SLOPE = 1.0 / 1000.0
_HEADER_SLACK = 1 << 20

logger = logging.getLogger(__name__)
_NIBABEL_LOG = threading.Lock()

FloatArray = npt.NDArray[np.float32]
Affine = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Case:
    """One case in memory: float32 modalities in contract order, affine, optional labels."""

    case_id: str
    modalities: dict[str, FloatArray]
    affine: Affine
    seg: npt.NDArray[np.uint8] | None

    @property
    def shape(self) -> tuple[int, int, int]:
        """Grid shape of the case."""
        first = next(iter(self.modalities.values()))
        return (int(first.shape[0]), int(first.shape[1]), int(first.shape[2]))


def max_volume_bytes(contract: BratsContract) -> int:
    """Largest inflated NIfTI accepted for the contract's grid (float64 data + header slack)."""
    return contract.n_voxels * 8 + _HEADER_SLACK


def _inflate(data: bytes, limit: int) -> bytes:
    if data[:2] != b"\x1f\x8b":
        raise CaseFormatError("not gzip-compressed (expected a .nii.gz)")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CaseFormatError("corrupt gzip stream") from exc
    if len(out) > limit:
        raise CaseFormatError(f"inflates to more than {limit} bytes, the most this grid allows")
    if not inflater.eof:
        raise CaseFormatError("truncated gzip stream")
    return out


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _nibabel_messages(part: str) -> Iterator[None]:
    """nibabel reports the header fixes it makes (``pixdim[1,2,3] should be non-zero; setting 0
    dims to 1``) through a stderr handler of its own, bare in the middle of a progress bar;
    here they come out through sealbench's log instead, naming the file part."""
    nib_logger = nib.imageglobals.logger
    collected = _Collected()
    with _NIBABEL_LOG:
        handlers, propagate = nib_logger.handlers, nib_logger.propagate
        nib_logger.handlers, nib_logger.propagate = [collected], False
        try:
            yield
        finally:
            nib_logger.handlers, nib_logger.propagate = handlers, propagate
    for message in collected.messages:
        logger.warning("%s: nibabel: %s", part, message)


def decode_nifti(data: bytes, contract: BratsContract, part: str = "image") -> nib.Nifti1Image:
    """Parse gzip-compressed NIfTI-1 bytes, bounded by the contract's grid size."""
    raw = _inflate(data, max_volume_bytes(contract))
    try:
        with _nibabel_messages(part):
            image = nib.Nifti1Image.from_bytes(raw)
    except Exception as exc:  # nibabel raises many types for malformed headers
        raise CaseFormatError("not a readable NIfTI-1 image") from exc
    return image


def encode_nifti(array: npt.NDArray[Any], affine: Affine, *,
                 slope: float | None = None) -> bytes:
    """Deterministic ``.nii.gz`` bytes of ``array`` (stored as given, or as int16 with
    ``slope`` when one is given)."""
    if slope is not None:
        stored = np.clip(np.rint(array / slope), -32767, 32767).astype(np.int16)
        image = nib.Nifti1Image(stored, affine)  # type: ignore[no-untyped-call]
        image.header.set_slope_inter(slope, 0.0)  # type: ignore[no-untyped-call]
    else:
        image = nib.Nifti1Image(array, affine)  # type: ignore[no-untyped-call]
    image.header.set_xyzt_units("mm", "sec")  # type: ignore[no-untyped-call]
    image.header.set_qform(affine, code=1)  # type: ignore[no-untyped-call]
    image.header.set_sform(affine, code=1)  # type: ignore[no-untyped-call]
    return gzip.compress(image.to_bytes(), compresslevel=1, mtime=0)


def _check_geometry(part: str, image: nib.Nifti1Image, contract: BratsContract) -> None:
    shape = tuple(int(s) for s in image.shape)
    if shape != contract.shape:
        raise CaseContractError(f"{part}: shape {shape} differs from the contract's "
                                f"{contract.shape}")
    zooms = tuple(float(z) for z in image.header.get_zooms()[:3])  # type: ignore[no-untyped-call]
    if not np.allclose(zooms, contract.spacing_mm, atol=contract.spacing_tolerance_mm):
        raise CaseContractError(f"{part}: spacing {zooms} mm differs from the contract's "
                                f"{contract.spacing_mm}")


def _image_array(part: str, image: nib.Nifti1Image) -> FloatArray:
    try:
        array = np.asarray(image.get_fdata(dtype=np.float32))
    except Exception as exc:  # truncated data blocks surface as various nibabel/numpy errors
        raise CaseFormatError(f"{part}: image data unreadable") from exc
    if not np.isfinite(array).all():
        raise CaseContractError(f"{part}: contains NaN or infinite values")
    return array


def _labels(part: str, image: nib.Nifti1Image, contract: BratsContract,
            source: LabelMap | None = None) -> npt.NDArray[np.uint8]:
    """The label map of ``image`` in the contract's convention; ``source`` is the convention it
    is written in, when that is another (a BraTS 2021 file under a 2023 contract)."""
    array = _image_array(part, image)
    if not np.array_equal(array, np.rint(array)):
        raise CaseContractError(f"{part}: labels are not integers")
    written = source or contract.label_map
    present = {int(v) for v in np.unique(array)}
    unknown = present - written.allowed_values
    if unknown:
        raise CaseContractError(
            f"{part}: labels {sorted(unknown)} are not in the {written.name} map "
            f"{sorted(written.allowed_values)}")
    labels = array.astype(np.uint8)
    if written != contract.label_map:
        labels = contract.label_map.from_class_indices(written.to_class_indices(labels))
    return labels


def load_case(case_id: str, parts: Mapping[str, bytes], contract: BratsContract, *,
              require_seg: bool = True) -> Case:
    """Decode and check one case given the bytes of each part (keys: modality names and the
    segmentation name). Raises :class:`CaseError` subclasses naming the offending part."""
    return _load(case_id, parts, contract, require_seg=require_seg, raw=None)


def load_raw_case(case_id: str, parts: Mapping[str, bytes], contract: BratsContract, *,
                  labels: LabelMap) -> Case:
    """Decode a raw labelled case for preparation: as :func:`load_case`, after turning every
    volume to RAS+ (:func:`.orientation.to_ras`: lossless for axis-aligned volumes, an oblique
    one is rejected) and reading the segmentation in the ``labels`` convention (converted into
    the contract's)."""
    return _load(case_id, parts, contract, require_seg=True, raw=labels)


def _load(case_id: str, parts: Mapping[str, bytes], contract: BratsContract, *,
          require_seg: bool, raw: LabelMap | None) -> Case:
    if not contract.is_case_id(case_id):
        raise CaseContractError(f"case id {case_id!r} does not match the contract's naming "
                                f"{contract.case_id_pattern!r}")
    expected = contract.parts if require_seg else contract.modalities
    missing = [p for p in expected if p not in parts]
    if missing:
        raise CaseContractError(f"missing {', '.join(missing)}")
    unexpected = sorted(set(parts) - set(contract.parts))
    if unexpected:
        raise CaseContractError(f"unexpected parts {unexpected}")
    images = {part: decode_nifti(parts[part], contract, part)
              for part in contract.parts if part in parts}
    if raw is not None:
        for part, image in images.items():
            check_header_orientation(part, image, contract.affine_tolerance)
        images = {part: to_ras(part, image) for part, image in images.items()}
    reference = contract.modalities[0]
    affine = np.asarray(images[reference].affine, dtype=np.float64)
    for part, image in images.items():
        _check_geometry(part, image, contract)
        if not np.allclose(image.affine, affine, atol=contract.affine_tolerance):
            raise CaseContractError(f"{part}: affine differs from {reference}'s")
    modalities = {m: _image_array(m, images[m]) for m in contract.modalities}
    seg = _labels(contract.seg_name, images[contract.seg_name], contract, raw) if (
        contract.seg_name in images) else None
    return Case(case_id=case_id, modalities=modalities, affine=affine, seg=seg)


def _split_name(name: str, contract: BratsContract) -> tuple[str, str]:
    base = PurePosixPath(name).name
    if not base.endswith(contract.file_suffix):
        raise CaseContractError(f"file {base!r} is not {contract.file_suffix}")
    stem = base[: -len(contract.file_suffix)]
    case_id, sep, part = stem.rpartition("-")
    if not sep or part not in contract.parts or not contract.is_case_id(case_id):
        raise CaseContractError(f"file {base!r} is not named <case id>-<part>"
                                f"{contract.file_suffix} with part in {contract.parts}")
    return case_id, part


def load_case_from_bytes(files: Mapping[str, bytes], contract: BratsContract, *,
                         require_seg: bool = True) -> Case:
    """Load one case from in-memory files keyed by file name or relative path (for example
    ``cases/BraTS-GLI-00001-000/BraTS-GLI-00001-000-t1n.nii.gz``); all must name one case."""
    parts: dict[str, bytes] = {}
    case_ids = set()
    for name, data in files.items():
        case_id, part = _split_name(name, contract)
        case_ids.add(case_id)
        parts[part] = data
    if len(case_ids) != 1:
        raise CaseContractError(f"files must belong to exactly one case, found {len(case_ids)}")
    return load_case(case_ids.pop(), parts, contract, require_seg=require_seg)


def prepared_case_path(case_id: str, part: str, contract: BratsContract) -> str:
    """Relative path (under ``data/``) of one part of a prepared case."""
    return f"{CASES_DIR}/{case_id}/{contract.file_name(case_id, part)}"


def case_files_from_manifest_paths(paths: Iterable[str], contract: BratsContract) -> dict[
    str, dict[str, str]
]:
    """Group a prepared dataset's manifest paths by case: ``{case_id: {part: path}}``, sorted by
    case id. Metadata files (``dataset.json``, ``statistics.json``) are skipped; any other path
    outside the layout, or a case missing a part, raises :class:`CaseContractError`."""
    grouped: dict[str, dict[str, str]] = {}
    for path in paths:
        if path in (DATASET_FILE, STATISTICS_FILE):
            continue
        pieces = PurePosixPath(path).parts
        if len(pieces) != 3 or pieces[0] != CASES_DIR:
            raise CaseContractError(f"path {path!r} is outside the prepared layout")
        case_id, part = _split_name(pieces[2], contract)
        if pieces[1] != case_id:
            raise CaseContractError(f"path {path!r} is filed under another case's folder")
        grouped.setdefault(case_id, {})[part] = path
    for case_id, parts in grouped.items():
        missing = [p for p in contract.parts if p not in parts]
        if missing:
            raise CaseContractError(f"case {case_id} lacks {', '.join(missing)}")
    return dict(sorted(grouped.items()))
