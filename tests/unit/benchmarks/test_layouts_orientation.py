"""Raw layouts (BraTS 2021 and 2023), orientation (RAS+ or a reasoned rejection) and the grid
contract of preparation, on generated files.

The strongest check is byte equality: the same patient written in the 2021 layout, in another
axis-aligned orientation, or in the 2023 layout prepares to exactly the same files."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable
from pathlib import Path

import nibabel as nib
import numpy as np
import numpy.typing as npt
import pytest

from sealbench.benchmarks.brats import BRATS2021_LABELS, BRATS_2023_GLI, BratsContract, encode_nifti
from sealbench.benchmarks.brats.contract import BRATS_2023_GLI_SMALL
from sealbench.benchmarks.brats.definition import (
    SMALL_REFERENCE_MODEL,
    load_definition,
    load_model_bytes,
    load_small_definition,
    shipped_definition,
)
from sealbench.benchmarks.brats.errors import PreparationError
from sealbench.benchmarks.brats.layouts import MixedLayoutsError
from sealbench.benchmarks.brats.prepare import (
    DATA_DIR,
    NoValidCasesError,
    PreparationReport,
    prepare_dataset,
)
from sealbench.benchmarks.brats.synthetic import (
    SyntheticCase,
    case_id_for,
    generate_case,
    write_case,
)

SHAPE = (64, 64, 48)
_NAMES_2021 = {"t1n": "t1", "t1c": "t1ce", "t2w": "t2", "t2f": "flair"}


@pytest.fixture(scope="module")
def case() -> SyntheticCase:
    generated = generate_case(5, SHAPE, BRATS_2023_GLI_SMALL)
    assert {1, 2, 3} <= set(np.unique(generated.classes).tolist())  # every tissue present
    return generated


def _write_2021(case: SyntheticCase, raw: Path, index: int) -> Path:
    """``case`` in the BraTS 2021 layout: BraTS2021_XXXXX/BraTS2021_XXXXX_<name>.nii.gz,
    labels 1/2/4."""
    folder = raw / f"BraTS2021_{index:05d}"
    folder.mkdir(parents=True)
    labels = BRATS2021_LABELS.from_class_indices(case.classes)
    volumes = {**{_NAMES_2021[m]: image for m, image in case.modalities.items()},
               "seg": labels}
    for name, array in volumes.items():
        (folder / f"{folder.name}_{name}.nii.gz").write_bytes(encode_nifti(array, case.affine))
    return folder


def _prepared_files(out: Path) -> dict[str, bytes]:
    data = out / DATA_DIR / "cases"
    return {str(p.relative_to(data)): p.read_bytes() for p in sorted(data.rglob("*.nii.gz"))}


def _prepare(raw: Path, out: Path, contract: BratsContract = BRATS_2023_GLI_SMALL
             ) -> PreparationReport:
    return prepare_dataset(raw, out, contract)


def test_brats2021_layout_prepares_to_the_same_files_as_2023(case: SyntheticCase,
                                                              tmp_path: Path) -> None:
    """flair/t1/t1ce/t2 become t2f/t1n/t1c/t2w, labels 1/2/4 become 1/2/3, BraTS2021_00005
    becomes BraTS-GLI-00005-000: byte for byte what the 2023 layout of the patient gives."""
    write_case(case, tmp_path / "raw2023", case_id_for(5), BRATS_2023_GLI_SMALL)
    _write_2021(case, tmp_path / "raw2021", 5)
    new = _prepare(tmp_path / "raw2023", tmp_path / "p2023")
    old = _prepare(tmp_path / "raw2021", tmp_path / "p2021")
    assert (new.layout, old.layout) == ("brats2023", "brats2021")
    assert old.accepted == new.accepted == ("BraTS-GLI-00005-000",)
    assert old.dataset_digest == new.dataset_digest
    assert _prepared_files(tmp_path / "p2021") == _prepared_files(tmp_path / "p2023")
    seg = nib.Nifti1Image.from_bytes(gzip.decompress(_prepared_files(tmp_path / "p2021")[
        "BraTS-GLI-00005-000/BraTS-GLI-00005-000-seg.nii.gz"]))
    assert set(np.unique(np.asarray(seg.dataobj)).tolist()) == {0, 1, 2, 3}


def test_brats2021_seg_with_label_3_rejected_with_reason(case: SyntheticCase,
                                                         tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    folder = _write_2021(case, raw, 5)
    bad = case.classes.copy()  # class indices 0..3: label 3 is not in the 2021 map
    (folder / f"{folder.name}_seg.nii.gz").write_bytes(encode_nifti(bad, case.affine))
    _write_2021(case, raw, 6)
    report = _prepare(raw, tmp_path / "out")
    assert report.accepted == ("BraTS-GLI-00006-000",)
    (rejection,) = report.rejected
    assert rejection.case == "BraTS2021_00005"
    assert "labels [3] are not in the brats2021 map [0, 1, 2, 4]" in rejection.reason


def test_brats2023_file_name_in_a_2021_folder_rejected(case: SyntheticCase,
                                                       tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    folder = _write_2021(case, raw, 5)
    (folder / f"{folder.name}_t2f.nii.gz").write_bytes(
        (folder / f"{folder.name}_flair.nii.gz").read_bytes())
    _write_2021(case, raw, 6)
    report = _prepare(raw, tmp_path / "out")
    (rejection,) = report.rejected
    assert rejection.case == "BraTS2021_00005"
    assert "BraTS2021_00005_t2f.nii.gz" in rejection.reason and "BraTS 2021" in rejection.reason


def test_mixed_layouts_refused_whole_and_nothing_written(case: SyntheticCase,
                                                         tmp_path: Path) -> None:
    """The releases share patients: BraTS2021_00005 and BraTS-GLI-00005-000 are one person."""
    raw = tmp_path / "raw"
    write_case(case, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    _write_2021(case, raw, 5)
    with pytest.raises(MixedLayoutsError) as caught:
        _prepare(raw, tmp_path / "out")
    message = str(caught.value)
    assert "BraTS2021_00005" in message and "BraTS-GLI-00005-000" in message
    assert "own folder" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def _flip_to_lps(case: SyntheticCase) -> SyntheticCase:
    """The same voxels stored LPS: x and y reversed, the affine following."""
    affine = case.affine @ np.array([[-1, 0, 0, SHAPE[0] - 1], [0, -1, 0, SHAPE[1] - 1],
                                     [0, 0, 1, 0], [0, 0, 0, 1]], dtype=np.float64)
    return SyntheticCase(case.seed, {m: np.ascontiguousarray(v[::-1, ::-1, :])
                                     for m, v in case.modalities.items()},
                         np.ascontiguousarray(case.classes[::-1, ::-1, :]), affine,
                         case.n_lesions)


def _as_ras(case: SyntheticCase) -> SyntheticCase:
    image = nib.as_closest_canonical(nib.Nifti1Image(case.classes, case.affine))
    flips = nib.orientations.io_orientation(case.affine)
    modalities = {m: np.ascontiguousarray(nib.orientations.apply_orientation(v, flips))
                  for m, v in case.modalities.items()}
    return SyntheticCase(case.seed, modalities, np.asarray(image.dataobj), image.affine,
                         case.n_lesions)


def test_lps_and_ras_storage_of_one_case_prepare_to_the_same_bytes(case: SyntheticCase,
                                                                   tmp_path: Path) -> None:
    ras = _as_ras(case)
    lps = _flip_to_lps(ras)
    assert nib.aff2axcodes(ras.affine) == ("R", "A", "S")
    assert nib.aff2axcodes(lps.affine) == ("L", "P", "S")
    write_case(ras, tmp_path / "ras", case_id_for(5), BRATS_2023_GLI_SMALL)
    write_case(lps, tmp_path / "lps", case_id_for(5), BRATS_2023_GLI_SMALL)
    _prepare(tmp_path / "ras", tmp_path / "p-ras")
    _prepare(tmp_path / "lps", tmp_path / "p-lps")
    assert _prepared_files(tmp_path / "p-ras") == _prepared_files(tmp_path / "p-lps")


def test_permuted_axes_are_reoriented_onto_the_grid(case: SyntheticCase, tmp_path: Path) -> None:
    """Stored with the voxel axes in (z, x, y) order, 48x64x64 on disk: RAS+ puts it back on
    the 64x64x48 grid without resampling."""
    ras = _as_ras(case)
    order = (2, 0, 1)
    permutation = np.zeros((4, 4))
    for new_axis, old_axis in enumerate(order):
        permutation[old_axis, new_axis] = 1
    permutation[3, 3] = 1
    stored = SyntheticCase(case.seed, {m: np.ascontiguousarray(v.transpose(order))
                                       for m, v in ras.modalities.items()},
                           np.ascontiguousarray(ras.classes.transpose(order)),
                           ras.affine @ permutation, case.n_lesions)
    assert stored.classes.shape == (48, 64, 64)
    write_case(ras, tmp_path / "ras", case_id_for(5), BRATS_2023_GLI_SMALL)
    write_case(stored, tmp_path / "perm", case_id_for(5), BRATS_2023_GLI_SMALL)
    _prepare(tmp_path / "ras", tmp_path / "p-ras")
    _prepare(tmp_path / "perm", tmp_path / "p-perm")
    assert _prepared_files(tmp_path / "p-ras") == _prepared_files(tmp_path / "p-perm")


def _rotated(affine: npt.NDArray[np.float64], degrees: float) -> npt.NDArray[np.float64]:
    theta = np.radians(degrees)
    rotation = np.eye(4)
    rotation[:2, :2] = [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]]
    return rotation @ affine


def test_oblique_case_rejected_with_reason_not_resampled(case: SyntheticCase,
                                                         tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    oblique = SyntheticCase(case.seed, case.modalities, case.classes,
                            _rotated(case.affine, 10.0), case.n_lesions)
    write_case(oblique, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    write_case(case, raw, case_id_for(6), BRATS_2023_GLI_SMALL)
    report = _prepare(raw, tmp_path / "out")
    assert report.accepted == (case_id_for(6),)
    (rejection,) = report.rejected
    assert rejection.case == case_id_for(5)
    assert "oblique" in rejection.reason and "10.0 degrees" in rejection.reason
    assert "resample" in rejection.reason


def test_float32_rounding_of_an_axis_aligned_affine_is_not_oblique(case: SyntheticCase,
                                                                   tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    nudged = SyntheticCase(case.seed, case.modalities, case.classes,
                           _rotated(case.affine, 0.001), case.n_lesions)
    write_case(nudged, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    assert _prepare(raw, tmp_path / "out").accepted == (case_id_for(5),)


def test_small_cases_rejected_by_the_full_size_contract(case: SyntheticCase,
                                                        tmp_path: Path) -> None:
    """The grid contract at preparation: 64x64x48 cases are not BraTS's 240x240x155 cases."""
    raw = tmp_path / "raw"
    write_case(case, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    with pytest.raises(NoValidCasesError) as caught:
        _prepare(raw, tmp_path / "out", BRATS_2023_GLI)
    (rejection,) = caught.value.rejected
    assert "(64, 64, 48) differs from the contract's (240, 240, 155)" in rejection.reason
    assert not (tmp_path / "out").exists()


def test_other_spacing_rejected_by_the_contract(case: SyntheticCase, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    coarse = SyntheticCase(case.seed, case.modalities, case.classes,
                           case.affine @ np.diag([1.0, 1.0, 2.0, 1.0]), case.n_lesions)
    write_case(coarse, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    with pytest.raises(NoValidCasesError) as caught:
        _prepare(raw, tmp_path / "out")
    assert "spacing (1.0, 1.0, 2.0) mm differs" in caught.value.rejected[0].reason


def test_small_benchmark_has_its_own_contract_and_models() -> None:
    full, small = load_definition(), load_small_definition()
    assert full.contract.shape == (240, 240, 155)
    assert small.contract.shape == (64, 64, 48) and small.contract == BRATS_2023_GLI_SMALL
    assert small.name != full.name and small.digest != full.digest
    assert small.reference_model.name == SMALL_REFERENCE_MODEL
    full_names = {m.name for m in (full.reference_model, *full.baseline_models)}
    assert not full_names & {m.name for m in (small.reference_model, *small.baseline_models)}
    # the small benchmark's contract differs from the full one only in its grid
    assert small.contract.with_shape(full.contract.shape) == full.contract
    assert load_model_bytes(small.reference_model)  # the shipped weights, digest-checked
    assert shipped_definition("brats-small") == small
    assert small.contract.grid == {"shape": [64, 64, 48], "spacing_mm": [1.0, 1.0, 1.0]}


def _rewrite_headers(folder: Path, edit: Callable[[nib.Nifti1Header], None]) -> None:
    """Rewrite every volume of a raw case folder after ``edit`` changed its header (the
    image is built from the header alone, so nibabel does not write the affine back)."""
    for path in sorted(folder.glob("*.nii.gz")):
        image = nib.Nifti1Image.from_bytes(gzip.decompress(path.read_bytes()))
        header = image.header.copy()
        edit(header)
        rewritten = nib.Nifti1Image(np.asanyarray(image.dataobj), None, header)
        path.write_bytes(gzip.compress(rewritten.to_bytes()))


def _no_codes(header: nib.Nifti1Header) -> None:
    header.set_qform(None, code=0)
    header.set_sform(None, code=0)


def test_header_without_orientation_codes_refused_not_flipped(case: SyntheticCase,
                                                              tmp_path: Path) -> None:
    """No qform/sform code: nibabel falls back to LAS and would flip the case left-right
    against the same case written RAS; preparation refuses it and says what readers assume."""
    raw = tmp_path / "raw"
    _rewrite_headers(write_case(_as_ras(case), raw, case_id_for(5), BRATS_2023_GLI_SMALL),
                     _no_codes)
    assert nib.aff2axcodes(nib.load(next(raw.rglob("*t1n.nii.gz"))).affine) == ("L", "A", "S")
    with pytest.raises(NoValidCasesError) as caught:
        _prepare(raw, tmp_path / "out")
    reason = caught.value.rejected[0].reason
    assert "states no orientation" in reason and "would assume LAS" in reason
    assert "set_sform" in reason


def test_qform_disagreeing_with_sform_refused_naming_both(case: SyntheticCase,
                                                         tmp_path: Path) -> None:
    raw = tmp_path / "raw"

    def flip_qform(header: nib.Nifti1Header) -> None:
        header.set_qform(header.get_sform() @ np.diag([-1.0, 1.0, 1.0, 1.0]), code=1)

    _rewrite_headers(write_case(_as_ras(case), raw, case_id_for(5), BRATS_2023_GLI_SMALL),
                     flip_qform)
    with pytest.raises(NoValidCasesError) as caught:
        _prepare(raw, tmp_path / "out")
    reason = caught.value.rejected[0].reason
    assert "qform (LAS) and sform (RAS) disagree" in reason


def test_small_tilt_reported_with_its_real_angle(case: SyntheticCase, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    tilted = SyntheticCase(case.seed, case.modalities, case.classes,
                           _rotated(case.affine, 0.01), case.n_lesions)
    write_case(tilted, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    with pytest.raises(NoValidCasesError) as caught:
        _prepare(raw, tmp_path / "out")
    assert "about 0.01 degrees off" in caught.value.rejected[0].reason


def test_hidden_files_are_not_cases_nor_parts(case: SyntheticCase, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    folder = write_case(case, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    (raw / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (folder / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (folder / f"._{case_id_for(5)}-t1n.nii.gz").write_bytes(b"\0\5\26\7")
    report = _prepare(raw, tmp_path / "out")
    assert report.accepted == (case_id_for(5),) and report.rejected == ()


def test_nibabel_header_fixes_are_logged_not_printed(case: SyntheticCase, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    raw = tmp_path / "raw"
    folder = write_case(case, raw, case_id_for(5), BRATS_2023_GLI_SMALL)
    t1n = next(folder.glob("*-t1n.nii.gz"))
    image = nib.Nifti1Image.from_bytes(gzip.decompress(t1n.read_bytes()))
    image.header["pixdim"][1] = 0  # nibabel: "pixdim[1,2,3] should be non-zero; setting ..."
    t1n.write_bytes(gzip.compress(image.to_bytes()))
    capfd.readouterr()
    with caplog.at_level("WARNING", logger="sealbench.benchmarks.brats.cases"):
        assert _prepare(raw, tmp_path / "out").accepted == (case_id_for(5),)  # 0 mm -> 1 mm
    # not nibabel's bare line on stderr (sealbench's own log handler may show its record)
    assert not any(line.startswith("pixdim") for line in capfd.readouterr().err.splitlines())
    assert any(r.getMessage().startswith("t1n: nibabel: pixdim[1,2,3] should be non-zero")
               for r in caplog.records)
    assert [type(h) for h in nib.imageglobals.logger.handlers] == [logging.StreamHandler]


def test_output_created_by_a_concurrent_prepare_is_left_alone(case: SyntheticCase,
                                                              tmp_path: Path) -> None:
    """Two preparations into one new path: the one that finishes second says so, keeps
    nothing of its own and leaves the other's output as it is."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_case(case, raw, case_id_for(5), BRATS_2023_GLI_SMALL)

    def other_finishes_first(done: int, total: int) -> None:
        if done == total:
            (out / "theirs").mkdir(parents=True)

    with pytest.raises(PreparationError, match="appeared while this preparation ran"):
        prepare_dataset(raw, out, BRATS_2023_GLI_SMALL, other_finishes_first)
    assert [p.name for p in out.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
