"""DICOM ingestion's parts (issue 43) on a small phantom study: conversion refusals named by
series, gantry tilt kept, sequence recognition from the mapping file, DICOM-SEG and RTSTRUCT vs
NIfTI annotations, pseudonyms, and labels carried by indicator interpolation (not nearest
neighbour)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pydicom")
pytest.importorskip("SimpleITK")

import pydicom
import SimpleITK as sitk  # noqa: N813
from pydicom.uid import generate_uid

from sealbench.benchmarks.brats.contract import BRATS_2023_GLI_SMALL
from sealbench.benchmarks.brats.ingest.dicom import (
    Series,
    read_study,
    series_volume,
)
from sealbench.benchmarks.brats.ingest.dicomseg import read_dicom_seg
from sealbench.benchmarks.brats.ingest.errors import (
    IngestError,
    SequenceError,
    SeriesError,
    StudyError,
)
from sealbench.benchmarks.brats.ingest.phantom import (
    PhantomStudy,
    rotation,
    write_study,
)
from sealbench.benchmarks.brats.ingest.pipeline import IngestOptions, _classes, _dicom_inputs
from sealbench.benchmarks.brats.ingest.pseudonyms import PSEUDONYM_FILE, Pseudonyms
from sealbench.benchmarks.brats.ingest.register import carry_labels
from sealbench.benchmarks.brats.ingest.rtstruct import read_rtstruct, referenced_series
from sealbench.benchmarks.brats.ingest.sequences import (
    DEFAULT_MAPPING,
    SequenceRule,
    load_mapping,
    recognise,
)

SMALL = BRATS_2023_GLI_SMALL
MAPPING = DEFAULT_MAPPING.model_copy(update={"annotation_labels": {1: "NETC", 2: "SNFH",
                                                                    4: "ET"}})


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> PhantomStudy:
    return write_study(tmp_path_factory.mktemp("studies"), 3, SMALL, dicom_seg=True,
                       rtstruct=True)


def _series(study: PhantomStudy, number: int) -> Series:
    return next(s for s in read_study(study.folder).series if s.number == number)


def _copy_series(study: PhantomStudy, number: int, tmp_path: Path) -> list[Path]:
    source = next(p for p in study.folder.iterdir() if p.name.endswith(f"_series{number}"))
    target = tmp_path / "study" / "series"
    shutil.copytree(source, target)
    return sorted(target.iterdir())


def _no_phi(message: str, study: PhantomStudy) -> None:
    assert not any(s.lower() in message.lower() for s in study.phi.strings()), message


def test_series_converted_with_its_oblique_geometry(study: PhantomStudy) -> None:
    flair = series_volume(_series(study, 5))
    direction = np.array(flair.GetDirection()).reshape(3, 3)
    assert np.allclose(direction, rotation((15.0, 0.0, -5.0)), atol=1e-5)
    assert flair.GetSpacing() == pytest.approx((0.9, 0.9, 3.0), abs=1e-5)


def test_series_with_a_missing_slice_rejected(study: PhantomStudy, tmp_path: Path) -> None:
    files = _copy_series(study, 5, tmp_path)
    files[len(files) // 2].unlink()
    with pytest.raises(SeriesError, match=r"^series 5: missing slices \(about 1 missing"):
        series_volume(_series_at(tmp_path / "study"))


def _series_at(folder: Path) -> Series:
    (series,) = read_study(folder).series
    return series


def test_interleaved_acquisitions_rejected_as_mixed(study: PhantomStudy, tmp_path: Path) -> None:
    files = _copy_series(study, 4, tmp_path)
    ds = pydicom.dcmread(files[3])
    ds.SOPInstanceUID = generate_uid()
    ds.EchoNumbers = 2
    ds.save_as(files[3].with_name("echo2.dcm"))
    with pytest.raises(SeriesError, match=r"^series 4: mixed series \(1 slice"):
        series_volume(_series_at(tmp_path / "study"))


def test_uneven_slice_spacing_rejected(study: PhantomStudy, tmp_path: Path) -> None:
    files = _copy_series(study, 4, tmp_path)
    ds = pydicom.dcmread(files[5])
    normal = np.cross(*np.array(ds.ImageOrientationPatient, dtype=float).reshape(2, 3))
    ds.ImagePositionPatient = list(np.array(ds.ImagePositionPatient, dtype=float) + 0.4 * normal)
    ds.save_as(files[5])
    with pytest.raises(SeriesError, match=r"^series 4: inconsistent slice spacing"):
        series_volume(_series_at(tmp_path / "study"))


def test_slices_in_another_orientation_rejected(study: PhantomStudy, tmp_path: Path) -> None:
    files = _copy_series(study, 3, tmp_path)
    ds = pydicom.dcmread(files[2])
    ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    ds.save_as(files[2])
    with pytest.raises(SeriesError, match=r"^series 3: mixed series \(slices in different "
                                          "orientations"):
        series_volume(_series_at(tmp_path / "study"))


def test_a_stray_file_stops_the_study_without_naming_it(study: PhantomStudy,
                                                        tmp_path: Path) -> None:
    _copy_series(study, 3, tmp_path)
    (tmp_path / "study" / f"{study.phi.file_stem}_notes.txt").write_text("ward round")
    with pytest.raises(StudyError) as caught:
        read_study(tmp_path / "study")
    _no_phi(str(caught.value), study)
    assert "neither DICOM nor NIfTI" in str(caught.value)


def test_sequences_recognised_from_the_mapping(study: PhantomStudy) -> None:
    found = recognise(read_study(study.folder).series, DEFAULT_MAPPING, SMALL.modalities)
    assert {m: s.number for m, s in found.items()} == {"t1c": 7, "t1n": 3, "t2w": 4, "t2f": 5}


def test_ambiguous_sequence_stops_the_case_naming_series_numbers(study: PhantomStudy) -> None:
    loose = DEFAULT_MAPPING.sequences | {"t2w": SequenceRule(description=("t2",))}
    mapping = DEFAULT_MAPPING.model_copy(update={"sequences": loose})
    with pytest.raises(SequenceError) as caught:
        recognise(read_study(study.folder).series, mapping, SMALL.modalities)
    assert "series 5 matches t2w, t2f" in str(caught.value)
    assert "t2w: 2 series match (4, 5)" in str(caught.value)
    assert "FLAIR" not in str(caught.value)  # descriptions are never quoted


def test_missing_sequence_stops_the_case(study: PhantomStudy) -> None:
    series = [s for s in read_study(study.folder).series if s.number != 4]
    with pytest.raises(SequenceError, match="t2w: no series matches"):
        recognise(series, DEFAULT_MAPPING, SMALL.modalities)


def test_mapping_file_round_trips_and_bad_ones_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "mapping.json"
    path.write_bytes(MAPPING.to_json())
    assert load_mapping(path, SMALL) == MAPPING
    path.write_text(MAPPING.to_json().decode().replace('"ET"', '"XX"'))
    with pytest.raises(IngestError, match="tissues"):
        load_mapping(path, SMALL)
    path.write_text('{"sequences": {"t1c": {"description": ["("]}}}')
    with pytest.raises(IngestError, match="not a valid sequence mapping"):
        load_mapping(path, SMALL)


def test_dicom_seg_and_nifti_annotations_agree(study: PhantomStudy) -> None:
    assert study.annotation_seg is not None
    seg = read_dicom_seg(study.annotation_seg, MAPPING, SMALL)
    nifti = _classes(sitk.ReadImage(str(study.annotation_nifti)), MAPPING, SMALL)
    on_nifti = sitk.Resample(seg, nifti, sitk.Transform(), sitk.sitkNearestNeighbor, 0)
    a, b = sitk.GetArrayFromImage(on_nifti), sitk.GetArrayFromImage(nifti)
    assert (b > 0).sum() > 100
    assert np.array_equal(a, b)
    assert set(np.unique(b)) <= {0, 1, 2, 3}


def _arrays(a: sitk.Image, b: sitk.Image) -> tuple[np.ndarray, np.ndarray]:
    assert a.GetSize() == b.GetSize()
    assert np.allclose(a.GetOrigin(), b.GetOrigin(), atol=1e-3)
    assert np.allclose(a.GetDirection(), b.GetDirection(), atol=1e-5)
    return sitk.GetArrayFromImage(a), sitk.GetArrayFromImage(b)


def test_rtstruct_contours_rasterise_onto_the_nifti_annotation(study: PhantomStudy) -> None:
    assert study.annotation_rtstruct is not None
    series = {s.uid: s for s in read_study(study.folder).series}
    drawn_on = series[referenced_series(study.annotation_rtstruct)]
    assert drawn_on.number == 7  # the oblique 3D T1 post-contrast
    rt = read_rtstruct(study.annotation_rtstruct, series_volume(drawn_on), MAPPING, SMALL)
    nifti = _classes(sitk.ReadImage(str(study.annotation_nifti)), MAPPING, SMALL)
    a, b = _arrays(rt, nifti)
    assert (b == 3).sum() > 50 and (b == 2).sum() > 100
    for value in (1, 2, 3):
        dice = 2 * ((a == value) & (b == value)).sum() / ((a == value).sum() + (b == value).sum())
        assert dice >= 0.99, (value, dice)


def test_a_study_annotated_by_rtstruct_takes_the_same_path(study: PhantomStudy,
                                                           tmp_path: Path) -> None:
    assert study.annotation_rtstruct is not None and study.annotation_seg is not None
    folder = tmp_path / "study"
    shutil.copytree(study.folder, folder)
    for other in (study.annotation_nifti, study.annotation_seg):
        (folder / other.name).unlink()
    _, _, annotation, annotated = _dicom_inputs(read_study(folder), IngestOptions(
        mapping=MAPPING), SMALL)
    assert annotated == "t1c"
    nifti = _classes(sitk.ReadImage(str(study.annotation_nifti)), MAPPING, SMALL)
    a, b = _arrays(annotation, nifti)
    assert (a != b).mean() < 0.001


def test_rtstruct_roi_with_an_unknown_name_or_off_slice_stops_the_case_unnamed(
        study: PhantomStudy, tmp_path: Path) -> None:
    assert study.annotation_rtstruct is not None
    image = series_volume(_series(study, 7))
    ds = pydicom.dcmread(study.annotation_rtstruct)
    ds.StructureSetROISequence[1].ROIName = "Doe^Jane oedema"
    ds.save_as(tmp_path / "renamed.dcm")
    with pytest.raises(StudyError, match=r"^ROI 2's name is not in the mapping") as caught:
        read_rtstruct(tmp_path / "renamed.dcm", image, MAPPING, SMALL)
    assert "doe" not in str(caught.value).lower()
    ds = pydicom.dcmread(study.annotation_rtstruct)
    contour = ds.ROIContourSequence[0].ContourSequence[0]
    points = np.asarray(contour.ContourData, dtype=np.float64).reshape(-1, 3)
    normal = np.array(image.GetDirection()).reshape(3, 3)[:, 2]
    contour.ContourData = [f"{v:.4f}" for v in (points + 0.4 * normal).ravel()]
    ds.save_as(tmp_path / "moved.dcm")
    with pytest.raises(StudyError, match="a contour of ROI 1 does not lie on a slice"):
        read_rtstruct(tmp_path / "moved.dcm", image, MAPPING, SMALL)


def test_a_gantry_tilted_stack_keeps_its_shear_and_over_30_degrees_is_refused(
        study: PhantomStudy, tmp_path: Path) -> None:
    for degrees, folder in ((12.0, tmp_path / "tilted"), (35.0, tmp_path / "steep")):
        files = _copy_series(study, 4, folder)
        positions = {}
        for path in files:
            ds = pydicom.dcmread(path)
            orientation = np.array(ds.ImageOrientationPatient, dtype=float)
            column = orientation[3:]
            step = float(ds.SpacingBetweenSlices)
            k = int(ds.InstanceNumber) - 1
            # A tilted gantry: each slice's plane is the same, shifted along the column
            # direction by tan(tilt) for every slice step along the normal.
            shifted = np.array(ds.ImagePositionPatient, dtype=float) \
                + k * step * np.tan(np.radians(degrees)) * column
            ds.ImagePositionPatient = [f"{v:.6f}" for v in shifted]
            ds.save_as(path)
            positions[k] = (shifted, orientation, [float(v) for v in ds.PixelSpacing])
        series = _series_at(folder / "study")
        if degrees > 30:
            with pytest.raises(SeriesError, match=r"^series 4: slices are offset by 35\.0 "
                                                  r"degrees .*gantry tilt over 30"):
                series_volume(series)
            continue
        image = series_volume(series)
        for k, (position, orientation, spacing) in positions.items():
            expected = position + 3 * spacing[1] * orientation[:3] + 5 * spacing[0] \
                * orientation[3:]
            assert np.allclose(image.TransformIndexToPhysicalPoint((3, 5, k)), expected,
                               atol=1e-3), k
        # the slice step is along the tilted axis: the planes' distance over cos(tilt)
        assert image.GetSpacing()[2] == pytest.approx(step / np.cos(np.radians(degrees)),
                                                      rel=1e-4)
        # resampling goes through the sheared geometry: the untilted series sampled on the
        # tilted grid agrees on the first slice (not shifted) and not on a later one
        original = series_volume(_series(study, 4))
        on_tilted = sitk.GetArrayFromImage(sitk.Resample(
            original, image, sitk.Transform(), sitk.sitkNearestNeighbor, 0.0))
        pixels = sitk.GetArrayFromImage(image)
        assert np.array_equal(on_tilted[0], pixels[0])
        middle = len(positions) // 2
        assert not np.array_equal(on_tilted[middle], pixels[middle])


def test_unknown_annotation_label_stops_the_case(study: PhantomStudy) -> None:
    with pytest.raises(StudyError, match=r"label values \[4\] are not in the mapping"):
        _classes(sitk.ReadImage(str(study.annotation_nifti)), DEFAULT_MAPPING, SMALL)


def test_pseudonyms_are_private_stable_and_refused_when_readable(tmp_path: Path) -> None:
    names = Pseudonyms(tmp_path, SMALL)
    first = names.case_id("Doe_Jane_19610412", "1.2.3")
    second = names.case_id("Roe_Richard_19700101", "1.2.4")
    assert (first, second) == ("BraTS-GLI-00001-000", "BraTS-GLI-00002-000")
    path = tmp_path / PSEUDONYM_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Pseudonyms(tmp_path, SMALL).case_id("Doe_Jane_19610412", "1.2.3") == first
    path.chmod(0o644)
    with pytest.raises(IngestError, match="readable by others"):
        Pseudonyms(tmp_path, SMALL)


def _shell(shape: tuple[int, int, int]) -> np.ndarray:
    """A sphere of core (1) with a 1.5-voxel enhancing rim (3) and oedema (2) around it."""
    grid = np.indices(shape).astype(np.float64)
    centre = (np.array(shape) - 1) / 2
    r = np.sqrt(((grid - centre[:, None, None, None]) ** 2).sum(axis=0))
    out = np.zeros(shape, dtype=np.uint8)
    out[r < 16] = 2
    out[r < 10] = 3
    out[r < 8.5] = 1
    return out


def test_labels_carried_by_indicators_keep_a_thin_rim_nearest_neighbour_loses() -> None:
    """Two rotated resamplings (annotation grid -> a tilted native grid -> back), as a
    hospital's annotation goes through: nearest neighbour erodes the 1.5-voxel rim, the
    interpolated indicators keep it."""
    labels = _shell((48, 48, 48))
    grid = sitk.GetImageFromArray(labels)
    tilt = sitk.Euler3DTransform((23.5, 23.5, 23.5), 0.21, -0.13, 0.17, (0.4, -0.3, 0.2))
    native = sitk.Resample(grid, grid, tilt, sitk.sitkNearestNeighbor, 0)
    native_soft = sitk.GetImageFromArray(carry_labels(grid, tilt, grid, 4).transpose(2, 1, 0))
    native_soft.CopyInformation(grid)
    back = tilt.GetInverse()
    nearest = sitk.GetArrayFromImage(sitk.Resample(native, grid, back,
                                                   sitk.sitkNearestNeighbor, 0))
    carried = carry_labels(native_soft, back, grid, 4).transpose(2, 1, 0)

    def dice(a: np.ndarray) -> float:
        x, y = a == 3, labels == 3
        return float(2 * (x & y).sum() / (x.sum() + y.sum()))

    # measured: 0.982 carried, 0.960 by nearest neighbour
    assert dice(carried) >= 0.97
    assert dice(carried) > dice(nearest) + 0.015


def test_native_nifti_studies_take_the_same_path(study: PhantomStudy, tmp_path: Path) -> None:
    """The second way in: one native-space NIfTI per sequence and the annotation on one of
    their grids (here written from the phantom's series), named however the hospital names
    them as long as they end in _<part>.nii.gz."""
    from sealbench.benchmarks.brats.ingest.pipeline import IngestOptions, ingest

    folder = tmp_path / "studies" / study.folder.name
    folder.mkdir(parents=True)
    numbers = {"t1n": 3, "t1c": 7, "t2w": 4, "t2f": 5}
    for part, number in numbers.items():
        sitk.WriteImage(series_volume(_series(study, number)),
                        str(folder / f"{study.phi.file_stem}_{part}.nii.gz"))
    shutil.copy(study.annotation_nifti, folder / f"{study.phi.file_stem}_seg.nii.gz")
    report = ingest(tmp_path / "studies", tmp_path / "work", SMALL,
                    IngestOptions(source="nifti", mapping=MAPPING))
    (review,) = report.cases
    assert review.status == "ready", review.reason
    assert review.region_ml["WT"] > 0 and review.template_dice is not None
    assert review.template_dice > 0.9
    _no_phi(report.model_dump_json(), study)


_THRESHOLD_TOOL = """
import sys
import SimpleITK as sitk
image = sitk.ReadImage(sys.argv[1])
sitk.WriteImage(sitk.Cast(image > 50, sitk.sitkUInt8), sys.argv[2])
"""


def test_hospitals_own_brain_extractor_runs_as_a_command(tmp_path: Path) -> None:
    """A dedicated extractor the hospital installed (here a small threshold tool standing in
    for HD-BET), given the reference sequence first; its failure rejects with no output
    shown."""
    import sys

    from sealbench.benchmarks.brats.ingest.errors import RegistrationError
    from sealbench.benchmarks.brats.ingest.register import CommandBrainExtractor

    tool = tmp_path / "tool.py"
    tool.write_text(_THRESHOLD_TOOL)
    array = np.zeros((20, 24, 28), dtype=np.float32)
    array[5:15, 6:18, 7:21] = 100.0
    reference = sitk.GetImageFromArray(array)
    reference.SetOrigin((3.0, -4.0, 5.0))
    other = sitk.GetImageFromArray(np.zeros_like(array))
    other.CopyInformation(reference)
    extractor = CommandBrainExtractor([sys.executable, str(tool), "{input}", "{output}"])
    mask = extractor.extract({"t1c": reference, "t2w": other})
    assert int(sitk.GetArrayFromImage(mask).sum()) == 10 * 12 * 14
    assert extractor.name == f"command: {Path(sys.executable).name}"
    failing = CommandBrainExtractor([sys.executable, "-c",
                                     "import sys; print('Doe^Jane'); sys.exit(3)",
                                     "{input}", "{output}"])
    with pytest.raises(RegistrationError, match=r"failed \(exit 3\)") as caught:
        failing.extract({"t1c": reference})
    assert "Doe" not in str(caught.value)
    with pytest.raises(ValueError, match="must contain"):
        CommandBrainExtractor(["hd-bet", "-i", "{input}"])
