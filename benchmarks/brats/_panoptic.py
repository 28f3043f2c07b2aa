"""The instance-wise scoring the BraTS 2025 evaluation defines, on one binary group (our own code).

Given a group's truth and prediction masks and the voxel spacing, :func:`score_group` does what
the official evaluator (``BraTS_evaluation`` 0.0.10 on ``panoptica`` 2.1.7) computes for one
label group, to the same floating-point values:

1. instances are the 26-connected components of each mask, numbered in C raster order;
2. references and predictions are matched one to one by a maximum bipartite matching on Dice
   (``scipy.optimize.linear_sum_assignment`` on the cost ``1 - Dice`` where Dice reaches the
   matching threshold, ``1 + 1e-6`` elsewhere; a pair is matched when its cost is below 1);
3. each matched pair gets Dice, HD95 (the 95th percentile of the pooled border-to-border
   distances, borders by 6-connected erosion, in millimetres) and NSD at the smallest spacing;
4. the global masks get Dice, HD95 and NSD **in voxel units** (the official global metrics are
   called without the spacing, so their NSD tolerance is 0.5 voxel), each replaced by its
   edge-case value when the masks do not overlap.

Distances are found with a k-d tree over border voxels (work proportional to the surface, not
to the bounding box) and then recomputed from the integer offsets exactly as a Euclidean
distance transform with sampling does, so they carry the same rounding.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import ndimage  # type: ignore[import-untyped]
from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]
from scipy.spatial import cKDTree  # type: ignore[import-untyped]

__all__ = ["EdgeRule", "GroupOutcome", "MatchedInstance", "score_group"]

BoolArray = npt.NDArray[np.bool_]
LabelArray = npt.NDArray[np.int32]
Spacing = tuple[float, float, float]

_FULL = np.ones((3, 3, 3), dtype=bool)
#: The cost of a pair that may not be matched (the official matcher's ``1.0 + 1e-6``).
_NO_MATCH_COST = 1.0 + 1e-6


@dataclass(frozen=True)
class EdgeRule:
    """A metric's value when no instance is matched, by situation (``nan``, ``inf``, ``0.0``)."""

    no_instances: float
    empty_prediction: float
    empty_reference: float
    normal: float

    def value(self, n_pred: int, n_ref: int) -> float:
        if n_pred + n_ref == 0:
            return self.no_instances
        if n_ref == 0:
            return self.empty_reference
        if n_pred == 0:
            return self.empty_prediction
        return self.normal


@dataclass(frozen=True)
class MatchedInstance:
    """One matched reference instance: its voxel count and its pair's metrics."""

    voxel_count: int
    dsc: float
    hd95: float
    nsd: float


@dataclass(frozen=True)
class GroupOutcome:
    """What :func:`score_group` found; :func:`.scoring2025.group_dict` renders it."""

    n_ref: int
    n_pred: int
    matched: tuple[MatchedInstance, ...]
    unmatched_ref_counts: tuple[int, ...]
    volume_pred: int
    volume_ref: int
    global_dsc: float
    global_hd95: float
    global_nsd: float


def _border(mask: BoolArray) -> BoolArray:
    """The voxels of ``mask`` with a 6-neighbour outside it (or outside the array):
    ``mask ^ binary_erosion(mask)`` with the cross-shaped structure."""
    padded = np.pad(mask, 1)
    interior = mask.copy()
    for axis in range(3):
        for shift in (0, 2):
            index = [slice(1, -1)] * 3
            index[axis] = slice(shift, shift + mask.shape[axis])
            interior &= padded[tuple(index)]
    return mask & ~interior


def _directed(source: npt.NDArray[np.intp], target: npt.NDArray[np.intp],
              target_tree: cKDTree, target_set: BoolArray,
              scale: npt.NDArray[np.float64] | None) -> npt.NDArray[np.float64]:
    """For each point of ``source``, the distance to the nearest point of ``target``, computed
    from integer offsets as scipy's feature transform does (scaled, squared, summed by axis)."""
    out = np.zeros(len(source), dtype=np.float64)
    away = ~target_set[tuple(source.T)]
    if not away.any():
        return out
    far = source[away]
    _, nearest = target_tree.query(far if scale is None else far * scale)
    diff = (target[nearest] - far).astype(np.float64)
    if scale is not None:
        diff *= scale
    diff *= diff
    out[away] = np.sqrt((diff[:, 0] + diff[:, 1]) + diff[:, 2])
    return out


def _surface(ref: BoolArray, pred: BoolArray, spacing: Spacing | None,
             ) -> tuple[float, float]:
    """HD95 and NSD of two non-empty masks (tolerance: the smallest spacing, 0.5 without)."""
    ref_set, pred_set = _border(ref), _border(pred)
    ref_pts, pred_pts = np.argwhere(ref_set), np.argwhere(pred_set)
    scale = None if spacing is None else np.asarray(spacing, dtype=np.float64)
    ref_tree = cKDTree(ref_pts if scale is None else ref_pts * scale)
    pred_tree = cKDTree(pred_pts if scale is None else pred_pts * scale)
    sd_ref = _directed(ref_pts, pred_pts, pred_tree, pred_set, scale)
    sd_pred = _directed(pred_pts, ref_pts, ref_tree, ref_set, scale)
    hd95 = float(np.percentile(np.hstack((sd_ref, sd_pred)), 95))
    tolerance = min(spacing) if spacing is not None else 0.5
    tp_a = np.sum(sd_ref <= tolerance) / len(sd_ref)
    tp_b = np.sum(sd_pred <= tolerance) / len(sd_pred)
    fp = np.sum(sd_ref > tolerance) / len(sd_ref)
    fn = np.sum(sd_pred > tolerance) / len(sd_pred)
    nsd = float((tp_a + tp_b) / (tp_a + tp_b + fp + fn + sys.float_info.min))
    return hd95, nsd


