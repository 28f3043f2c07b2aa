"""The BraTS 2025 scoring agrees with the official evaluator, key by key.

The oracle is ``BraTS_evaluation`` 0.0.10 on ``panoptica`` 2.1.7 (AGPL: the dev extra installs
it for the tests; sealbench never imports it, :mod:`test_scoring2025_licence`). Every case is
scored by both, on the same arrays and spacing, and every key of the official per-group
dictionary (``PanopticaResult.to_dict(True)``, the per-instance rows included) must be present
with the same value: integers and NaN/inf exactly, floats within 1e-9. The families below hold
over 300 region-cases (a case scored on each group of its configuration): empty truth, empty
prediction, both empty, single voxels, touching lesions, many small lesions, ties between equal
matchings, anisotropic spacing, full-size volumes, and the official command on NIfTI files.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import warnings
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from sealbench.benchmarks.brats import InvalidPredictionError
from sealbench.benchmarks.brats.scoring2025 import (
    GLI_2025,
    MET_2025,
    Scoring2025,
    score_case,
    score_stored_volumes,
    summary_json,
)

panoptica = pytest.importorskip("panoptica", reason="the official evaluator (dev extra)")
brats_evaluation = pytest.importorskip("brats_evaluation")

pytestmark = pytest.mark.filterwarnings("ignore")
TOLERANCE = 1e-9
Case = tuple[str, np.ndarray, np.ndarray, tuple[float, float, float]]


@pytest.fixture(scope="module")
def official() -> dict[str, Any]:
    with contextlib.redirect_stdout(io.StringIO()):
        return {task: panoptica.Panoptica_Evaluator.load_from_config(str(
            files("brats_evaluation").joinpath("configs", f"config_{task}.yaml")))
            for task in ("gli", "mets")}


def official_dicts(evaluator: Any, case: Case) -> dict[str, dict[str, Any]]:
    _, truth, pred, spacing = case
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = evaluator.evaluate(pred, truth, voxelspacing=spacing)
    return {group: result.to_dict(True) for group, result in results.items()}


def difference(theirs: Any, ours: Any, where: str) -> float:
    """The largest |difference| between two official-shaped values; AssertionError when the
    keys, lengths or non-finite values differ."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), (
            f"{where}: keys {list(ours) if isinstance(ours, dict) else ours} != {list(theirs)}")
        return max((difference(theirs[k], ours[k], f"{where}.{k}") for k in theirs), default=0.0)
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{where}: length differs"
        return max((difference(a, b, f"{where}[{i}]") for i, (a, b) in
                    enumerate(zip(theirs, ours, strict=True))), default=0.0)
    if isinstance(theirs, str):
        assert ours == theirs, f"{where}: {ours!r} != official {theirs!r}"
        return 0.0
    a, b = float(theirs), float(ours)
    if not (math.isfinite(a) and math.isfinite(b)):
        assert (math.isnan(a) and math.isnan(b)) or a == b, f"{where}: {b} != official {a}"
        return 0.0
    assert abs(a - b) <= TOLERANCE, f"{where}: {b} != official {a}"
    return abs(a - b)


def assert_conforms(evaluator: Any, config: Scoring2025, cases: list[Case]) -> int:
    """Score every case both ways; return the number of region-cases compared."""
    compared = 0
    for case in cases:
        name, truth, pred, spacing = case
        theirs = official_dicts(evaluator, case)
        ours = score_case(pred, truth, spacing, config)
        assert list(ours) == list(theirs)
        for group in theirs:
            difference(theirs[group], ours[group], f"{name}/{group}")
            compared += 1
    return compared


# -- case families -------------------------------------------------------------------------------

def _box(shape: tuple[int, int, int], lo: tuple[int, int, int], size: tuple[int, int, int],
         ) -> tuple[slice, ...]:
    del shape
    return tuple(slice(a, a + n) for a, n in zip(lo, size, strict=True))


