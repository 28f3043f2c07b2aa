# mypy: disable-error-code="no-untyped-call"
"""DICOM series to volumes, refusing what cannot be converted faithfully.

**Why pydicom (and not dcm2niix or SimpleITK's GDCM reader).** The conversion has to *refuse*
rather than repair: a series with two acquisitions interleaved, a missing slice, or uneven slice
spacing must stop its study with the series named. pydicom exposes every header the checks need
(``ImagePositionPatient``, ``ImageOrientationPatient``, ``PixelSpacing``, rescale, echo and
acquisition numbers) in-process, with no binary to ship and no silent interpolation; dcm2niix is
excellent but decides for itself (it resamples gantry tilt, splits or merges series and reports
in free text), and GDCM's series reader sorts without saying what it dropped. The volume is
handed to SimpleITK with its exact geometry: direction cosines from the orientation, the slice
axis from the positions themselves (so a tilted stack keeps its shear), the first slice's
position as origin.

A study folder is read whole (every file under it, any depth): files ending ``.nii``/``.nii.gz``
are annotations (:mod:`.pipeline`), the rest must be DICOM. MR image series become
:class:`Series`; a DICOM-SEG object or an RT Structure Set (:mod:`.rtstruct`) is kept for the
annotation step; other DICOM objects
(presentation states, structured reports, localisers without geometry) are counted and left out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
import SimpleITK as sitk  # noqa: N813
from pydicom.errors import InvalidDicomError

from .errors import SeriesError, StudyError

__all__ = ["MAX_FILES", "RTSTRUCT_STORAGE", "SEG_STORAGE", "Series", "Study", "read_study",
           "series_volume"]

#: At most this many files in one study folder.
MAX_FILES = 20_000
#: Segmentation Storage.
SEG_STORAGE = "1.2.840.10008.5.1.4.1.1.66.4"
#: RT Structure Set Storage.
RTSTRUCT_STORAGE = "1.2.840.10008.5.1.4.1.1.481.3"
_ORIENTATION_TOLERANCE = 1e-4
_SPACING_TOLERANCE = 0.01  # relative
_NIFTI = (".nii", ".nii.gz")


@dataclass(frozen=True)
class Series:
    """One image series: its number, the header values recognition reads, and its slices' files
    (unsorted; :func:`series_volume` sorts and checks them)."""

    uid: str
    number: int
    description: str
    protocol: str
    repetition_ms: float | None
    echo_ms: float | None
    inversion_ms: float | None
    contrast: bool
    acquisition: str
    files: tuple[Path, ...]

    @property
    def label(self) -> str:
        """How messages name the series: by its number, never its description."""
        return f"series {self.number}"


@dataclass(frozen=True)
class Study:
    """A study folder read: its image series, DICOM-SEG files, NIfTI files, how many other
    DICOM objects were left out, and RT Structure Set files."""

    series: tuple[Series, ...]
    segmentations: tuple[Path, ...]
    niftis: tuple[Path, ...]
    skipped: int
    study_uid: str
    structures: tuple[Path, ...] = ()


def _float(ds: pydicom.Dataset, name: str) -> float | None:
    value = ds.get(name)
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_study(folder: Path) -> Study:
    """Group the files under ``folder`` into series (headers only; pixels are read later)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    if len(files) > MAX_FILES:
        raise StudyError(f"more than {MAX_FILES} files in the study folder")
    groups: dict[str, list[tuple[Path, pydicom.Dataset]]] = defaultdict(list)
    segs: list[Path] = []
    structures: list[Path] = []
    niftis: list[Path] = []
    skipped = 0
    not_dicom = 0
    study_uids: set[str] = set()
    for path in files:
        if path.is_symlink():
            raise StudyError("the study folder holds a symbolic link; copy the files instead")
        if path.name.lower().endswith(_NIFTI):
            niftis.append(path)
            continue
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True)
        except (InvalidDicomError, OSError, ValueError, EOFError):
            not_dicom += 1
            continue
        sop_class = str(ds.get("SOPClassUID", ""))
        if sop_class == SEG_STORAGE:
            segs.append(path)
            continue
        if sop_class == RTSTRUCT_STORAGE:
            structures.append(path)
            continue
        if ds.get("Modality") != "MR" or "ImagePositionPatient" not in ds \
                or "ImageOrientationPatient" not in ds or "PixelSpacing" not in ds:
            skipped += 1
            continue
        study_uids.add(str(ds.get("StudyInstanceUID", "")))
        groups[str(ds.get("SeriesInstanceUID", ""))].append((path, ds))
    if not_dicom:
        raise StudyError(f"{not_dicom} file(s) in the study folder are neither DICOM nor NIfTI; "
                         "remove them or move them out")
    if len(study_uids) > 1:
        raise StudyError(f"the folder holds {len(study_uids)} studies; give each its own folder")
    series = []
    for uid, members in groups.items():
        first = members[0][1]
        numbers = {int(ds.get("SeriesNumber", 0) or 0) for _, ds in members}
        if len(numbers) > 1:
            raise SeriesError(f"series numbers {sorted(numbers)} share one series UID")
        series.append(Series(
            uid=uid, number=numbers.pop(), description=str(first.get("SeriesDescription", "")),
            protocol=str(first.get("ProtocolName", "")),
            repetition_ms=_float(first, "RepetitionTime"), echo_ms=_float(first, "EchoTime"),
            inversion_ms=_float(first, "InversionTime"),
            contrast=bool(str(first.get("ContrastBolusAgent", "")).strip()),
            acquisition=str(first.get("MRAcquisitionType", "")),
            files=tuple(path for path, _ in members)))
    used = [s.number for s in series]
    duplicated = sorted({n for n in used if used.count(n) > 1})
    if duplicated:
        raise StudyError(f"series numbers {duplicated} are used by more than one series")
    return Study(series=tuple(sorted(series, key=lambda s: s.number)),
                 segmentations=tuple(segs), niftis=tuple(niftis), skipped=skipped,
                 study_uid=study_uids.pop() if study_uids else "",
                 structures=tuple(structures))


