"""Dataset preparation: each broken raw case is rejected with a reason, good cases survive, and
nothing half-written is ever left behind."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI,
    BratsContract,
    encode_nifti,
    load_case_from_bytes,
)
from sealbench.benchmarks.brats.cases import case_files_from_manifest_paths
from sealbench.benchmarks.brats.errors import (
    PreparationError,
    StatisticsError,
    StatisticsVersionError,
)
from sealbench.benchmarks.brats.normalise import brain_mask
from sealbench.benchmarks.brats.plugin import BratsBenchmark
from sealbench.benchmarks.brats.prepare import (
    DATA_DIR,
    MANIFEST_FILE,
    NoValidCasesError,
    prepare_dataset,
)
from sealbench.benchmarks.brats.statistics import dataset_statistics, read_statistics
from sealbench.benchmarks.brats.synthetic import case_id_for
from sealbench.client.assets.prepare import dataset_registration
from sealbench.crypto.digest import sha256_digest
from sealbench.crypto.manifest import Manifest, build_manifest

GOOD = [1, 2, 4, 5, 6]


def _path(raw: Path, seed: int, part: str) -> Path:
    case_id = case_id_for(seed)
    return raw / case_id / f"{case_id}-{part}.nii.gz"


def _rewrite(path: Path, edit: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
             ) -> None:
    image = nib.Nifti1Image.from_bytes(gzip.decompress(path.read_bytes()))
    array, affine = edit(np.asarray(image.dataobj).copy(), image.affine.copy())
    path.write_bytes(encode_nifti(array, affine))


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture
def broken_raw(raw_dataset: Callable[[list[int]], Path]) -> Path:
    raw = raw_dataset([*GOOD, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    _path(raw, 10, "t2f").unlink()
    _rewrite(_path(raw, 11, "t1c"), lambda a, aff: (a[:, :, :-1], aff))
    _rewrite(_path(raw, 12, "t2w"), lambda a, aff: (a, aff + _shift()))
    _rewrite(_path(raw, 13, "t1n"), lambda a, aff: (_with_nan(a), aff))
    _rewrite(_path(raw, 14, "seg"), lambda a, aff: (_with_label(a, 4), aff))
    data = _path(raw, 15, "t1n").read_bytes()
    _path(raw, 15, "t1n").write_bytes(data[: len(data) // 2])
    corrupt = bytearray(_path(raw, 16, "t2f").read_bytes())
    corrupt[len(corrupt) // 2:len(corrupt) // 2 + 64] = bytes(64)
    _path(raw, 16, "t2f").write_bytes(bytes(corrupt))
    _path(raw, 17, "t1c").rename(_path(raw, 17, "t1c").with_name(f"{case_id_for(17)}-t1ce.nii.gz"))
    (raw / case_id_for(18)).rename(raw / "patient-18")
    _path(raw, 19, "seg").write_bytes(gzip.compress(bytes(64 * 64 * 48 * 8 + (2 << 20))))
    (raw / "notes.txt").write_text("not a case")
    return raw


def _shift() -> np.ndarray:
    shift = np.zeros((4, 4))
    shift[0, 3] = 2.0
    return shift


def _with_nan(array: np.ndarray) -> np.ndarray:
    out = array.astype(np.float32)
    out[32, 32, 24] = np.nan
    return out


def _with_label(array: np.ndarray, value: int) -> np.ndarray:
    out = array.copy()
    out[30:33, 30:33, 20:23] = value
    return out


def test_broken_cases_are_rejected_with_reasons_and_good_ones_survive(
        broken_raw: Path, tmp_path: Path, small_contract: BratsContract) -> None:
    out = tmp_path / "prepared"
    calls: list[tuple[int, int]] = []
    report = prepare_dataset(broken_raw, out, small_contract,
                             progress=lambda done, total: calls.append((done, total)))
    assert report.accepted == tuple(case_id_for(s) for s in GOOD)
    reasons = {r.case: r.reason for r in report.rejected}
    expected = {
        case_id_for(10): "missing t2f",
        case_id_for(11): "t1c: shape (64, 64, 47)",
        case_id_for(12): "t2w: affine differs",
        case_id_for(13): "t1n: contains NaN",
        case_id_for(14): "seg: labels [4] are not in the brats2023 map",
        case_id_for(15): "truncated gzip",
        case_id_for(16): "corrupt gzip",
        case_id_for(17): "t1ce.nii.gz' is not named",
        "patient-18": "folder name does not match",
        case_id_for(19): "inflates to more than",
        "notes.txt": "not a case folder",
    }
    assert set(reasons) == set(expected)
    for case, fragment in expected.items():
        assert fragment in reasons[case], (case, reasons[case])
    assert calls[-1] == (len(expected) + len(GOOD), len(expected) + len(GOOD))
    # Only accepted cases were written, and the manifest covers exactly data/.
    data = out / DATA_DIR
    assert sorted(p.name for p in (data / "cases").iterdir()) == list(report.accepted)
    manifest = Manifest.from_bytes((out / MANIFEST_FILE).read_bytes())
    assert manifest.digest == report.dataset_digest == build_manifest(data).digest
    assert _leftovers(tmp_path) == []


def test_prepared_cases_load_from_memory_normalised(
        raw_dataset: Callable[[list[int]], Path], tmp_path: Path,
        small_contract: BratsContract) -> None:
    raw = raw_dataset(GOOD)
    out = tmp_path / "prepared"
    prepare_dataset(raw, out, small_contract)
    data = out / DATA_DIR
    manifest = Manifest.from_bytes((out / MANIFEST_FILE).read_bytes())
    grouped = case_files_from_manifest_paths([e.path for e in manifest.entries], small_contract)
    assert list(grouped) == [case_id_for(s) for s in GOOD]
    files = {path: (data / path).read_bytes() for path in grouped[case_id_for(1)].values()}
    for path, blob in files.items():
        manifest.verify(path, blob)
    case = load_case_from_bytes(files, small_contract)
    # The synthetic raw files are LPS, as BraTS's are; prepared cases are the same voxels in
    # RAS+ (x and y flipped, the affine following), not resampled.
    raw_image = nib.load(_path(raw, 1, "seg"))
    assert nib.aff2axcodes(raw_image.affine) == ("L", "P", "S")
    assert nib.aff2axcodes(case.affine) == ("R", "A", "S")
    assert np.array_equal(case.seg, raw_image.get_fdata()[::-1, ::-1, :])
    assert np.allclose(case.affine, nib.as_closest_canonical(raw_image).affine)
    for image in case.modalities.values():
        inside = image[image != 0]
        assert abs(float(inside.mean())) < 1e-2 and abs(float(inside.std()) - 1.0) < 1e-2
    stats = json.loads((data / "statistics.json").read_bytes())
    assert stats["n_cases"] == len(GOOD) and stats["n_rejected"] == 0
    assert case_id_for(1) not in json.dumps(stats)


def test_preparation_is_deterministic(raw_dataset: Callable[[list[int]], Path], tmp_path: Path,
                                      small_contract: BratsContract) -> None:
    raw = raw_dataset(GOOD[:2])
    first = prepare_dataset(raw, tmp_path / "a", small_contract)
    second = prepare_dataset(raw, tmp_path / "b", small_contract)
    assert first.dataset_digest == second.dataset_digest


def _numbers(doc: Any) -> Iterator[float]:
    """Every number in a JSON document."""
    if isinstance(doc, dict):
        for value in doc.values():
            yield from _numbers(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _numbers(value)
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield float(doc)


def _per_case_values(raw: Path, seeds: list[int], contract: BratsContract) -> list[float]:
    """What version 1 published distributions of, case by case (region and brain volumes in
    mm3, raw intensity means and standard deviations in the brain), and those distributions."""
    voxel = float(np.prod(contract.spacing_mm))
    columns: dict[str, list[float]] = {}
    for seed in seeds:
        images = {part: np.asarray(nib.Nifti1Image.from_bytes(
            gzip.decompress(_path(raw, seed, part).read_bytes())).dataobj, dtype=np.float64)
            for part in contract.parts}
        seg = images.pop(contract.seg_name)
        brain = brain_mask(images)
        for region in ("WT", "TC", "ET"):
            mask = contract.label_map.region_mask(seg.astype(np.uint8), region)
            columns.setdefault(region, []).append(float(mask.sum()) * voxel)
        columns.setdefault("brain", []).append(float(brain.sum()) * voxel)
        for name, image in images.items():
            columns.setdefault(f"{name} mean", []).append(float(image[brain].mean()))
            columns.setdefault(f"{name} std", []).append(float(image[brain].std()))
    values = [v for column in columns.values() for v in column]
    for column in columns.values():
        arr = np.asarray(column)
        values += [float(arr.mean()), float(arr.std()),
                   *(float(q) for q in np.quantile(arr, [0.25, 0.5, 0.75]))]
    return [v for v in values if v != 0.0]


def test_registration_statistics_hold_no_per_case_value(
        raw_dataset: Callable[[list[int]], Path], tmp_path: Path,
        small_contract: BratsContract) -> None:
    raw = raw_dataset([*GOOD, 10])
    _path(raw, 10, "t2f").unlink()
    per_case = _per_case_values(raw, GOOD, small_contract)
    out = tmp_path / "prepared"
    plugin = BratsBenchmark(small_contract)
    prepared = plugin.prepare(raw, out)
    assert len(prepared.accepted) == len(GOOD) and len(prepared.rejected) == 1
    written = json.loads((out / DATA_DIR / "statistics.json").read_bytes())
    # Only the allowed facts: counts and what the contract fixes for every case.
    assert set(written) == {"format", "version", "n_cases", "n_rejected", "contract_id",
                            "contract_version", "shape", "spacing_mm", "modalities",
                            "label_map"}
    assert written == dataset_statistics(small_contract, len(GOOD), 1).model_dump(mode="json")
    assert written["version"] == 2 and prepared.statistics == written
    # What registration sends holds the document, and no number computed from a case.
    request = dataset_registration(out, "site", sha256_digest(b"result key"), None)
    assert request.statistics["preparation"] == written
    sent = list(_numbers(request.model_dump(mode="json")))
    leaked = [v for v in sent if any(math.isclose(v, c, rel_tol=1e-6) for c in per_case)]
    assert leaked == []


def test_statistics_of_version_1_are_refused() -> None:
    old = {"format": "sealbench/brats-statistics", "version": 1, "n_cases": 5,
           "cases_with_region": {"WT": 5, "TC": 5, "ET": 4}, "region_volume_mm3": None,
           "brain_volume_mm3": None, "raw_intensity_mean": None, "raw_intensity_std": None}
    with pytest.raises(StatisticsVersionError, match=r"version 1.*prepare the dataset again"):
        read_statistics(json.dumps(old).encode())
    with pytest.raises(StatisticsError, match="not a sealbench/brats-statistics"):
        read_statistics(b'{"format": "other", "version": 2}')
    with pytest.raises(StatisticsError, match="not a valid version-2"):
        read_statistics(b'{"format": "sealbench/brats-statistics", "version": 2, "n_cases": 1}')
    current = dataset_statistics(BRATS_2023_GLI, 3, 0)
    assert read_statistics(current.to_canonical_json()) == current


def test_all_cases_rejected_leaves_nothing(raw_dataset: Callable[[list[int]], Path],
                                           tmp_path: Path, small_contract: BratsContract) -> None:
    raw = raw_dataset([1])
    _path(raw, 1, "t1n").unlink()
    out = tmp_path / "out"
    with pytest.raises(NoValidCasesError) as info:
        prepare_dataset(raw, out, small_contract)
    assert info.value.rejected[0].reason == "missing t1n"
    assert not out.exists() and _leftovers(tmp_path) == []


def test_interrupted_preparation_leaves_nothing(raw_dataset: Callable[[list[int]], Path],
                                                tmp_path: Path,
                                                small_contract: BratsContract) -> None:
    raw = raw_dataset(GOOD[:3])
    out = tmp_path / "out"

    def interrupt(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(raw, out, small_contract, progress=interrupt)
    assert not out.exists() and _leftovers(tmp_path) == []


def test_existing_output_is_never_overwritten(raw_dataset: Callable[[list[int]], Path],
                                              tmp_path: Path,
                                              small_contract: BratsContract) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("owner's file")
    with pytest.raises(PreparationError, match="already exists"):
        prepare_dataset(raw_dataset([1]), out, small_contract)
    assert (out / "keep.txt").read_text() == "owner's file"


def test_empty_raw_folder_says_what_case_folders_look_like(
    tmp_path: Path, small_contract: BratsContract
) -> None:
    raw = tmp_path / "empty"
    raw.mkdir()
    (raw / "README.txt").write_text("not a case")
    with pytest.raises(PreparationError) as info:
        prepare_dataset(raw, tmp_path / "out", small_contract)
    message = str(info.value)
    assert "no case folders" in message
    assert "BraTS-GLI-00001-000" in message and "BraTS-GLI-00001-000-t1n.nii.gz" in message
    assert not (tmp_path / "out").exists() and _leftovers(tmp_path) == []


def test_case_on_a_larger_grid_reports_found_and_expected_shape(
    raw_dataset: Callable[[list[int]], Path], tmp_path: Path, small_contract: BratsContract
) -> None:
    raw = raw_dataset([1, 2])
    big = small_contract.with_shape(tuple(2 * n for n in small_contract.shape))
    path = _path(raw, 2, "t2w")
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(big.shape).astype(np.float64)  # incompressible: over the limit
    path.write_bytes(encode_nifti(noise, np.eye(4)))
    report = prepare_dataset(raw, tmp_path / "out", small_contract)
    reason = {r.case: r.reason for r in report.rejected}[case_id_for(2)]
    expected = "x".join(map(str, small_contract.shape))
    found = "x".join(map(str, big.shape))
    assert reason == f"t2w: grid {found}, but the contract expects {expected}"


def test_strict_preparation_writes_nothing_when_any_case_fails(
    raw_dataset: Callable[[list[int]], Path], tmp_path: Path, small_contract: BratsContract
) -> None:
    from sealbench.benchmarks.brats.prepare import CasesRejectedError

    raw = raw_dataset([1, 2])
    _path(raw, 2, "t1n").unlink()
    out = tmp_path / "out"
    with pytest.raises(CasesRejectedError) as info:
        prepare_dataset(raw, out, small_contract, strict=True)
    assert "1 of 2 raw cases failed" in str(info.value)
    assert [r.reason for r in info.value.rejected] == ["missing t1n"]
    assert not out.exists() and _leftovers(tmp_path) == []
    assert prepare_dataset(raw, out, small_contract).accepted == (case_id_for(1),)
