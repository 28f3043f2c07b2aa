# mypy: disable-error-code="no-untyped-call"
"""RTSTRUCT annotations: contours per ROI, referenced to an image series, rasterised onto that
series' own grid (and, for the phantoms, written from a label volume).

**Why pydicom and scikit-image.** An RT Structure Set is a list of planar polygons in patient
millimetres, each ROI named in free text; no library the project uses turns it into a volume
faithfully on an oblique, anisotropic or tilted grid (highdicom reads SEG, not RTSTRUCT), and
the rasterisation is short enough to own: each contour's points are taken into the referenced
series' continuous voxel indices through its exact geometry (:func:`.dicom.series_volume`'s
direction, shear included), must lie on one of its slices, and are filled by pixel centre
(:func:`skimage.draw.polygon2mask`); the contours of one ROI on one slice combine by parity, so a
contour inside another is a hole.

An ROI is mapped to the contract's tissues by its name (``ROIName``) through the mapping file's
``segment_labels``, as a DICOM-SEG segment's label is (case-insensitive); an ROI with another
name stops the case, named by its number only (the name is free text). Where ROIs overlap (the
usual way of drawing a tumour core inside its oedema), the smaller one wins. Contours of other
types than ``CLOSED_PLANAR`` (points, open lines) hold no area and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pydicom
import SimpleITK as sitk  # noqa: N813
from pydicom.dataset import FileMetaDataset
from pydicom.sequence import Sequence as DicomSequence
from pydicom.uid import ExplicitVRLittleEndian, generate_uid
from skimage.draw import polygon2mask
from skimage.measure import find_contours

from ..contract import BratsContract
from .dicom import RTSTRUCT_STORAGE
from .errors import AnnotationError
from .sequences import SequenceMapping

__all__ = ["RTSTRUCT_STORAGE", "read_rtstruct", "referenced_series", "write_rtstruct"]

#: How far (in slices) a contour's points may lie from the slice they are drawn on.
_ON_SLICE: Final = 0.1
#: At most this many contour points in one structure set (a whole-brain ROI drawn at 1 mm on
#: 150 slices has about 100,000).
MAX_POINTS: Final = 5_000_000


def _read(path: Path) -> pydicom.Dataset:
    try:
        ds = pydicom.dcmread(path)
    except (pydicom.errors.InvalidDicomError, OSError, ValueError, EOFError) as exc:
        raise AnnotationError(f"the RTSTRUCT annotation cannot be read "
                              f"({type(exc).__name__})") from exc
    if str(ds.get("SOPClassUID", "")) != RTSTRUCT_STORAGE:
        raise AnnotationError("the RTSTRUCT annotation is not an RT Structure Set")
    return ds


def referenced_series(path: Path) -> str:
    """The series instance UID the structure set's contours are drawn on."""
    ds = _read(path)
    uids = {str(series.SeriesInstanceUID)
            for frame in ds.get("ReferencedFrameOfReferenceSequence", [])
            for study in frame.get("RTReferencedStudySequence", [])
            for series in study.get("RTReferencedSeriesSequence", [])
            if "SeriesInstanceUID" in series}
    if len(uids) != 1:
        raise AnnotationError(f"the RTSTRUCT annotation references {len(uids)} image series; "
                              "one is needed")
    return uids.pop()


def _slice_masks(points: npt.NDArray[np.float64], image: sitk.Image, number: int,
                 ) -> tuple[int, npt.NDArray[np.bool_]]:
    """The slice a contour lies on and its filled polygon there (``[i, j]``)."""
    direction = np.array(image.GetDirection(), dtype=np.float64).reshape(3, 3)
    scaled: npt.NDArray[np.float64] = direction * np.array(image.GetSpacing(),
                                                           dtype=np.float64)[None, :]
    to_index = np.linalg.inv(scaled)
    index = (points - np.array(image.GetOrigin())) @ to_index.T
    k = float(np.median(index[:, 2]))
    slice_k = round(k)
    size = image.GetSize()
    if np.abs(index[:, 2] - slice_k).max() > _ON_SLICE or not 0 <= slice_k < size[2]:
        raise AnnotationError(f"a contour of ROI {number} does not lie on a slice of the "
                              "series it references")
    mask: npt.NDArray[np.bool_] = polygon2mask((size[0], size[1]), index[:, :2])
    return slice_k, mask


def read_rtstruct(path: Path, image: sitk.Image, mapping: SequenceMapping,
                  contract: BratsContract) -> sitk.Image:
    """The structure set at ``path`` as a class-index image on ``image``'s grid (the series it
    references, :func:`referenced_series`)."""
    ds = _read(path)
    wanted = {k.lower(): v for k, v in mapping.segment_labels.items()}
    names = {int(item.ROINumber): str(item.get("ROIName", "")).strip().lower()
             for item in ds.get("StructureSetROISequence", [])}
    size = image.GetSize()
    masks: list[tuple[int, npt.NDArray[np.bool_]]] = []  # (class, [i, j, k] mask)
    total = 0
    for roi in ds.get("ROIContourSequence", []):
        number = int(roi.ReferencedROINumber)
        name = names.get(number)
        if name is None or name not in wanted:
            raise AnnotationError(f"ROI {number}'s name is not in the mapping file's "
                                  f"segment_labels {sorted(wanted)}")
        mask = np.zeros(size, dtype=bool)
        for contour in roi.get("ContourSequence", []):
            if str(contour.get("ContourGeometricType", "")) != "CLOSED_PLANAR":
                continue
            data = np.asarray(contour.ContourData, dtype=np.float64)
            total += data.size // 3
            if total > MAX_POINTS:
                raise AnnotationError(f"the RTSTRUCT annotation holds more than {MAX_POINTS} "
                                      "contour points")
            if data.size < 9 or data.size % 3:
                raise AnnotationError(f"a contour of ROI {number} has fewer than 3 points")
            k, filled = _slice_masks(data.reshape(-1, 3), image, number)
            mask[:, :, k] ^= filled
        masks.append((contract.label_map.tissues.index(wanted[name]) + 1, mask))
    if not masks:
        raise AnnotationError("the RTSTRUCT annotation holds no ROI contours")
    classes = np.zeros(size, dtype=np.uint8)
    for value, mask in sorted(masks, key=lambda m: -int(m[1].sum())):  # the smaller wins
        classes[mask] = value
    out = sitk.GetImageFromArray(np.ascontiguousarray(np.transpose(classes, (2, 1, 0))))
    out.CopyInformation(image)
    return out