def series_volume(series: Series) -> sitk.Image:
    """The series as a float32 SimpleITK image in its exact geometry.

    Refuses (:class:`SeriesError`, naming the series by number): fewer than 3 slices; slices
    whose size, pixel spacing or orientation differ (mixed series); several slices at one
    position (interleaved acquisitions or echoes); a gap between positions larger than the
    others (a missing slice); uneven spacing otherwise; a slice axis in the slice plane."""
    datasets = [pydicom.dcmread(path) for path in series.files]
    name = series.label
    if len(datasets) < 3:
        raise SeriesError(f"{name}: {len(datasets)} slice(s); a volume needs at least 3")
    first = datasets[0]
    shape = (int(first.Rows), int(first.Columns))
    orientation = np.array([float(v) for v in first.ImageOrientationPatient], dtype=np.float64)
    spacing = np.array([float(v) for v in first.PixelSpacing], dtype=np.float64)
    for ds in datasets[1:]:
        if (int(ds.Rows), int(ds.Columns)) != shape:
            raise SeriesError(f"{name}: mixed series (slices of different sizes)")
        if np.abs(np.array([float(v) for v in ds.ImageOrientationPatient]) - orientation).max() \
                > _ORIENTATION_TOLERANCE:
            raise SeriesError(f"{name}: mixed series (slices in different orientations)")
        if np.abs(np.array([float(v) for v in ds.PixelSpacing]) - spacing).max() > 1e-4:
            raise SeriesError(f"{name}: mixed series (slices of different pixel spacing)")
    row, col = orientation[:3], orientation[3:]
    normal = np.cross(row, col)
    if abs(np.linalg.norm(normal) - 1.0) > 1e-3 or abs(float(row @ col)) > 1e-3:
        raise SeriesError(f"{name}: its image orientation is not two orthonormal directions")
    positions = np.array([[float(v) for v in ds.ImagePositionPatient] for ds in datasets])
    along = positions @ normal
    order = np.argsort(along, kind="stable")
    along, positions = along[order], positions[order]
    datasets = [datasets[i] for i in order]
    steps = np.diff(along)
    if (steps < 1e-3).any():
        raise SeriesError(f"{name}: mixed series ({int((steps < 1e-3).sum())} slice(s) at the "
                          "same position as another: interleaved acquisitions or echoes)")
    step = float(np.median(steps))
    if (steps > step * 1.5).any():
        missing = int(np.round(steps[steps > step * 1.5] / step - 1).sum())
        raise SeriesError(f"{name}: missing slices (about {missing} missing of "
                          f"{len(datasets) + missing})")
    if np.abs(steps - step).max() > _SPACING_TOLERANCE * step:
        raise SeriesError(f"{name}: inconsistent slice spacing "
                          f"({steps.min():.3f} to {steps.max():.3f} mm)")
    # The slice axis from the positions: a tilted (sheared) stack keeps its shear.
    axis = (positions[-1] - positions[0]) / (len(positions) - 1)
    off_normal = axis - (axis @ normal) * normal
    if np.linalg.norm(off_normal) > 1e-3 * np.linalg.norm(axis):
        tilt = float(np.degrees(np.arctan2(np.linalg.norm(off_normal), axis @ normal)))
        if tilt > 30.0:
            raise SeriesError(f"{name}: slices are offset by {tilt:.1f} degrees from their "
                              "normal (gantry tilt over 30 degrees)")
    slice_spacing = float(np.linalg.norm(axis))
    stack = np.empty((len(datasets), *shape), dtype=np.float32)
    for index, ds in enumerate(datasets):
        try:
            pixels = ds.pixel_array
        except (AttributeError, ValueError, NotImplementedError, RuntimeError) as exc:
            raise SeriesError(f"{name}: slice {index + 1} has pixel data that cannot be decoded "
                              f"({type(exc).__name__})") from exc
        if pixels.shape != shape:
            raise SeriesError(f"{name}: mixed series (multi-frame or odd slice data)")
        slope = float(ds.get("RescaleSlope", 1) or 1)
        intercept = float(ds.get("RescaleIntercept", 0) or 0)
        stack[index] = pixels.astype(np.float32) * np.float32(slope) + np.float32(intercept)
    image = sitk.GetImageFromArray(stack)  # [k, rows, columns] -> size (columns, rows, k)
    image.SetSpacing((float(spacing[1]), float(spacing[0]), slice_spacing))
    image.SetOrigin(tuple(float(v) for v in positions[0]))
    direction = np.stack([row, col, axis / slice_spacing], axis=1)
    image.SetDirection(tuple(float(v) for v in direction.ravel()))
    return image


