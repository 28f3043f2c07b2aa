"""Loading cases from in-memory bytes (what the enclave does after decryption) and mapping a
prepared dataset's manifest paths to cases."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from sealbench.benchmarks.brats import (
    BRATS2021_LABELS,
    BRATS_2023_GLI,
    BratsContract,
    CaseContractError,
    CaseFormatError,
    case_files_from_manifest_paths,
    decode_nifti,
    encode_nifti,
    load_case_from_bytes,
    prepared_case_path,
)
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case


def _files(tmp_path: Path, contract: BratsContract, seed: int = 1) -> dict[str, bytes]:
    folder = write_case(generate_case(seed, contract.shape, contract), tmp_path,
                        case_id_for(seed), contract)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_case_round_trips_through_memory(tmp_path: Path, small_contract: BratsContract) -> None:
    case = generate_case(1, small_contract.shape, small_contract)
    files = _files(tmp_path, small_contract)
    loaded = load_case_from_bytes(files, small_contract)
    assert loaded.case_id == case_id_for(1) and loaded.shape == small_contract.shape
    assert np.array_equal(loaded.seg, small_contract.label_map.from_class_indices(case.classes))
    assert np.array_equal(loaded.modalities["t1c"], case.modalities["t1c"])
    assert np.allclose(loaded.affine, case.affine)


def test_keys_may_be_manifest_paths(tmp_path: Path, small_contract: BratsContract) -> None:
    files = {f"cases/{case_id_for(1)}/{name}": data
             for name, data in _files(tmp_path, small_contract).items()}
    assert load_case_from_bytes(files, small_contract).case_id == case_id_for(1)


def test_files_of_two_cases_are_refused(tmp_path: Path, small_contract: BratsContract) -> None:
    files = _files(tmp_path, small_contract, 1)
    other = _files(tmp_path, small_contract, 2)
    files[f"{case_id_for(2)}-t1n.nii.gz"] = other[f"{case_id_for(2)}-t1n.nii.gz"]
    with pytest.raises(CaseContractError, match="exactly one case"):
        load_case_from_bytes(files, small_contract)


def test_inference_only_case_needs_no_segmentation(tmp_path: Path,
                                                   small_contract: BratsContract) -> None:
    files = _files(tmp_path, small_contract)
    del files[f"{case_id_for(1)}-seg.nii.gz"]
    with pytest.raises(CaseContractError, match="missing seg"):
        load_case_from_bytes(files, small_contract)
    assert load_case_from_bytes(files, small_contract, require_seg=False).seg is None


def test_gzip_bomb_is_refused_before_inflating(small_contract: BratsContract) -> None:
    bomb = gzip.compress(bytes(small_contract.n_voxels * 8 + (2 << 20)))
    with pytest.raises(CaseFormatError, match="inflates to more than"):
        decode_nifti(bomb, small_contract)


def test_plain_nifti_and_garbage_are_refused(small_contract: BratsContract) -> None:
    with pytest.raises(CaseFormatError, match="not gzip"):
        decode_nifti(b"\x5c\x01\x00\x00" + bytes(400), small_contract)
    with pytest.raises(CaseFormatError, match="not a readable NIfTI"):
        decode_nifti(gzip.compress(b"hello"), small_contract)


def test_encoding_is_deterministic_and_quantised(small_contract: BratsContract) -> None:
    rng = np.random.default_rng(0)
    image = rng.standard_normal(small_contract.shape).astype(np.float32)
    affine = np.eye(4)
    first = encode_nifti(image, affine, slope=1e-3)
    assert first == encode_nifti(image, affine, slope=1e-3)
    back = decode_nifti(first, small_contract).get_fdata(dtype=np.float32)
    assert np.abs(back - image).max() <= 5.1e-4


def test_manifest_paths_group_by_case() -> None:
    contract = BRATS_2023_GLI
    paths = ["dataset.json", "statistics.json"]
    for seed in (3, 1):
        paths += [prepared_case_path(case_id_for(seed), p, contract) for p in contract.parts]
    grouped = case_files_from_manifest_paths(paths, contract)
    assert list(grouped) == [case_id_for(1), case_id_for(3)]
    assert grouped[case_id_for(1)]["seg"] == f"cases/{case_id_for(1)}/{case_id_for(1)}-seg.nii.gz"


@pytest.mark.parametrize("path, message", [
    ("extra/evil.nii.gz", "outside the prepared layout"),
    (f"cases/{case_id_for(2)}/{case_id_for(1)}-t1n.nii.gz", "another case's folder"),
    (f"cases/{case_id_for(1)}/{case_id_for(1)}-t1n.nii", "is not .nii.gz"),
])
def test_unexpected_manifest_paths_are_refused(path: str, message: str) -> None:
    with pytest.raises(CaseContractError, match=message):
        case_files_from_manifest_paths([path], BRATS_2023_GLI)


def test_case_missing_a_part_in_manifest_is_refused() -> None:
    paths = [prepared_case_path(case_id_for(1), p, BRATS_2023_GLI) for p in ("t1n", "t1c")]
    with pytest.raises(CaseContractError, match="lacks t2w, t2f, seg"):
        case_files_from_manifest_paths(paths, BRATS_2023_GLI)


def test_label_maps_derive_regions() -> None:
    labels = np.array([0, 1, 2, 3], dtype=np.uint8)
    lm = BRATS_2023_GLI.label_map
    assert lm.region_mask(labels, "WT").tolist() == [False, True, True, True]
    assert lm.region_mask(labels, "TC").tolist() == [False, True, False, True]
    assert lm.region_mask(labels, "ET").tolist() == [False, False, False, True]
    assert BRATS2021_LABELS.from_class_indices(labels).tolist() == [0, 1, 2, 4]
    assert BRATS2021_LABELS.to_class_indices(np.array([0, 1, 2, 4])).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"\[3\]"):
        BRATS2021_LABELS.to_class_indices(labels)


def test_contract_names_follow_brats_2023() -> None:
    name = BRATS_2023_GLI.file_name("BraTS-GLI-00042-001", "t2f")
    assert name == "BraTS-GLI-00042-001-t2f.nii.gz"
    assert BRATS_2023_GLI.is_case_id("BraTS-GLI-00042-001")
    assert not BRATS_2023_GLI.is_case_id("BraTS2021_00042")
    with pytest.raises(ValueError, match="unknown part"):
        BRATS_2023_GLI.file_name("BraTS-GLI-00042-001", "flair")