def _contours(mask: npt.NDArray[np.bool_]) -> list[npt.NDArray[np.float64]]:
    """Closed polygons (``[N, 2]`` voxel indices) whose pixel-centre fill, by parity, is
    ``mask`` (a 2-D slice)."""
    padded = np.pad(mask.astype(np.float32), 1)
    return [c[:-1] - 1.0 for c in find_contours(padded, 0.5) if len(c) > 3]


def write_rtstruct(path: Path, sources: Sequence[pydicom.Dataset],
                   labels: npt.NDArray[np.uint8], values: Mapping[str, int]) -> None:
    """Write ``labels`` (``[columns, rows, slices]`` in ``values``' convention, one slice per
    source image, in order) as an RT Structure Set with one ROI per tissue, named by the
    tissue, its contours on the sources' slices."""
    first = sources[0]
    row = np.array([float(v) for v in first.ImageOrientationPatient[:3]])
    col = np.array([float(v) for v in first.ImageOrientationPatient[3:]])
    spacing_rc = [float(v) for v in first.PixelSpacing]  # between rows, between columns
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = pydicom.uid.UID(RTSTRUCT_STORAGE)
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = RTSTRUCT_STORAGE
    ds.SOPInstanceUID = str(meta.MediaStorageSOPInstanceUID)
    for name in ("PatientName", "PatientID", "PatientBirthDate", "StudyInstanceUID", "StudyID",
                 "StudyDate", "AccessionNumber", "FrameOfReferenceUID"):
        if name in first:
            setattr(ds, name, first.get(name))
    ds.Modality = "RTSTRUCT"
    ds.SeriesInstanceUID = generate_uid()
    ds.SeriesNumber = 98
    ds.InstanceNumber = 1
    ds.StructureSetLabel = "tumour"
    ds.Manufacturer = "sealbench phantom"
    images = DicomSequence()
    for source in sources:
        item = pydicom.Dataset()
        item.ReferencedSOPClassUID = source.SOPClassUID
        item.ReferencedSOPInstanceUID = source.SOPInstanceUID
        images.append(item)
    series = pydicom.Dataset()
    series.SeriesInstanceUID = first.SeriesInstanceUID
    series.ContourImageSequence = images
    study = pydicom.Dataset()
    study.ReferencedSOPClassUID = "1.2.840.10008.3.1.2.3.1"  # Detached Study Management
    study.ReferencedSOPInstanceUID = first.StudyInstanceUID
    study.RTReferencedSeriesSequence = DicomSequence([series])
    frame = pydicom.Dataset()
    frame.FrameOfReferenceUID = first.FrameOfReferenceUID
    frame.RTReferencedStudySequence = DicomSequence([study])
    ds.ReferencedFrameOfReferenceSequence = DicomSequence([frame])
    rois, contours_seq, observations = DicomSequence(), DicomSequence(), DicomSequence()
    for number, (tissue, value) in enumerate(values.items(), start=1):
        roi = pydicom.Dataset()
        roi.ROINumber = number
        roi.ReferencedFrameOfReferenceUID = first.FrameOfReferenceUID
        roi.ROIName = tissue
        roi.ROIGenerationAlgorithm = "MANUAL"
        rois.append(roi)
        drawn = DicomSequence()
        for k, source in enumerate(sources):
            position = np.array([float(v) for v in source.ImagePositionPatient])
            for polygon in _contours(labels[:, :, k] == value):
                # index i runs along the row direction (columns), j along the column one
                points = (position[None, :] + polygon[:, :1] * spacing_rc[1] * row[None, :]
                          + polygon[:, 1:] * spacing_rc[0] * col[None, :])
                item = pydicom.Dataset()
                item.ContourGeometricType = "CLOSED_PLANAR"
                item.NumberOfContourPoints = len(points)
                item.ContourData = [f"{v:.4f}" for v in points.ravel()]
                image = pydicom.Dataset()
                image.ReferencedSOPClassUID = source.SOPClassUID
                image.ReferencedSOPInstanceUID = source.SOPInstanceUID
                item.ContourImageSequence = DicomSequence([image])
                drawn.append(item)
        contour = pydicom.Dataset()
        contour.ReferencedROINumber = number
        contour.ROIDisplayColor = [255, 0, 0]
        contour.ContourSequence = drawn
        contours_seq.append(contour)
        observation = pydicom.Dataset()
        observation.ObservationNumber = number
        observation.ReferencedROINumber = number
        observation.RTROIInterpretedType = "GTV"
        observation.ROIInterpreter = ""
        observations.append(observation)
    ds.StructureSetROISequence = rois
    ds.ROIContourSequence = contours_seq
    ds.RTROIObservationsSequence = observations
    ds.save_as(path, enforce_file_format=True)
