"""Conformance of the BraTS metrics: the reference's cases (a)-(h), agreement with DeepMind's
``surface-distance`` (HD95, to 1e-6) and ``medpy`` (Dice, sensitivity, specificity), and a
literal port of the BraTS 2023 lesion-wise scorer on random multi-lesion masks."""

from __future__ import annotations

import math

import medpy.metric.binary as medpy_binary
import numpy as np
import pytest
import surface_distance
from scipy import ndimage

from sealbench.benchmarks.brats import (
    BRATS2021_LABELS,
    BRATS_2023_GLI_METRICS,
    InvalidPredictionError,
    MetricsSpec,
    score_case,
)
from sealbench.benchmarks.brats._surface import robust_hausdorff, surface_distances

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SPACING = (1.0, 1.0, 1.0)
SPEC = BRATS_2023_GLI_METRICS


def cube(shape: tuple[int, int, int], lo: tuple[int, int, int], size: int) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    mask[lo[0]:lo[0] + size, lo[1]:lo[1] + size, lo[2]:lo[2] + size] = True
    return mask


def labels_from(wt: np.ndarray, value: int = 2) -> np.ndarray:
    return (wt * value).astype(np.uint8)


def random_blobs(rng: np.random.Generator, shape: tuple[int, int, int], fraction: float,
                 sigma: float = 1.5) -> np.ndarray:
    field = ndimage.gaussian_filter(rng.standard_normal(shape), sigma)
    return field > np.quantile(field, 1.0 - fraction)


# --- (a)-(h) ---------------------------------------------------------------------------------

def test_a_both_empty_scores_perfect() -> None:
    empty = np.zeros((32, 32, 32), dtype=np.uint8)
    scores = score_case(empty, empty, SPEC, SPACING)
    for region in scores.regions.values():
        assert (region.dice, region.hd95, region.sensitivity, region.specificity) == (1, 0, 1, 1)
        assert (region.lesion_dice, region.lesion_hd95) == (1.0, 0.0)
        assert (region.num_tp, region.num_fp, region.num_fn) == (0, 0, 0)


def test_b_false_positive_on_empty_ground_truth_is_penalised() -> None:
    gt = np.zeros((32, 32, 32), dtype=np.uint8)
    pred = labels_from(cube(gt.shape, (4, 4, 4), 5))
    wt = score_case(pred, gt, SPEC, SPACING).regions["WT"]
    assert (wt.dice, wt.hd95, wt.sensitivity) == (0.0, 374.0, 0.0)
    assert (wt.lesion_dice, wt.lesion_hd95, wt.num_fp, wt.num_tp, wt.num_fn) == (0, 374, 1, 0, 0)


def test_c_missed_lesion_is_penalised() -> None:
    gt = labels_from(cube((32, 32, 32), (4, 4, 4), 6))
    pred = np.zeros_like(gt)
    wt = score_case(pred, gt, SPEC, SPACING).regions["WT"]
    assert (wt.dice, wt.hd95, wt.sensitivity, wt.specificity) == (0.0, 374.0, 0.0, 1.0)
    assert (wt.lesion_dice, wt.lesion_hd95, wt.num_fn, wt.num_tp, wt.num_fp) == (0, 374, 1, 0, 0)


def test_d_shifted_cube_has_known_hd95() -> None:
    gt = cube((48, 48, 48), (10, 10, 10), 20)
    pred = np.roll(gt, 2, axis=0)
    scores = score_case(labels_from(pred), labels_from(gt), SPEC, SPACING).regions["WT"]
    assert scores.hd95 == pytest.approx(2.0)
    assert scores.dice == pytest.approx(2 * 18 / 40)
    assert scores.lesion_hd95 == pytest.approx(2.0)


def test_e_ground_truth_lesions_within_dilation_are_one_lesion() -> None:
    shape = (48, 48, 48)
    near = cube(shape, (10, 10, 10), 8) | cube(shape, (20, 10, 10), 8)  # 2-voxel gap
    far = cube(shape, (4, 4, 4), 8) | cube(shape, (30, 30, 30), 8)  # far apart
    merged = score_case(labels_from(near), labels_from(near), SPEC, SPACING).regions["WT"]
    split = score_case(labels_from(far), labels_from(far), SPEC, SPACING).regions["WT"]
    assert (merged.num_tp, merged.num_fn, merged.num_fp) == (1, 0, 0)
    assert (split.num_tp, split.num_fn, split.num_fp) == (2, 0, 0)
    # Predicting only one half of the merged lesion still matches it (one TP, Dice 2/3).
    half = score_case(labels_from(cube(shape, (10, 10, 10), 8)), labels_from(near), SPEC,
                      SPACING).regions["WT"]
    assert (half.num_tp, half.num_fn) == (1, 0)
    assert half.lesion_dice == pytest.approx(2 * 512 / (1024 + 512))