def edge_cases() -> list[Case]:
    """Hand-built situations, each on the GLI labels (1 NETC, 2 SNFH, 3 ET, 4 RC)."""
    s = (12, 13, 11)
    out: list[Case] = []

    def add(name: str, truth: np.ndarray, pred: np.ndarray,
            spacing: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> None:
        out.append((name, truth.astype(np.uint8), pred.astype(np.uint8), spacing))

    z = np.zeros(s, dtype=np.uint8)
    blob = z.copy()
    blob[_box(s, (2, 3, 2), (4, 3, 5))] = 1
    blob[_box(s, (3, 4, 3), (2, 1, 2))] = 3
    blob[_box(s, (7, 7, 6), (3, 4, 3))] = 2
    blob[_box(s, (8, 1, 1), (2, 2, 2))] = 4
    add("both empty", z, z)
    add("empty truth", z, blob)
    add("empty prediction", blob, z)
    add("identical", blob, blob)
    add("identical anisotropic", blob, blob, (0.5, 1.0, 2.5))
    one = z.copy()
    one[5, 5, 5] = 3
    add("single voxel on itself", one, one)
    diag = z.copy()
    diag[6, 6, 6] = 3
    add("single voxels diagonal", one, diag)
    add("single voxel vs blob", one, blob)
    corner = z.copy()
    corner[0, 0, 0] = 1
    corner[-1, -1, -1] = 1
    add("voxels at the array's corners", corner, corner[::-1, ::-1, ::-1].copy())
    far = z.copy()
    far[_box(s, (8, 8, 7), (3, 3, 3))] = 1
    near = z.copy()
    near[_box(s, (1, 1, 1), (3, 3, 3))] = 1
    add("no overlap (zero-match, both non-empty)", near, far)
    touching = z.copy()
    touching[_box(s, (2, 2, 2), (3, 3, 3))] = 3
    touching[_box(s, (5, 2, 2), (3, 3, 3))] = 1  # face-touching: one TC/WT instance
    touching[_box(s, (8, 5, 5), (2, 2, 2))] = 3  # edge-touching the NETC cube diagonally
    add("touching lesions", touching, np.roll(touching, 1, axis=1))
    split = touching.copy()
    split[5, :, :] = 0
    add("one truth lesion predicted in two parts", touching, split)
    add("two predicted parts vs one truth", split, touching)
    tie = z.copy()
    tie[_box(s, (4, 4, 4), (2, 2, 2))] = 2
    twins = z.copy()
    twins[_box(s, (3, 4, 4), (1, 2, 2))] = 2
    twins[_box(s, (6, 4, 4), (1, 2, 2))] = 2
    add("a tie between two equally good matches", tie, twins)
    add("a tie the other way round", twins, tie)
    full = np.full(s, 2, dtype=np.uint8)
    add("everything labelled", full, blob)
    add("everything vs everything", full, full, (1.0, 0.7, 1.3))
    rc = z.copy()
    rc[_box(s, (3, 3, 3), (5, 5, 5))] = 4
    add("resection cavity only", rc, np.roll(rc, 2, axis=2))
    add("thin slab, anisotropic", (blob > 0) * 2, ((np.roll(blob, 1, 0) > 0) * 2), (3.0, 1.0, 1.0))
    return out


def _smooth_labels(rng: np.random.Generator, shape: tuple[int, ...], sparsity: float,
                   ) -> np.ndarray:
    field = ndimage.gaussian_filter(rng.random(shape), rng.uniform(0.6, 2.0))
    cuts = np.sort(np.quantile(field, [sparsity, sparsity + 0.05, sparsity + 0.1,
                                       sparsity + 0.15]))
    return np.digitize(field, cuts).astype(np.uint8)


def random_cases(seed: int, n: int) -> list[Case]:
    """Smooth random label fields (labels 0-4) with a perturbed or independent prediction, on
    random small grids and spacings (a tenth of them empty on one side)."""
    rng = np.random.default_rng(seed)
    spacings = (1.0, 0.5, 0.7, 1.2, 2.0, 3.0, 0.94)
    out: list[Case] = []
    for i in range(n):
        shape = tuple(int(v) for v in rng.integers(6, 26, 3))
        truth = _smooth_labels(rng, shape, rng.uniform(0.55, 0.85))
        roll = rng.uniform()
        if roll < 0.4:
            pred = _smooth_labels(rng, shape, rng.uniform(0.55, 0.85))
        elif roll < 0.9:
            pred = np.roll(truth, int(rng.integers(-2, 3)), axis=int(rng.integers(0, 3)))
            noise = rng.random(shape) < 0.02
            pred[noise] = rng.integers(0, 5, int(noise.sum()))
        else:
            pred = np.zeros(shape, dtype=np.uint8)
        if rng.uniform() < 0.05:
            truth = np.zeros(shape, dtype=np.uint8)
        spacing = tuple(float(v) for v in rng.choice(spacings, 3))
        out.append((f"random {seed}/{i}", truth, pred.astype(np.uint8), spacing))
    return out


def small_lesion_cases(seed: int, n: int) -> list[Case]:
    """Many small lesions (metastases): 1-3 voxel blobs of ET inside NETC/SNFH specks, some
    touching, predictions that miss, shift, merge or add lesions."""
    rng = np.random.default_rng(seed)
    out: list[Case] = []
    for i in range(n):
        shape = (24, 22, 20)
        truth = np.zeros(shape, dtype=np.uint8)
        pred = np.zeros(shape, dtype=np.uint8)
        for _ in range(int(rng.integers(0, 25))):
            lo = tuple(int(rng.integers(0, n - 3)) for n in shape)
            size = tuple(int(v) for v in rng.integers(1, 4, 3))
            label = int(rng.choice([1, 2, 3, 3, 3, 4]))
            truth[_box(shape, lo, size)] = label
            if rng.uniform() < 0.75:
                moved = tuple(a + int(rng.integers(-1, 2)) for a in lo)
                moved = tuple(max(0, a) for a in moved)
                pred[_box(shape, moved, size)] = label if rng.uniform() < 0.9 else 3
        for _ in range(int(rng.integers(0, 6))):
            lo = tuple(int(rng.integers(0, n - 2)) for n in shape)
            pred[_box(shape, lo, (1, 2, 1))] = int(rng.choice([1, 2, 3, 4]))
        spacing = (1.0, 1.0, 1.0) if i % 2 else (0.9375, 0.9375, 1.5)
        out.append((f"small lesions {seed}/{i}", truth, pred, spacing))
    return out


def full_size_cases() -> Iterator[Case]:
    """Two full-size (240x240x155) cases: an ellipsoid tumour with a cavity, and scattered
    metastases on an anisotropic grid."""
    rng = np.random.default_rng(2025)
    shape = (240, 240, 155)
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]

    def ellipsoid(centre: tuple[float, ...], radii: tuple[float, ...]) -> np.ndarray:
        return sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii, strict=True)) <= 1

    truth = np.zeros(shape, dtype=np.uint8)
    truth[ellipsoid((110, 120, 80), (30, 25, 20))] = 2
    truth[ellipsoid((112, 118, 80), (15, 14, 12))] = 3
    truth[ellipsoid((112, 118, 80), (9, 8, 7))] = 1
    truth[ellipsoid((150, 120, 80), (8, 9, 7)) & (truth == 0)] = 4
    pred = np.roll(truth, 2, axis=0)
    pred[ellipsoid((60, 60, 40), (3, 2, 2))] = 3
    yield ("full-size glioma", truth, pred, (1.0, 1.0, 1.0))
    mets = np.zeros(shape, dtype=np.uint8)
    guess = np.zeros(shape, dtype=np.uint8)
    for _ in range(25):
        c = tuple(float(rng.uniform(30, n - 30)) for n in shape)
        r = tuple(float(v) for v in rng.uniform(1.0, 6.0, 3))
        mets[ellipsoid(c, r)] = 3
        if rng.uniform() < 0.8:
            shifted = tuple(a + float(rng.normal(0, 1)) for a in c)
            guess[ellipsoid(shifted, r)] = 3
    yield ("full-size metastases", mets, guess, (0.9375, 0.9375, 1.2))


