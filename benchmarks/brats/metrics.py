"""Per-case BraTS metrics: legacy (whole-region) and lesion-wise scores for WT, TC and ET.

The definitions follow the BraTS 2023 scorer (``BraTS-2023-Metrics``; see
``docs/benchmarks.md``):

* Dice, sensitivity and specificity from voxel counts over the whole grid; both empty gives
  Dice 1 and sensitivity 1; one empty gives Dice 0.
* HD95 is DeepMind's robust Hausdorff distance (area-weighted surfels, maximum of the two
  directions, :mod:`._surface`); both empty gives 0, one empty gives the penalty (374 mm).
* Lesion-wise: ground-truth components (26-connectivity) lying in one component of the GT
  dilated ``lesion_dilation`` times (3x3x3 cross-and-edges structure) form one lesion; predicted
  components (26-connectivity) touching a lesion's dilation are its matches; unmatched predicted
  components are false positives. Lesions of volume <= ``lesion_volume_threshold_mm3`` are
  dropped. Dice = sum(D_i) / (L + FP); HD95 = (sum(H_i) + penalty * FP) / (L + FP), with
  unmatched lesions scoring D=0, H=penalty; L + FP = 0 gives Dice 1, HD95 0.

Every value returned is finite. A prediction that cannot be scored becomes a
:class:`CaseFailure`, penalised (Dice 0, HD95 374, sensitivity 0, specificity 0) and flagged.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from scipy import ndimage  # type: ignore[import-untyped]

from ._surface import robust_hausdorff, surface_distances
from .contract import BRATS2023_LABELS, REGIONS, LabelMap, Region
from .errors import InvalidPredictionError

__all__ = [
    "BRATS_2023_GLI_METRICS",
    "CaseFailure",
    "CaseResult",
    "CaseScores",
    "MetricsSpec",
    "RegionScores",
    "score_case",
    "score_or_fail",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_CC26 = np.ones((3, 3, 3), dtype=bool)
_DILATION = ndimage.generate_binary_structure(3, 2)

BoolArray = npt.NDArray[np.bool_]
Spacing = tuple[float, float, float]


class MetricsSpec(BaseModel):
    """Versioned metric definition a benchmark publishes (BraTS 2023 GLI parameters by default)."""

    model_config = _FROZEN

    metrics_id: Literal["sealbench/brats-lesionwise"] = "sealbench/brats-lesionwise"
    version: Literal[1] = 1
    label_map: LabelMap = BRATS2023_LABELS
    regions: tuple[Region, ...] = REGIONS
    hd_percentile: float = Field(default=95.0, gt=0, le=100)
    hd95_penalty_mm: float = Field(default=374.0, gt=0)
    lesion_dilation: int = Field(default=3, ge=0)
    lesion_volume_threshold_mm3: float = Field(default=50.0, ge=0)
    connectivity: Literal[26] = 26


BRATS_2023_GLI_METRICS = MetricsSpec()


class RegionScores(BaseModel):
    """All metrics of one region of one case (finite floats; volumes in mm^3)."""

    model_config = _FROZEN

    dice: float
    hd95: float
    sensitivity: float
    specificity: float
    lesion_dice: float
    lesion_hd95: float
    num_tp: int
    num_fp: int
    num_fn: int
    gt_volume_mm3: float
    pred_volume_mm3: float


class CaseScores(BaseModel):
    """Scores of one case, per region."""

    model_config = _FROZEN

    kind: Literal["scores"] = "scores"
    case_id: str
    regions: dict[Region, RegionScores]

    @property
    def failed(self) -> bool:
        """False: the case was scored."""
        return False

    def to_json(self) -> dict[str, object]:
        """The result as a JSON object (the per-case wire format)."""
        return self.model_dump(mode="json")


class CaseFailure(BaseModel):
    """A case whose prediction was missing, unreadable or invalid: flagged and penalised."""

    model_config = _FROZEN

    kind: Literal["failure"] = "failure"
    case_id: str
    reason: str
    flagged: Literal[True] = True

    @property
    def failed(self) -> bool:
        """True: the case is flagged and penalised."""
        return True

    def to_json(self) -> dict[str, object]:
        """The failure as a JSON object (the per-case wire format)."""
        return self.model_dump(mode="json")

    def penalised(self, spec: MetricsSpec) -> dict[Region, RegionScores]:
        """The scores this failure counts as in aggregates (the Synapse scorers' penalty)."""
        row = RegionScores(dice=0.0, hd95=spec.hd95_penalty_mm, sensitivity=0.0,
                           specificity=0.0, lesion_dice=0.0, lesion_hd95=spec.hd95_penalty_mm,
                           num_tp=0, num_fp=0, num_fn=0, gt_volume_mm3=0.0, pred_volume_mm3=0.0)
        return dict.fromkeys(spec.regions, row)


CaseResult = CaseScores | CaseFailure


def _hd95(gt: BoolArray, pred: BoolArray, spec: MetricsSpec, spacing: Spacing) -> float:
    gt_any, pred_any = bool(gt.any()), bool(pred.any())
    if not gt_any and not pred_any:
        return 0.0
    if not gt_any or not pred_any:
        return spec.hd95_penalty_mm
    value = robust_hausdorff(surface_distances(gt, pred, spacing), spec.hd_percentile)
    return value if math.isfinite(value) else spec.hd95_penalty_mm


def _dice(gt: BoolArray, pred: BoolArray) -> float:
    total = int(np.count_nonzero(gt)) + int(np.count_nonzero(pred))
    if total == 0:
        return 1.0
    return 2.0 * int(np.count_nonzero(gt & pred)) / total


def _union(a: tuple[slice, ...], b: tuple[slice, ...]) -> tuple[slice, ...]:
    return tuple(slice(min(x.start, y.start), max(x.stop, y.stop)) for x, y in zip(a, b,
                                                                                    strict=True))


def _lesion_wise(gt: BoolArray, pred: BoolArray, spec: MetricsSpec,
                 spacing: Spacing) -> tuple[float, float, int, int, int]:
    """(lesion Dice, lesion HD95, TP, FP, FN) of one region; inputs may be cropped."""
    voxel_mm3 = float(np.prod(spacing))
    penalty = spec.hd95_penalty_mm
    pred_cc, _ = ndimage.label(pred, structure=_CC26)
    if spec.lesion_dilation > 0 and gt.any():
        dilated = ndimage.binary_dilation(gt, structure=_DILATION,
                                          iterations=spec.lesion_dilation)
    else:
        dilated = gt
    # Lesion i = GT voxels inside dilated component i; dilate(lesion i) is that component.
    dil_cc, n_lesions = ndimage.label(dilated, structure=_CC26)
    dil_boxes = ndimage.find_objects(dil_cc)
    pred_boxes = ndimage.find_objects(pred_cc)
    matched: set[int] = set()
    dice_sum, hd_sum, kept, tp, fn = 0.0, 0.0, 0, 0, 0
    for lesion in range(1, n_lesions + 1):
        box = dil_boxes[lesion - 1]
        if box is None:
            continue
        in_dilation = dil_cc[box] == lesion
        hits = np.unique(pred_cc[box][in_dilation])
        hits = hits[hits != 0]
        matched.update(int(h) for h in hits)
        for h in hits:
            hit_box = pred_boxes[int(h) - 1]
            if hit_box is not None:
                box = _union(box, hit_box)
        gt_i = (dil_cc[box] == lesion) & gt[box]
        pred_i = np.isin(pred_cc[box], hits) if hits.size else np.zeros_like(gt_i)
        volume = float(np.count_nonzero(gt_i)) * voxel_mm3
        if volume <= spec.lesion_volume_threshold_mm3:
            continue
        kept += 1
        if hits.size:
            tp += 1
            dice_sum += _dice(gt_i, pred_i)
            hd_sum += _hd95(gt_i, pred_i, spec, spacing)
        else:
            fn += 1
            hd_sum += penalty
    fp = len(pred_boxes) - len(matched)
    denominator = kept + fp
    if denominator == 0:
        return 1.0, 0.0, tp, fp, fn
    return dice_sum / denominator, (hd_sum + penalty * fp) / denominator, tp, fp, fn


def _crop_box(gt: BoolArray, pred: BoolArray, margin: int) -> tuple[slice, ...] | None:
    objects = ndimage.find_objects((gt | pred).view(np.uint8))
    if not objects or objects[0] is None:
        return None
    return tuple(slice(max(0, s.start - margin), min(n, s.stop + margin))
                 for s, n in zip(objects[0], gt.shape, strict=True))


def _score_region(gt: BoolArray, pred: BoolArray, spec: MetricsSpec,
                  spacing: Spacing) -> RegionScores:
    voxel_mm3 = float(np.prod(spacing))
    n_total = gt.size
    box = _crop_box(gt, pred, spec.lesion_dilation + 2)
    if box is None:
        return RegionScores(dice=1.0, hd95=0.0, sensitivity=1.0, specificity=1.0,
                            lesion_dice=1.0, lesion_hd95=0.0, num_tp=0, num_fp=0, num_fn=0,
                            gt_volume_mm3=0.0, pred_volume_mm3=0.0)
    g, p = gt[box], pred[box]
    n_gt, n_pred = int(np.count_nonzero(g)), int(np.count_nonzero(p))
    n_tp = int(np.count_nonzero(g & p))
    n_fp, n_fn = n_pred - n_tp, n_gt - n_tp
    n_tn = n_total - n_tp - n_fp - n_fn
    # GaNDLF/BraTS: TP / (TP + FN), 0 when the GT is empty, 1 when both are empty.
    sensitivity = n_tp / (n_tp + n_fn) if n_tp + n_fn else float(n_pred == 0)
    specificity = n_tn / (n_tn + n_fp) if n_tn + n_fp else 0.0
    lesion_dice, lesion_hd95, tp, fp, fn = _lesion_wise(g, p, spec, spacing)
    return RegionScores(
        dice=_dice(g, p), hd95=_hd95(g, p, spec, spacing), sensitivity=sensitivity,
        specificity=specificity, lesion_dice=lesion_dice, lesion_hd95=lesion_hd95,
        num_tp=tp, num_fp=fp, num_fn=fn, gt_volume_mm3=n_gt * voxel_mm3,
        pred_volume_mm3=n_pred * voxel_mm3,
    )


def _check_labels(name: str, labels: npt.NDArray[np.generic], label_map: LabelMap) -> None:
    if not np.issubdtype(labels.dtype, np.integer):
        raise InvalidPredictionError(f"{name} must hold integer labels, received dtype "
                                     f"{labels.dtype}")
    present = {int(v) for v in np.unique(labels)}
    unknown = present - label_map.allowed_values
    if unknown:
        raise InvalidPredictionError(f"{name} has labels {sorted(unknown)} outside the "
                                f"{label_map.name} map {sorted(label_map.allowed_values)}")


def score_case(prediction: npt.NDArray[np.generic], ground_truth: npt.NDArray[np.generic],
               spec: MetricsSpec, spacing: Spacing, *, case_id: str = "") -> CaseScores:
    """Score one predicted label map against its ground truth (same grid, the spec's label
    convention). Raises :class:`InvalidPredictionError` when the two cannot be compared."""
    if prediction.shape != ground_truth.shape or prediction.ndim != 3:
        raise InvalidPredictionError(f"prediction shape {prediction.shape} differs from the ground "
                                f"truth's {ground_truth.shape}")
    _check_labels("prediction", prediction, spec.label_map)
    _check_labels("ground truth", ground_truth, spec.label_map)
    pred = prediction.astype(np.uint8, copy=False)
    gt = ground_truth.astype(np.uint8, copy=False)
    regions = {
        region: _score_region(spec.label_map.region_mask(gt, region),
                              spec.label_map.region_mask(pred, region), spec, spacing)
        for region in spec.regions
    }
    return CaseScores(case_id=case_id, regions=regions)


def score_or_fail(case_id: str, prediction: npt.NDArray[np.generic] | None,
                  ground_truth: npt.NDArray[np.generic], spec: MetricsSpec,
                  spacing: Spacing) -> CaseResult:
    """:func:`score_case`, or a flagged :class:`CaseFailure` for a missing or invalid
    prediction (the reason names what was wrong, never a value from the images)."""
    if prediction is None:
        return CaseFailure(case_id=case_id, reason="prediction missing")
    try:
        return score_case(prediction, ground_truth, spec, spacing, case_id=case_id)
    except InvalidPredictionError as exc:
        return CaseFailure(case_id=case_id, reason=str(exc))