def test_f_sub_threshold_lesion_is_ignored() -> None:
    shape = (48, 48, 48)
    big = cube(shape, (5, 5, 5), 10)
    tiny = cube(shape, (35, 35, 35), 3)  # 27 mm^3 <= 50 mm^3
    scores = score_case(labels_from(big), labels_from(big | tiny), SPEC, SPACING).regions["WT"]
    assert (scores.num_tp, scores.num_fn, scores.num_fp) == (1, 0, 0)
    assert scores.lesion_dice == pytest.approx(1.0)
    assert scores.lesion_hd95 == pytest.approx(0.0)
    assert scores.dice < 1.0  # the legacy Dice still sees the missed voxels


def test_g_distant_false_positive_costs_the_penalty() -> None:
    shape = (64, 64, 64)
    gt = cube(shape, (5, 5, 5), 10)
    pred = gt | cube(shape, (50, 50, 50), 4)
    scores = score_case(labels_from(pred), labels_from(gt), SPEC, SPACING).regions["WT"]
    assert (scores.num_tp, scores.num_fp, scores.num_fn) == (1, 1, 0)
    assert scores.lesion_dice == pytest.approx(0.5)
    assert scores.lesion_hd95 == pytest.approx(374.0 / 2)


def test_h_2021_and_2023_label_maps_agree() -> None:
    rng = np.random.default_rng(5)
    classes_gt = np.zeros((40, 40, 40), dtype=np.uint8)
    classes_pred = np.zeros_like(classes_gt)
    for classes in (classes_gt, classes_pred):
        wt = random_blobs(rng, classes.shape, 0.08, 2.0)
        classes[wt] = 2
        classes[wt & random_blobs(rng, classes.shape, 0.3, 2.0)] = 1
        classes[wt & random_blobs(rng, classes.shape, 0.3, 2.0)] = 3
    spec21 = MetricsSpec(label_map=BRATS2021_LABELS)
    s23 = score_case(SPEC.label_map.from_class_indices(classes_pred),
                     SPEC.label_map.from_class_indices(classes_gt), SPEC, SPACING)
    s21 = score_case(BRATS2021_LABELS.from_class_indices(classes_pred),
                     BRATS2021_LABELS.from_class_indices(classes_gt), spec21, SPACING)
    assert s23.regions == s21.regions
    with pytest.raises(InvalidPredictionError, match=r"labels \[4\]"):
        score_case(BRATS2021_LABELS.from_class_indices(classes_pred),
                   SPEC.label_map.from_class_indices(classes_gt), SPEC, SPACING)
    with pytest.raises(InvalidPredictionError, match=r"labels \[3\]"):
        score_case(SPEC.label_map.from_class_indices(classes_pred),
                   BRATS2021_LABELS.from_class_indices(classes_gt), spec21, SPACING)


def test_prediction_of_another_shape_is_rejected() -> None:
    with pytest.raises(InvalidPredictionError, match="shape"):
        score_case(np.zeros((8, 8, 8), np.uint8), np.zeros((8, 8, 9), np.uint8), SPEC, SPACING)


def test_float_prediction_is_rejected() -> None:
    with pytest.raises(InvalidPredictionError, match="integer"):
        score_case(np.zeros((8, 8, 8), np.float32), np.zeros((8, 8, 8), np.uint8), SPEC, SPACING)


# --- agreement with independent implementations ---------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_hd95_equals_surface_distance(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(20, 40)), int(rng.integers(20, 40)), int(rng.integers(16, 32)))
    gt = random_blobs(rng, shape, rng.uniform(0.03, 0.3))
    pred = random_blobs(rng, shape, rng.uniform(0.03, 0.3)) | (gt & (rng.random(shape) < 0.7))
    spacing = (1.0, 1.0, 1.0) if seed % 2 else tuple(float(s) for s in rng.uniform(0.5, 2.0, 3))
    ours = robust_hausdorff(surface_distances(gt, pred, spacing), 95)
    theirs = surface_distance.compute_robust_hausdorff(
        surface_distance.compute_surface_distances(gt, pred, spacing), 95)
    assert math.isfinite(ours)
    assert abs(ours - theirs) <= 1e-6