RANDOM_GLI = random_cases(7, 45)
RANDOM_MET = random_cases(8, 15)
SMALL_LESIONS = small_lesion_cases(9, 25)


def test_the_families_hold_over_300_region_cases() -> None:
    total = (len(edge_cases()) + len(RANDOM_GLI)) * len(GLI_2025.groups) + (
        len(RANDOM_MET) + len(SMALL_LESIONS)) * len(MET_2025.groups) + (
        len(GLI_2025.groups) + len(MET_2025.groups))
    assert total >= 300


def test_edge_cases_match_official(official: dict[str, Any]) -> None:
    assert assert_conforms(official["gli"], GLI_2025, edge_cases()) == 19 * 6


def test_random_label_fields_match_official_gli(official: dict[str, Any]) -> None:
    assert assert_conforms(official["gli"], GLI_2025, RANDOM_GLI) == 45 * 6


def test_random_label_fields_match_official_mets(official: dict[str, Any]) -> None:
    assert assert_conforms(official["mets"], MET_2025, RANDOM_MET) == 15 * 4


def test_many_small_lesions_match_official_mets(official: dict[str, Any]) -> None:
    assert assert_conforms(official["mets"], MET_2025, SMALL_LESIONS) == 25 * 4


@pytest.mark.slow
def test_full_size_cases_match_official(official: dict[str, Any]) -> None:
    glioma, metastases = full_size_cases()
    assert assert_conforms(official["gli"], GLI_2025, [glioma]) == 6
    assert assert_conforms(official["mets"], MET_2025, [metastases]) == 4


