# mypy: disable-error-code="no-untyped-call"
"""DICOM-SEG annotations, read (and, for the phantoms, written) with highdicom.

**Why highdicom.** A SEG object's geometry is per frame (plane positions, a shared orientation
and pixel measures) and its segments are described by codes and labels; highdicom, the library
the DICOM-SEG authors maintain, assembles the frames into a volume with its affine and refuses
frames that do not form one, so the annotation lands on exactly the grid it was drawn on.

A segment is mapped to the contract's tissues by its label (``SegmentLabel``) through the mapping
file's ``segment_labels`` (the tissue names themselves by default, case-insensitive); a segment
with another label, or overlapping segments, stop the case (:class:`.errors.AnnotationError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import highdicom as hd
import numpy as np
import numpy.typing as npt
import pydicom
import SimpleITK as sitk  # noqa: N813
from pydicom.sr.codedict import codes

from ..contract import BratsContract
from .errors import AnnotationError
from .sequences import SequenceMapping

__all__ = ["read_dicom_seg", "write_dicom_seg"]


def read_dicom_seg(path: Path, mapping: SequenceMapping, contract: BratsContract) -> sitk.Image:
    """The SEG object at ``path`` as a class-index image on the grid of the frames."""
    try:
        seg = hd.seg.segread(path)
        volume = seg.get_volume(combine_segments=True, relabel=False, skip_overlap_checks=False)
    except (ValueError, RuntimeError, AttributeError, KeyError, TypeError) as exc:
        raise AnnotationError(f"the DICOM-SEG annotation cannot be read as one volume "
                              f"({type(exc).__name__})") from exc
    wanted = {k.lower(): v for k, v in mapping.segment_labels.items()}
    lut = np.zeros(len(seg.SegmentSequence) + 1, dtype=np.uint8)
    for item in seg.SegmentSequence:
        label = str(item.SegmentLabel).strip().lower()
        if label not in wanted:
            raise AnnotationError(f"segment {int(item.SegmentNumber)}'s label is not in the "
                                  f"mapping file's segment_labels {sorted(wanted)}")
        lut[int(item.SegmentNumber)] = contract.label_map.tissues.index(wanted[label]) + 1
    values = np.asarray(volume.array).astype(np.int64)  # [slices, rows, columns]
    image = sitk.GetImageFromArray(lut[values])
    affine = np.asarray(volume.affine, dtype=np.float64)  # LPS, indices (slice, row, column)
    steps = [affine[:3, 2], affine[:3, 1], affine[:3, 0]]
    spacing = [float(np.linalg.norm(s)) for s in steps]
    direction = np.stack([s / n for s, n in zip(steps, spacing, strict=True)], axis=1)
    image.SetSpacing(spacing)
    image.SetOrigin(tuple(float(v) for v in affine[:3, 3]))
    image.SetDirection(tuple(float(v) for v in direction.ravel()))
    return image


def write_dicom_seg(path: Path, sources: Sequence[pydicom.Dataset],
                    labels: npt.NDArray[np.uint8], values: Mapping[str, int]) -> None:
    """Write ``labels`` (``[columns, rows, slices]`` in ``values``' convention, one slice per
    source image, in order) as a binary DICOM-SEG with one segment per tissue, labelled with the
    tissue's name."""
    segments = []
    frames = np.zeros((len(sources), labels.shape[1], labels.shape[0]), dtype=np.uint8)
    for number, (tissue, value) in enumerate(values.items(), start=1):
        segments.append(hd.seg.SegmentDescription(
            segment_number=number, segment_label=tissue,
            segmented_property_category=codes.SCT.MorphologicallyAbnormalStructure,
            segmented_property_type=codes.SCT.Neoplasm,
            algorithm_type=hd.seg.SegmentAlgorithmTypeValues.MANUAL))
        frames[np.transpose(labels, (2, 1, 0)) == value] = number
    seg = hd.seg.Segmentation(
        source_images=list(sources), pixel_array=frames,
        segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=segments, series_instance_uid=hd.UID(), series_number=99,
        sop_instance_uid=hd.UID(), instance_number=1, manufacturer="sealbench phantom",
        manufacturer_model_name="phantom", software_versions="1",
        device_serial_number=str(sources[0].get("DeviceSerialNumber", "0")),
        omit_empty_frames=False)
    seg.save_as(path)