@pytest.mark.parametrize("seed", range(8))
def test_dice_sensitivity_specificity_equal_medpy(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    shape = (32, 32, 24)
    gt = random_blobs(rng, shape, rng.uniform(0.02, 0.2))
    pred = random_blobs(rng, shape, rng.uniform(0.02, 0.2)) | (gt & (rng.random(shape) < 0.5))
    wt = score_case(labels_from(pred), labels_from(gt), SPEC, SPACING).regions["WT"]
    assert wt.dice == pytest.approx(medpy_binary.dc(pred, gt), abs=1e-12)
    assert wt.sensitivity == pytest.approx(medpy_binary.sensitivity(pred, gt), abs=1e-12)
    assert wt.specificity == pytest.approx(medpy_binary.specificity(pred, gt), abs=1e-12)


def test_medpy_pooled_hd95_differs_from_the_reported_hd95() -> None:
    # The reference's demonstration: a 20^3 cube shifted by 2 voxels plus a distant 6^3 false
    # positive. medpy pools both directions' distances (voxel-weighted) before the percentile,
    # so the distant blob hardly moves it; the BraTS (surface-distance) HD95 takes the worse
    # direction and sees it.
    shape = (80, 80, 80)
    gt = cube(shape, (10, 10, 10), 20)
    pred = np.roll(gt, 2, axis=0) | cube(shape, (60, 60, 60), 6)
    ours = score_case(labels_from(pred), labels_from(gt), SPEC, SPACING).regions["WT"].hd95
    theirs = surface_distance.compute_robust_hausdorff(
        surface_distance.compute_surface_distances(gt, pred, SPACING), 95)
    pooled = medpy_binary.hd95(pred, gt, voxelspacing=SPACING)
    assert ours == pytest.approx(theirs, abs=1e-6)
    assert pooled == pytest.approx(2.0)
    assert ours > 10 * pooled


# --- literal port of the BraTS 2023 lesion-wise scorer (rachitsaluja/BraTS-2023-Metrics) -----

def _brats2023_lesion_wise(pred: np.ndarray, gt: np.ndarray, dil: int,
                           thresh: float) -> tuple[float, float, int, int, int]:
    """get_LesionWiseScores + get_LesionWiseResults for one region, unit spacing, with
    scipy.ndimage.label (26-connectivity) standing in for cc3d."""
    struct26 = np.ones((3, 3, 3), dtype=bool)
    dilation_struct = ndimage.generate_binary_structure(3, 2)
    gt_cc, _ = ndimage.label(gt, structure=struct26)
    pred_cc, _ = ndimage.label(pred, structure=struct26)
    gt_dil = ndimage.binary_dilation(gt, structure=dilation_struct, iterations=dil)
    gt_dil_cc, _ = ndimage.label(gt_dil, structure=struct26)
    combined = np.zeros_like(gt_dil_cc)
    for comp in range(1, int(gt_dil_cc.max()) + 1):
        tmp = gt_cc * (gt_dil_cc == comp)
        combined += np.where(tmp > 0, comp, 0)
    tp, fn, gt_tp, rows = [], [], [], []
    for comp in range(1, int(combined.max()) + 1):
        gt_tmp = combined == comp
        gt_tmp_dil = ndimage.binary_dilation(gt_tmp, structure=dilation_struct, iterations=dil)
        gt_vol = float(gt_tmp.sum())
        hits = np.unique(pred_cc * gt_tmp_dil)
        hits = hits[hits != 0]
        tp.extend(int(h) for h in hits)
        pred_tmp = np.isin(pred_cc, hits)
        denom = pred_tmp.sum() + gt_tmp.sum()
        dice = 2.0 * np.logical_and(pred_tmp, gt_tmp).sum() / denom
        if pred_tmp.any():
            hd = surface_distance.compute_robust_hausdorff(
                surface_distance.compute_surface_distances(gt_tmp, pred_tmp, (1, 1, 1)), 95)
        else:
            hd = np.inf
        rows.append((len(hits), gt_vol, dice, 374.0 if np.isinf(hd) else hd))
        (gt_tp if len(hits) else fn).append(comp)
    fp = np.unique(pred_cc[np.isin(pred_cc, [*tp, 0], invert=True)])
    kept = [r for r in rows if r[1] > thresh]
    fn_sub = sum(1 for r in rows if r[0] == 0 and r[1] <= thresh)
    tp_sub = sum(1 for r in rows if r[0] != 0 and r[1] <= thresh)
    n = len(kept) + len(fp)
    dice_lw = sum(r[2] for r in kept) / n if n else 1.0
    hd_lw = (sum(r[3] for r in kept) + 374.0 * len(fp)) / n if n else 0.0
    return dice_lw, hd_lw, len(gt_tp) - tp_sub, len(fp), len(fn) - fn_sub


@pytest.mark.parametrize("seed", range(10))
def test_lesion_wise_scores_equal_the_brats2023_scorer(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    shape = (40, 40, 32)
    gt = random_blobs(rng, shape, rng.uniform(0.02, 0.08), sigma=2.5)
    # The prediction: the GT with some lesions dropped, shifted, plus a few spurious blobs.
    labels, n = ndimage.label(gt, structure=np.ones((3, 3, 3)))
    kept = np.isin(labels, rng.choice(np.arange(1, n + 1), size=max(1, n * 2 // 3),
                                      replace=False))
    pred = np.roll(kept, tuple(int(v) for v in rng.integers(-1, 2, 3)), axis=(0, 1, 2))
    pred |= random_blobs(rng, shape, 0.01, sigma=2.0)
    spec = MetricsSpec(lesion_dilation=int(rng.integers(1, 4)),
                       lesion_volume_threshold_mm3=float(rng.choice([2.0, 10.0, 50.0])))
    wt = score_case(labels_from(pred), labels_from(gt), spec, SPACING).regions["WT"]
    dice, hd, n_tp, n_fp, n_fn = _brats2023_lesion_wise(
        pred, gt, spec.lesion_dilation, spec.lesion_volume_threshold_mm3)
    assert (wt.num_tp, wt.num_fp, wt.num_fn) == (n_tp, n_fp, n_fn)
    assert wt.lesion_dice == pytest.approx(dice, abs=1e-9)
    assert wt.lesion_hd95 == pytest.approx(hd, abs=1e-6)