def test_the_configs_are_the_official_ones(official: dict[str, Any]) -> None:
    """Group names, order and label values as the official configuration files state them."""
    for task, config in (("gli", GLI_2025), ("mets", MET_2025)):
        groups = official[task].segmentation_class_groups_names
        assert tuple(g.name for g in config.groups) == tuple(groups)
        text = files("brats_evaluation").joinpath("configs", f"config_{task}.yaml").read_text()
        assert "matching_threshold: 0.000001" in text
        for group in config.groups:
            assert f"    {group.name}: " in text
            assert f"value_labels: {list(group.labels)}" in text.split(f"    {group.name}: ")[1]


def test_undeclared_label_refused_as_the_official_refuses(official: dict[str, Any]) -> None:
    truth = np.zeros((6, 6, 6), dtype=np.uint8)
    pred = truth.copy()
    pred[2, 2, 2] = 5
    with pytest.raises(InvalidPredictionError, match=r"\[5\]"):
        score_case(pred, truth, (1.0, 1.0, 1.0), GLI_2025)
    with pytest.raises(Exception), contextlib.redirect_stdout(io.StringIO()):  # noqa: B017
        official["gli"].evaluate(pred, truth, voxelspacing=(1.0, 1.0, 1.0))


def test_shape_mismatch_refused() -> None:
    with pytest.raises(InvalidPredictionError, match="shape"):
        score_case(np.zeros((4, 4, 4), np.uint8), np.zeros((4, 4, 5), np.uint8),
                   (1.0, 1.0, 1.0), GLI_2025)


def _write(path: Path, labels: np.ndarray, zooms: tuple[float, float, float]) -> None:
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), np.diag([*zooms, 1.0])), path)


def test_official_reading_of_files_matches_summary_json(official: dict[str, Any],
                                                        tmp_path: Path) -> None:
    """The official per-subject step on NIfTI files (``evaluate_single_exam``: read through
    SimpleITK, anisotropic zooms) gives, in the official summary's shape, what
    :func:`score_stored_volumes` and :func:`summary_json` build, key by key.

    (The official command's own ``json.dump`` fails here on numpy scalars in its dictionaries,
    so its summary is rebuilt the way its ``main`` builds it, with numpy scalars as numbers.)"""
    from brats_evaluation.evaluation import evaluate_single_exam

    zooms = (0.9375, 1.0, 1.5)
    cases = random_cases(11, 4) + small_lesion_cases(12, 2)
    theirs_rows, ours_rows = [], []
    for i, (_, truth, pred, _) in enumerate(cases):
        name = f"BraTS-GLI-{i:05d}-000.nii.gz"
        _write(tmp_path / name, truth, zooms)
        _write(tmp_path / f"team-{i:05d}-000.nii.gz", pred, zooms)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs_rows.append(evaluate_single_exam(
                str(tmp_path / f"team-{i:05d}-000.nii.gz"), str(tmp_path / name), name,
                official["gli"]))
        truth_img = nib.load(tmp_path / name)
        pred_img = nib.load(tmp_path / f"team-{i:05d}-000.nii.gz")
        ours_rows.append((name, score_stored_volumes(np.asanyarray(pred_img.dataobj),
                                                     np.asanyarray(truth_img.dataobj),
                                                     truth_img.header.get_zooms(), GLI_2025)))
    missing = ["BraTS-GLI-00099-000.nii.gz"]
    theirs = json.loads(json.dumps({"metrics": theirs_rows, "missings": missing},
                                   default=lambda o: o.item()))
    ours = json.loads(json.dumps(summary_json(ours_rows, missing)))
    assert all("error" not in row for row in theirs["metrics"])
    difference(theirs, ours, "summary")


def test_summary_json_carries_error_rows_as_the_official_does() -> None:
    summary = summary_json([("BraTS-GLI-00001-000.nii.gz", "label 7 in the prediction")])
    assert summary == {"metrics": [{"subject_name": "BraTS-GLI-00001-000.nii.gz",
                                    "error": "label 7 in the prediction"}], "missings": []}
