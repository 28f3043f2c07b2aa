"""BraTS 2025 scoring: the official evaluator's per-case figures, from two label arrays.

The challenge's evaluation since 2025 is ``BraTS_evaluation`` 0.0.10 (Kofler et al., on
``panoptica`` 2.1.7), one configuration per task. :data:`GLI_2025` and :data:`MET_2025` are its
``config_gli.yaml`` and ``config_mets.yaml``: the label groups, the matcher (maximum bipartite
matching on Dice, threshold 1e-6), the metrics (Dice, NSD, HD95 per instance and globally) and
each metric's zero-match rule. :func:`score_case` scores one case and returns, per group, the
dictionary the official ``evaluate_single_exam`` writes (same keys, same values: see
``tests/unit/benchmarks/test_scoring2025_conformance.py``); :func:`summary_json` assembles the
official summary ``{"metrics": [...], "missings": [...]}``. The computation is our own
(:mod:`._panoptic`); the official package is a test oracle only (AGPL, never imported here).

Errors::

    BratsError
     └── InvalidPredictionError   a label outside every group, a shape or spacing mismatch
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ._panoptic import EdgeRule, GroupOutcome, Spacing, mean_std, score_group, voxel_volume
from .errors import InvalidPredictionError

__all__ = [
    "GLI_2025",
    "MET_2025",
    "OFFICIAL_HD95_PENALTY",
    "Group2025",
    "Scoring2025",
    "group_dict",
    "score_case",
    "score_stored_volumes",
    "summary_json",
]

_NAN = math.nan
_INF = math.inf
#: What the official parser reports for an infinite HD95 (the SRI24 cube's diagonal, rounded).
OFFICIAL_HD95_PENALTY: Final = 373.0


@dataclass(frozen=True)
class Group2025:
    """A label group: its name in the official output and the label values it unites."""

    name: str
    labels: tuple[int, ...]


@dataclass(frozen=True)
class Scoring2025:
    """One official task configuration (``config_<task>.yaml`` of ``BraTS_evaluation``)."""

    task: str
    source: str
    groups: tuple[Group2025, ...]
    matching_threshold: float
    #: Zero-match rule per metric (``dsc``, ``nsd``, ``hd95``), ``empty_list_std`` below.
    rules: Mapping[str, EdgeRule]
    empty_list_std: float = _NAN

    @property
    def labels(self) -> frozenset[int]:
        """Every label value a segmentation may contain (0 included): the official evaluator
        refuses a value no group names."""
        return frozenset((0, *(v for g in self.groups for v in g.labels)))


#: Dice and NSD 0 and HD95 inf when nothing is matched, NaN when neither side has an instance.
_RULES: Final = {
    "dsc": EdgeRule(no_instances=_NAN, empty_prediction=0.0, empty_reference=0.0, normal=0.0),
    "nsd": EdgeRule(no_instances=_NAN, empty_prediction=0.0, empty_reference=0.0, normal=0.0),
    "hd95": EdgeRule(no_instances=_NAN, empty_prediction=_INF, empty_reference=_INF,
                     normal=_INF),
}
_SOURCE: Final = "BraTS_evaluation 0.0.10 (panoptica 2.1.7), configs/config_{}.yaml"

#: Adult glioma, pre- and post-treatment: 1 NETC, 2 SNFH, 3 ET, 4 RC (resection cavity).
GLI_2025: Final = Scoring2025(
    task="gli", source=_SOURCE.format("gli"),
    groups=(Group2025("snfh", (2,)), Group2025("et", (3,)), Group2025("netc", (1,)),
            Group2025("rc", (4,)), Group2025("tc", (1, 3)), Group2025("wt", (1, 2, 3))),
    matching_threshold=1e-6, rules=_RULES)
#: Brain metastases: the official config scores ET, RC, TC and WT (NETC and SNFH only in unions).
MET_2025: Final = Scoring2025(
    task="mets", source=_SOURCE.format("mets"),
    groups=(Group2025("et", (3,)), Group2025("rc", (4,)), Group2025("tc", (1, 3)),
            Group2025("wt", (1, 2, 3))),
    matching_threshold=1e-6, rules=_RULES)


def _label_lut(labels: npt.NDArray[np.generic], name: str, allowed: frozenset[int],
               ) -> npt.NDArray[np.uint8]:
    """``labels`` as uint8, refused when it holds a value outside ``allowed``."""
    arr = np.asarray(labels)
    if arr.ndim != 3:
        raise InvalidPredictionError(f"the {name} is {arr.ndim}-dimensional, expected 3")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise InvalidPredictionError(f"the {name} holds non-integer values")
    elif arr.dtype.kind not in "iub":
        raise InvalidPredictionError(f"the {name} has dtype {arr.dtype}, expected integers")
    low, high = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    if low >= 0 and allowed >= set(range(high + 1)):
        unknown: list[int] = []  # every value from 0 to the largest is allowed
    else:
        present = (np.flatnonzero(np.bincount(arr.ravel(), minlength=256))
                   if arr.dtype == np.uint8 else np.unique(arr).astype(np.int64))
        unknown = sorted(set(present.tolist()) - allowed)
    if unknown:
        raise InvalidPredictionError(
            f"the {name} holds label values {unknown[:10]}, which no group of the scoring "
            f"names (allowed: {sorted(allowed)})")
    return arr if arr.dtype == np.uint8 else arr.astype(np.uint8)


def _box(any_label: npt.NDArray[np.bool_]) -> tuple[slice, ...] | None:
    """The bounding box of ``any_label`` (``None``: it is empty)."""
    box = []
    for axis in range(3):
        others = tuple(a for a in range(3) if a != axis)
        hit = np.flatnonzero(np.any(any_label, axis=others))
        if hit.size == 0:
            return None
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    return tuple(box)


def group_dict(outcome: GroupOutcome, config: Scoring2025, spacing: Spacing) -> dict[str, Any]:
    """One group's official dictionary (``PanopticaResult.to_dict(True)``'s keys, in order)."""
    n_ref, n_pred, tp = outcome.n_ref, outcome.n_pred, len(outcome.matched)
    fp, fn = n_pred - tp, n_ref - tp
    out: dict[str, Any] = {"n_ref_instances": n_ref, "n_pred_instances": n_pred, "tp": tp,
                           "fp": fp, "fn": fn}
    if tp + fp:
        out["prec"] = tp / (tp + fp)
    if tp + fn:
        out["rec"] = tp / (tp + fn)
    # Recognition quality (F1); NaN only when neither side has an instance.
    rq = tp / (tp + 0.5 * fp + 0.5 * fn) if tp else (0.0 if n_pred + n_ref else _NAN)
    out["rq"] = rq
    for key, values in (("dsc", [m.dsc for m in outcome.matched]),
                        ("hd95", [m.hd95 for m in outcome.matched]),
                        ("nsd", [m.nsd for m in outcome.matched])):
        if values:
            mean, std = mean_std(values)
        else:
            mean, std = config.rules[key].value(n_pred, n_ref), config.empty_list_std
        out[f"sq_{key}"] = mean
        out[f"sq_{key}_std"] = std
        if key == "dsc":
            out["pq_dsc"] = mean * rq
    voxel = voxel_volume(spacing)
    counts = [m.voxel_count for m in outcome.matched]
    out["instance_voxel_count_ref"] = float(np.mean(counts)) if counts else _NAN
    out["instance_volume_ref"] = (float(np.mean([float(c) * voxel for c in counts]))
                                  if counts else _NAN)
    out["global_bin_volume_pred"] = outcome.volume_pred
    out["global_bin_volume_ref"] = outcome.volume_ref
    out["global_bin_dsc"] = outcome.global_dsc
    out["global_bin_hd95"] = outcome.global_hd95
    out["global_bin_nsd"] = outcome.global_nsd
    rows: list[dict[str, Any]] = [
        {"sq_dsc": m.dsc, "sq_hd95": m.hd95, "sq_nsd": m.nsd, "voxel_count": m.voxel_count,
         "volume": float(m.voxel_count) * voxel, "is_matched": 1} for m in outcome.matched]
    rows += [{"voxel_count": c, "volume": float(c) * voxel, "is_matched": 0}
             for c in outcome.unmatched_ref_counts]
    out["reference_instances"] = rows
    return out


def score_case(prediction: npt.NDArray[np.generic], truth: npt.NDArray[np.generic],
               spacing: Sequence[float], config: Scoring2025) -> dict[str, dict[str, Any]]:
    """The official per-group dictionaries of one case: ``{group name: {key: value}}``.

    ``prediction`` and ``truth`` are label volumes of one shape; ``spacing`` is the voxel size in
    mm per axis. Raises :class:`InvalidPredictionError` for a shape mismatch, a bad spacing or a
    label value no group names (the official evaluator refuses those cases too)."""
    if len(spacing) != 3 or not all(math.isfinite(s) and s > 0 for s in spacing):
        raise InvalidPredictionError(f"spacing {tuple(spacing)} is not three positive numbers")
    space: Spacing = (float(spacing[0]), float(spacing[1]), float(spacing[2]))
    pred = _label_lut(prediction, "prediction", config.labels)
    ref = _label_lut(truth, "ground truth", config.labels)
    if pred.shape != ref.shape:
        raise InvalidPredictionError(
            f"the prediction's shape {pred.shape} is not the ground truth's {ref.shape}")
    # Every group lies in the box of what is labelled, and each in its own box within it: the
    # figures do not depend on the crop (borders see zeros outside, distances are exact).
    box = _box((ref != 0) | (pred != 0))
    empty: npt.NDArray[np.uint8] = np.zeros((1, 1, 1), dtype=np.uint8)
    ref_c, pred_c = (empty, empty) if box is None else (ref[box], pred[box])
    out: dict[str, dict[str, Any]] = {}
    for group in config.groups:
        lut = np.zeros(256, dtype=bool)
        lut[list(group.labels)] = True
        ref_g, pred_g = lut[ref_c], lut[pred_c]
        inner = _box(ref_g | pred_g)
        if inner is not None:
            ref_g, pred_g = ref_g[inner], pred_g[inner]
        outcome = score_group(ref_g, pred_g, space,
                              threshold=config.matching_threshold, rules=dict(config.rules))
        out[group.name] = group_dict(outcome, config, space)
    return out


def score_stored_volumes(prediction: npt.NDArray[np.generic], truth: npt.NDArray[np.generic],
                         zooms: Sequence[float], config: Scoring2025,
                         ) -> dict[str, dict[str, Any]]:
    """:func:`score_case` of two NIfTI volumes as the official evaluator scores their files.

    ``prediction`` and ``truth`` are the stored arrays, indexed (x, y, z) as nibabel returns
    them, and ``zooms`` the header's voxel sizes (x, y, z). The official evaluator reads files
    through SimpleITK, whose arrays are indexed (z, y, x), and passes the spacing as stored
    (x, y, z): it numbers instances in that array's raster order and, on anisotropic data,
    measures axis z with the x spacing (and x with the z one). To agree with its files exactly,
    this scores the (z, y, x) arrays with the stored spacing, as it does. On isotropic grids
    (BraTS: 1 mm) only the instance numbering differs from :func:`score_case` on (x, y, z), and
    that matters only to break ties between equally good matchings."""
    pred = np.ascontiguousarray(np.asarray(prediction).T)
    ref = np.ascontiguousarray(np.asarray(truth).T)
    return score_case(pred, ref, tuple(float(z) for z in zooms), config)


def summary_json(rows: Sequence[tuple[str, Mapping[str, Mapping[str, Any]] | str]],
                 missings: Sequence[str] = ()) -> dict[str, Any]:
    """The official summary: ``{"metrics": [{"<group>": {...}, "subject_name": name}, ...],
    "missings": [...]}``, from ``(subject name, per-group dictionaries or an error message)``
    rows (an error row is ``{"subject_name": name, "error": message}``, as the official writes
    it). ``json.dumps`` of it writes NaN and Infinity as the official file does."""
    metrics: list[dict[str, Any]] = []
    for name, result in rows:
        if isinstance(result, str):
            metrics.append({"subject_name": name, "error": result})
        else:
            metrics.append({**{k: dict(v) for k, v in result.items()}, "subject_name": name})
    return {"metrics": metrics, "missings": list(missings)}
