# mypy: disable-error-code="no-untyped-call"
"""Synthetic DICOM studies from the project's phantoms: what a hospital's scanner would hand over,
with a known answer in the benchmark's space. For tests, the perf check and demos; never real data.

Each study is a function of its seed:

1. **The truth**, in the benchmark's space (the contract's grid): the anatomy phantom of
   :mod:`sealbench.benchmarks.brats.anatomy` (MNI ICBM152 anatomy, tumours, contrast) in the
   template's own pose (:func:`.geometry.template_on_grid`), so the benchmark-space volumes a
   preparation must reproduce are the phantom's, with no registration error built into them.
   The round trip therefore measures the pipeline undoing the scanner's geometry and the head's
   position; it does not measure how well a real brain matches the template.
2. **A head around it**: a 1 mm dark layer (dura), 5 mm of skull (dark in every sequence) and
   5 mm of scalp (bright on T1, medium on T2 and FLAIR), background noise outside.
3. **A pose**: the head is rotated up to 12 degrees about each axis and shifted up to 15 mm in
   the scanner; each sequence adds its own motion (up to 2 degrees, 2 mm).
4. **Each sequence in its own geometry** (:data:`SEQUENCES`): a 1 mm 3D T1 post-contrast, a
   sagittal 1.2 mm T1, an oblique 0.8 x 0.8 x 2 mm T2 and an oblique 3 mm FLAIR with different
   fields of view and offsets; a thick slice averages three samples across its thickness.
   Written as one classic MR Image Storage file per slice (uint16, explicit VR little endian),
   with the series' description and acquisition parameters (TR, TE, TI, contrast agent).
5. **Planted identifiers** (:class:`PlantedPhi`): a distinct string in every identifying header
   field, and the patient's name, birth date and accession number in the study folder's and
   every file's name.
6. **An annotation in native space**: the truth's labels drawn on the T1 post-contrast grid (each
   label's indicator interpolated, then the largest), in the hospital's own convention
   (``labels``, BraTS 2021's {1, 2, 4} by default), as NIfTI and, optionally, DICOM-SEG
   (:mod:`.dicomseg`) and RTSTRUCT (:mod:`.rtstruct`: contours per tissue).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pydicom
import SimpleITK as sitk  # noqa: N813
from pydicom.dataset import FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid
from scipy import ndimage  # type: ignore[import-untyped]

from ..anatomy import _MEANS, _tissues, _tumour, render_modalities
from ..contract import BRATS_2023_GLI, BratsContract
from ..synthetic import SyntheticCase, _draw_foci, brats_affine
from ..thick_slices import rotation
from .geometry import template_on_grid

__all__ = ["ISOTROPIC", "MR_IMAGE_STORAGE", "SEQUENCES", "PhantomStudy", "PlantedPhi",
           "SequenceSpec", "rotation", "template_pose_case", "write_study"]

FloatArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float64]

MR_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.4"

#: Head tissue intensities outside the brain, in white-matter units: (skull, scalp).
_HEAD = {"t1n": (0.04, 1.15), "t1c": (0.04, 1.15), "t2w": (0.03, 0.75), "t2f": (0.03, 0.85)}
_AXIAL = np.eye(3)
# Sagittal: rows run anterior->posterior (+y), columns head->feet (-z), slices left->right (+x).
_SAGITTAL = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


@dataclass(frozen=True)
class SequenceSpec:
    """One series' acquisition: the modality it is, what the scanner writes about it, and its
    geometry (spacing along rows, columns and slices in mm, base orientation, oblique tilt in
    degrees about x, y, z, field of view in mm, offset of its centre from the head's in mm)."""

    modality: str
    description: str
    series_number: int
    tr_ms: float
    te_ms: float
    ti_ms: float | None
    contrast: bool
    acquisition: str
    spacing: tuple[float, float, float]
    orientation: str
    tilt_deg: tuple[float, float, float]
    fov_mm: tuple[float, float, float]
    offset_mm: tuple[float, float, float]


#: The four series of a phantom study.
SEQUENCES: tuple[SequenceSpec, ...] = (
    SequenceSpec("t1c", "AX 3D T1 MPRAGE POST GD", 7, 2300.0, 2.3, 900.0, True, "3D",
                 (1.0, 1.0, 1.0), "axial", (3.0, 0.0, 2.0), (250.0, 250.0, 190.0),
                 (2.0, -3.0, 4.0)),
    SequenceSpec("t1n", "SAG T1 SE", 3, 600.0, 12.0, None, False, "2D",
                 (1.0, 1.0, 1.2), "sagittal", (0.0, 4.0, 0.0), (240.0, 200.0, 180.0),
                 (-4.0, 5.0, 0.0)),
    SequenceSpec("t2w", "AX T2 TSE", 4, 5000.0, 95.0, None, False, "2D",
                 (0.8, 0.8, 2.0), "axial", (-8.0, 0.0, 0.0), (230.0, 230.0, 180.0),
                 (0.0, 6.0, -3.0)),
    SequenceSpec("t2f", "AX T2 FLAIR OBL", 5, 9000.0, 120.0, 2500.0, False, "2D",
                 (0.9, 0.9, 3.0), "axial", (15.0, 0.0, -5.0), (240.0, 240.0, 186.0),
                 (3.0, 0.0, 5.0)),
)

#: The same series, each acquired at 1 mm isotropic: what separates the preparation's own loss
#: from the thick slices' (``tests/perf/dicom_prepare_bench.py --isotropic``).
ISOTROPIC: tuple[SequenceSpec, ...] = tuple(
    SequenceSpec(**{**spec.__dict__, "spacing": (1.0, 1.0, 1.0)}) for spec in SEQUENCES)

#: Header fields that identify a patient, a visit or a place; every one gets a planted string.
PHI_FIELDS: tuple[str, ...] = (
    "PatientName", "PatientID", "OtherPatientIDs", "PatientBirthDate", "PatientAddress",
    "PatientTelephoneNumbers", "PatientComments", "AccessionNumber", "StudyID",
    "StudyDescription", "InstitutionName", "InstitutionAddress", "InstitutionalDepartmentName",
    "ReferringPhysicianName", "PerformingPhysicianName", "OperatorsName", "StationName",
    "DeviceSerialNumber", "RequestedProcedureDescription", "ImageComments", "StudyDate",
    "SeriesDate", "AcquisitionDate", "ContentDate",
)
_DATES = ("PatientBirthDate", "StudyDate", "SeriesDate", "AcquisitionDate", "ContentDate")


@dataclass(frozen=True)
class PlantedPhi:
    """The identifying strings planted in one study: header field -> value, each distinct (dates
    are distinct ``YYYYMMDD`` days), and the text used in its file names."""

    fields: Mapping[str, str]

    @classmethod
    def draw(cls, rng: np.random.Generator) -> PlantedPhi:
        values: dict[str, str] = {}
        for index, name in enumerate(PHI_FIELDS):
            if name in _DATES:
                year = 1930 + int(rng.integers(0, 60)) if name == "PatientBirthDate" else \
                    2000 + int(rng.integers(0, 25))
                values[name] = f"{year:04d}{1 + index % 12:02d}{1 + index:02d}"
            elif name == "PatientName":
                values[name] = f"Phiname{int(rng.integers(10**6, 10**7))}^Given{index}"
            else:
                values[name] = f"PHI{name[:4]}{int(rng.integers(10**6, 10**7))}"
        return cls(fields=values)

    @property
    def file_stem(self) -> str:
        """Name, birth date and accession number, as a PACS export names its folders."""
        name = self.fields["PatientName"].replace("^", "_")
        return f"{name}_{self.fields['PatientBirthDate']}_{self.fields['AccessionNumber']}"

    def strings(self) -> tuple[str, ...]:
        """Every planted string (each name part too), for scanning what a preparation wrote."""
        parts = [v for v in self.fields.values()]
        parts += self.fields["PatientName"].split("^")
        return tuple(dict.fromkeys(parts))


@dataclass(frozen=True)
class PhantomStudy:
    """A written study: its folder, the truth in the benchmark's space (case and brain mask),
    the identifiers planted in it, and the annotation's files."""

    folder: Path
    truth: SyntheticCase
    brain: npt.NDArray[np.bool_]
    phi: PlantedPhi
    annotation_nifti: Path
    annotation_seg: Path | None = None
    labels: Mapping[str, int] = field(default_factory=dict)
    annotation_rtstruct: Path | None = None


def template_pose_case(seed: int, contract: BratsContract = BRATS_2023_GLI, *,
                       foci: int | None = None) -> SyntheticCase:
    """The anatomy phantom of ``seed`` in the template's pose on the contract's grid: the
    benchmark-space truth of the study :func:`write_study` writes for that seed."""
    rng = np.random.default_rng([seed, 43])
    template = template_on_grid(contract.shape)
    maps = {"t1": template.t1.copy(), "gm": template.gm.copy(), "wm": template.wm.copy(),
            "mask": template.mask.copy()}
    brain = maps["mask"] > 0.5
    gm, wm, csf = _tissues(maps)
    classes = np.zeros(contract.shape, dtype=np.uint8)
    wanted = _draw_foci(rng, foci)
    with_et = rng.uniform() >= 0.15
    n_lesions = sum(_tumour(rng, brain, wm, classes, with_et=with_et,
                            voxel_mm=template.voxel_mm) for _ in range(wanted))
    lesion_means = {name: _MEANS.get(name, _MEANS["t1n"])[3:] for name in contract.modalities}
    modalities = render_modalities(rng, maps, (gm, wm, csf), brain, classes, contract,
                                   lesion_means)
    classes[~brain] = 0
    return SyntheticCase(seed=seed, modalities=modalities, classes=classes,
                         affine=brats_affine(contract.shape, contract.spacing_mm),
                         n_lesions=n_lesions)


class _Head:
    """The truth with a head around it on a padded grid, sampled at LPS points of the benchmark's
    space."""

    def __init__(self, case: SyntheticCase, contract: BratsContract, voxel_mm: float,
                 rng: np.random.Generator) -> None:
        self.spacing = np.array(contract.spacing_mm, dtype=np.float64)
        self.y_extent = (contract.shape[1] - 1) * self.spacing[1]
        self.pad = int(np.ceil(14.0 / voxel_mm / float(self.spacing.min()))) + 2
        brain = next(iter(case.modalities.values())) > 0
        padded = np.pad(brain, self.pad)
        outside_mm = ndimage.distance_transform_edt(~padded, sampling=self.spacing) * voxel_mm
        skull = (outside_mm > 1.0) & (outside_mm <= 6.0)
        scalp = (outside_mm > 6.0) & (outside_mm <= 11.0)
        self.volumes: dict[str, FloatArray] = {}
        wm_region = template_on_grid(contract.shape).wm > 0.9
        for name, image in case.modalities.items():
            level = float(np.median(image[wm_region & brain])) if (wm_region & brain).any() \
                else float(image[brain].mean())
            skull_i, scalp_i = _HEAD.get(name, _HEAD["t1n"])
            head = np.pad(image, self.pad).astype(np.float32)
            tissue = np.zeros_like(head)
            tissue[skull] = skull_i * level
            tissue[scalp] = scalp_i * level
            tissue = np.asarray(ndimage.gaussian_filter(tissue, 0.7), dtype=np.float32)
            head[~padded] = tissue[~padded]
            # Cubic sampling (the prefilter once here, not per slice): a scanner's point spread
            # is sharper than linear interpolation's.
            self.volumes[name] = np.asarray(ndimage.spline_filter(head, order=3),
                                            dtype=np.float32)
            self.noise = 0.01 * level
        self.classes = np.pad(case.classes, self.pad)
        lesion = np.argwhere(self.classes > 0)
        self._box: tuple[Matrix, Matrix] | None = None
        self._indicators: list[FloatArray] = []
        if lesion.size:
            lo = np.maximum(lesion.min(axis=0) - 2, 0)
            hi = np.minimum(lesion.max(axis=0) + 3, self.classes.shape)
            crop = self.classes[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]
            self._box = (lo.astype(np.float64), (hi - 1).astype(np.float64))
            self._indicators = [(crop == k).astype(np.float32)
                                for k in range(int(case.classes.max()) + 1)]

    def index(self, points: Matrix) -> Matrix:
        """Padded-grid voxel indices of benchmark LPS ``points`` ([3, N])."""
        out = np.empty_like(points)
        out[0] = points[0] / self.spacing[0]
        out[1] = (points[1] + self.y_extent) / self.spacing[1]
        out[2] = points[2] / self.spacing[2]
        return out + self.pad

    def sample(self, name: str, points: Matrix) -> FloatArray:
        return np.asarray(ndimage.map_coordinates(self.volumes[name], self.index(points),
                                                  order=3, mode="constant", cval=0.0,
                                                  prefilter=False),
                          dtype=np.float32)

    def labels(self, points: Matrix, n_classes: int) -> npt.NDArray[np.uint8]:
        """Class indices at ``points``: each class's indicator interpolated, then the largest
        (only points near a lesion are interpolated; the rest are background)."""
        index = self.index(points)
        out: npt.NDArray[np.uint8] = np.zeros(index.shape[1], dtype=np.uint8)
        if self._box is None:
            return out
        lo, hi = self._box
        near = np.all((index >= lo[:, None]) & (index <= hi[:, None]), axis=0)
        if not near.any():
            return out
        sub = index[:, near] - lo[:, None]
        scores = np.stack([ndimage.map_coordinates(
            indicator, sub, order=1, mode="nearest") for indicator in self._indicators])
        out[near] = np.argmax(scores, axis=0)
        return out


@dataclass(frozen=True)
class _Geometry:
    """A series' voxel grid in the scanner: LPS origin, direction columns (i, j, k), spacing."""

    origin: Matrix
    direction: Matrix
    spacing: tuple[float, float, float]
    size: tuple[int, int, int]

    def slice_points(self, k: float) -> Matrix:
        ni, nj = self.size[0], self.size[1]
        i, j = np.meshgrid(np.arange(ni, dtype=np.float64), np.arange(nj, dtype=np.float64),
                           indexing="ij")
        ijk = np.stack([i.ravel() * self.spacing[0], j.ravel() * self.spacing[1],
                        np.full(i.size, k * self.spacing[2])])
        out: Matrix = self.origin[:, None] + self.direction @ ijk
        return out


def _geometry(spec: SequenceSpec, centre: Matrix, scale: float) -> _Geometry:
    base = _SAGITTAL if spec.orientation == "sagittal" else _AXIAL
    direction = rotation(spec.tilt_deg) @ base
    fov = np.array(spec.fov_mm) * scale
    size = tuple(int(np.ceil(f / s)) for f, s in zip(fov, spec.spacing, strict=True))
    half = np.array([(n - 1) * s for n, s in zip(size, spec.spacing, strict=True)]) / 2
    origin = centre + np.array(spec.offset_mm) * scale - direction @ half
    return _Geometry(origin=origin, direction=direction, spacing=spec.spacing,
                     size=(size[0], size[1], size[2]))


def _dataset(spec: SequenceSpec, phi: PlantedPhi, study_uid: str, series_uid: str,
             frame_uid: str, geometry: _Geometry, k: int, pixels: npt.NDArray[np.uint16],
             ) -> pydicom.Dataset:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = pydicom.uid.UID(MR_IMAGE_STORAGE)
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = MR_IMAGE_STORAGE
    ds.SOPInstanceUID = str(meta.MediaStorageSOPInstanceUID)
    for name, value in phi.fields.items():
        setattr(ds, name, value)
    ds.PatientSex = "O"
    ds.StudyTime = ds.SeriesTime = ds.AcquisitionTime = ds.ContentTime = "101500"
    ds.Modality = "MR"
    ds.Manufacturer = "sealbench phantom"
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = series_uid
    ds.FrameOfReferenceUID = frame_uid
    ds.SeriesNumber = spec.series_number
    ds.InstanceNumber = k + 1
    ds.SeriesDescription = spec.description
    ds.ProtocolName = spec.description
    ds.RepetitionTime = f"{spec.tr_ms:g}"
    ds.EchoTime = f"{spec.te_ms:g}"
    if spec.ti_ms is not None:
        ds.InversionTime = f"{spec.ti_ms:g}"
    if spec.contrast:
        ds.ContrastBolusAgent = "GADOBUTROL"
    ds.MRAcquisitionType = spec.acquisition
    ds.MagneticFieldStrength = "3"
    ds.SliceThickness = f"{geometry.spacing[2]:g}"
    ds.SpacingBetweenSlices = f"{geometry.spacing[2]:g}"
    position = geometry.origin + geometry.direction[:, 2] * k * geometry.spacing[2]
    ds.ImagePositionPatient = [f"{v:.6f}" for v in position]
    ds.ImageOrientationPatient = [f"{v:.8f}" for v in
                                  (*geometry.direction[:, 0], *geometry.direction[:, 1])]
    ds.PixelSpacing = [f"{geometry.spacing[1]:g}", f"{geometry.spacing[0]:g}"]
    ds.SliceLocation = f"{float(position @ geometry.direction[:, 2]):.6f}"
    ds.Rows, ds.Columns = int(pixels.shape[0]), int(pixels.shape[1])
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated = 16
    ds.BitsStored = 16
    ds.HighBit = 15
    ds.PixelRepresentation = 0
    ds.RescaleIntercept = "0"
    ds.RescaleSlope = "1"
    ds.PixelData = pixels.tobytes()
    return ds


def write_study(out_root: Path, seed: int, contract: BratsContract = BRATS_2023_GLI, *,
                labels: Mapping[str, int] | None = None, dicom_seg: bool = False,
                rtstruct: bool = False, foci: int | None = None,
                sequences: Sequence[SequenceSpec] = SEQUENCES) -> PhantomStudy:
    """Write the study of ``seed`` into a new folder under ``out_root`` named after its planted
    identifiers; returns where it is and what it holds. ``labels`` maps the contract's tissue
    names to the hospital's label values for the annotation (default BraTS 2021's);
    ``sequences`` the series to acquire (default :data:`SEQUENCES`); ``dicom_seg`` and
    ``rtstruct`` also write the annotation as a DICOM-SEG and an RT Structure Set (a study to
    ingest holds one annotation: remove the others first)."""
    rng = np.random.default_rng([seed, 44])
    truth = template_pose_case(seed, contract, foci=foci)
    voxel_mm = template_on_grid(contract.shape).voxel_mm
    head = _Head(truth, contract, voxel_mm, rng)
    phi = PlantedPhi.draw(rng)
    tissues = contract.label_map.tissues
    labels = dict(labels or dict(zip(tissues, (1, 2, 4), strict=False)))
    folder = out_root / phi.file_stem
    folder.mkdir(parents=True)
    spacing = np.array(contract.spacing_mm)
    centre_bench = np.array([(contract.shape[0] - 1) * spacing[0] / 2,
                             (contract.shape[1] - 1) * spacing[1] / 2
                             - (contract.shape[1] - 1) * spacing[1],
                             (contract.shape[2] - 1) * spacing[2] / 2])
    pose = rotation(tuple(rng.uniform(-12.0, 12.0, 3)))
    shift = rng.uniform(-15.0, 15.0, 3) * (1.0 / voxel_mm)
    # Scanner point p of benchmark point b: p = pose (b - c) + c + shift (then each sequence's
    # motion about the head's centre in the scanner).
    centre_scanner = centre_bench + shift
    study_uid, frame_uid = generate_uid(), generate_uid()
    annotated: Path | None = None
    seg_path: Path | None = None
    rt_path: Path | None = None
    scale = min(1.0, 1.0 / voxel_mm * 1.05)
    for spec in sequences:
        motion = rotation(tuple(rng.uniform(-2.0, 2.0, 3)))
        moved = rng.uniform(-2.0, 2.0, 3)
        geometry = _geometry(spec, centre_scanner, scale)
        to_bench = (motion @ pose).T  # b = to_bench (p - centre_scanner - moved) + c

        def bench(points: Matrix, to_bench: Matrix = to_bench, moved: Matrix = moved) -> Matrix:
            out: Matrix = to_bench @ (points - (centre_scanner + moved)[:, None]) \
                + centre_bench[:, None]
            return out

        series_dir = folder / f"{phi.file_stem}_series{spec.series_number}"
        series_dir.mkdir()
        series_uid = generate_uid()
        thickness = [-1 / 3, 0.0, 1 / 3] if spec.spacing[2] > 1.5 else [0.0]
        sources: list[pydicom.Dataset] = []
        label_slices: list[npt.NDArray[np.uint8]] = []
        ni, nj, nk = geometry.size
        for k in range(nk):
            values = np.mean([head.sample(spec.modality, bench(geometry.slice_points(k + t)))
                              for t in thickness], axis=0)
            values = np.abs(values + rng.normal(0.0, head.noise, values.shape)
                            + 1j * rng.normal(0.0, head.noise, values.shape))
            plane = np.clip(np.rint(values), 0, 65535).astype(np.uint16).reshape(ni, nj)
            ds = _dataset(spec, phi, study_uid, series_uid, frame_uid, geometry, k,
                          np.ascontiguousarray(plane.T))
            ds.save_as(series_dir / f"{phi.file_stem}_{spec.series_number}_{k + 1:04d}.dcm",
                       enforce_file_format=True)
            if spec.modality == "t1c":
                sources.append(ds)
                label_slices.append(head.labels(bench(geometry.slice_points(k)),
                                                contract.label_map.n_classes).reshape(ni, nj))
        if spec.modality == "t1c":
            lut = np.array((0, *(labels[t] for t in tissues)), dtype=np.uint8)
            volume = lut[np.stack(label_slices, axis=2)]  # [i, j, k]
            image = sitk.GetImageFromArray(np.ascontiguousarray(np.transpose(volume, (2, 1, 0))))
            image.SetSpacing(geometry.spacing)
            image.SetOrigin(tuple(float(v) for v in geometry.origin))
            image.SetDirection(tuple(float(v) for v in geometry.direction.ravel()))
            annotated = folder / f"{phi.file_stem}_tumour_seg.nii.gz"
            sitk.WriteImage(image, str(annotated), True)
            if dicom_seg:
                from .dicomseg import write_dicom_seg

                seg_path = folder / f"{phi.file_stem}_SEG.dcm"
                write_dicom_seg(seg_path, sources, volume, labels)
            if rtstruct:
                from .rtstruct import write_rtstruct

                rt_path = folder / f"{phi.file_stem}_RTSTRUCT.dcm"
                write_rtstruct(rt_path, sources, volume, labels)
    assert annotated is not None
    brain = next(iter(truth.modalities.values())) > 0
    return PhantomStudy(folder=folder, truth=truth, brain=brain, phi=phi,
                        annotation_nifti=annotated, annotation_seg=seg_path, labels=labels,
                        annotation_rtstruct=rt_path)