def _components(mask: BoolArray) -> tuple[LabelArray, int]:
    labels, count = ndimage.label(mask, structure=_FULL)
    return labels.astype(np.int32, copy=False), int(count)


def _overlaps(ref_lab: LabelArray, pred_lab: LabelArray, n_pred: int,
              ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.int64]]:
    """Every overlapping (reference, prediction) instance pair with its intersection count."""
    both = (ref_lab > 0) & (pred_lab > 0)
    codes = ref_lab[both].astype(np.int64) * (n_pred + 1) + pred_lab[both]
    values, counts = np.unique(codes, return_counts=True)
    return values // (n_pred + 1), values % (n_pred + 1), counts


def _match(n_ref: int, n_pred: int, pairs: tuple[npt.NDArray[np.intp], npt.NDArray[np.intp],
           npt.NDArray[np.int64]], ref_area: npt.NDArray[np.int64],
           pred_area: npt.NDArray[np.int64], threshold: float) -> dict[int, tuple[int, float]]:
    """Reference label -> (prediction label, Dice) of the maximum bipartite matching on Dice."""
    refs, preds, inter = pairs
    dice = 2.0 * inter.astype(np.float64) / (ref_area[refs] + pred_area[preds]).astype(
        np.float64)
    cost = np.ones((n_ref, n_pred)) * _NO_MATCH_COST
    ok = dice >= threshold
    cost[refs[ok] - 1, preds[ok] - 1] = 1.0 - dice[ok]
    dice_of = dict(zip(zip(refs.tolist(), preds.tolist(), strict=True), dice.tolist(),
                       strict=True))
    rows, cols = linear_sum_assignment(cost)
    return {int(r) + 1: (int(c) + 1, dice_of[(int(r) + 1, int(c) + 1)])
            for r, c in zip(rows, cols, strict=True) if cost[r, c] < 1.0}


def _union_box(a: tuple[slice, ...], b: tuple[slice, ...]) -> tuple[slice, ...]:
    return tuple(slice(min(x.start, y.start), max(x.stop, y.stop)) for x, y in zip(a, b,
                                                                                    strict=True))


def score_group(ref: BoolArray, pred: BoolArray, spacing: Spacing, *, threshold: float,
                rules: dict[str, EdgeRule]) -> GroupOutcome:
    """The official per-group figures of truth ``ref`` and prediction ``pred`` (boolean, same
    shape; a crop of the case is fine when nothing of either lies outside it)."""
    ref_lab, n_ref = _components(ref) if ref.any() else (np.zeros(ref.shape, np.int32), 0)
    pred_lab, n_pred = _components(pred) if pred.any() else (np.zeros(pred.shape, np.int32), 0)
    ref_area = np.bincount(ref_lab.ravel(), minlength=n_ref + 1).astype(np.int64)
    pred_area = np.bincount(pred_lab.ravel(), minlength=n_pred + 1).astype(np.int64)
    matched: list[MatchedInstance] = []
    pairs = _overlaps(ref_lab, pred_lab, n_pred) if n_ref and n_pred else None
    matching = (_match(n_ref, n_pred, pairs, ref_area, pred_area, threshold)
                if pairs is not None else {})
    if matching:
        ref_boxes = ndimage.find_objects(ref_lab)
        pred_boxes = ndimage.find_objects(pred_lab)
        for r in sorted(matching):
            p, dsc = matching[r]
            box = _union_box(ref_boxes[r - 1], pred_boxes[p - 1])
            hd95, nsd = _surface(ref_lab[box] == r, pred_lab[box] == p, spacing)
            matched.append(MatchedInstance(int(ref_area[r]), dsc, hd95, nsd))
    unmatched = tuple(int(ref_area[r]) for r in range(1, n_ref + 1) if r not in matching)
    volume_ref, volume_pred = int(ref_area[1:].sum()), int(pred_area[1:].sum())
    intersection = int(pairs[2].sum()) if pairs is not None else 0
    if intersection == 0:
        g_dsc = rules["dsc"].value(n_pred, n_ref)
        g_hd95 = rules["hd95"].value(n_pred, n_ref)
        g_nsd = rules["nsd"].value(n_pred, n_ref)
    else:
        g_dsc = float(2 * intersection / (volume_ref + volume_pred))
        g_hd95, g_nsd = _surface(ref, pred, None)
    return GroupOutcome(n_ref, n_pred, tuple(matched), unmatched, volume_pred, volume_ref,
                        g_dsc, g_hd95, g_nsd)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """The mean and (population) standard deviation of a non-empty list, as numpy sums them."""
    array = np.asarray(values, dtype=np.float64)
    return float(np.average(array)), float(np.std(array))


def voxel_volume(spacing: Spacing) -> float:
    """A voxel's volume as the official code multiplies it (``np.prod`` of the spacing)."""
    volume = float(np.prod(spacing))
    if not math.isfinite(volume):
        raise ValueError(f"spacing {spacing} has no finite voxel volume")
    return volume
