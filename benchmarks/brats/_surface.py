"""Surface distances and the robust (percentile) Hausdorff distance, as DeepMind's
``surface-distance`` defines them and the BraTS 2023+ scorer uses them.

Both masks are cropped to the bounding box of their union (plus one voxel of zero padding at
the far end). Each 2x2x2 neighbourhood on the voxel-corner grid gets a code; codes other than
0 and 255 are surface elements (surfels), weighted by their marching-cubes area for the given
spacing. Distances are Euclidean distance transforms (mm) to the other mask's surfels. The
robust Hausdorff distance at ``percent`` is, per direction, the distance at which the cumulative
surfel-area fraction first reaches ``percent/100`` (distances sorted, ties by area, exactly as
the reference sorts them); the result is the maximum of the two directions. An empty side gives
``inf``; both empty gives ``inf`` here too (callers apply the BraTS empty-mask policy first).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import ndimage  # type: ignore[import-untyped]

from ._surface_tables import ENCODE_NEIGHBOURHOOD_3D_KERNEL, NEIGHBOUR_CODE_TO_NORMALS

__all__ = ["SurfaceDistances", "robust_hausdorff", "surface_distances"]

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

_KERNEL = np.array(ENCODE_NEIGHBOURHOOD_3D_KERNEL, dtype=np.uint8)


@dataclass(frozen=True)
class SurfaceDistances:
    """Surfel distances (sorted ascending) and areas in both directions."""

    distances_gt_to_pred: FloatArray
    distances_pred_to_gt: FloatArray
    surfel_areas_gt: FloatArray
    surfel_areas_pred: FloatArray


@lru_cache(maxsize=16)
def _area_table(spacing: tuple[float, float, float]) -> FloatArray:
    table = np.zeros(256, dtype=np.float64)
    for code in range(256):
        normals = np.array(NEIGHBOUR_CODE_TO_NORMALS[code], dtype=np.float64)
        total = 0.0
        for normal in normals:
            n = np.zeros(3)
            n[0] = normal[0] * spacing[1] * spacing[2]
            n[1] = normal[1] * spacing[0] * spacing[2]
            n[2] = normal[2] * spacing[0] * spacing[1]
            total += float(np.linalg.norm(n))
        table[code] = total
    table.setflags(write=False)
    return table


def _bbox(mask: BoolArray) -> tuple[slice, ...] | None:
    slices = ndimage.find_objects(mask.view(np.uint8) if mask.dtype == np.bool_ else mask)
    return slices[0] if slices and slices[0] is not None else None


def _sorted(distances: FloatArray, areas: FloatArray) -> tuple[FloatArray, FloatArray]:
    order = np.lexsort((areas, distances))
    return distances[order], areas[order]


def surface_distances(mask_gt: BoolArray, mask_pred: BoolArray,
                      spacing_mm: tuple[float, float, float]) -> SurfaceDistances:
    """Surface distances between two boolean masks of the same shape (3D)."""
    if mask_gt.shape != mask_pred.shape or mask_gt.ndim != 3:
        raise ValueError(f"expected two 3D masks of one shape, got {mask_gt.shape} and "
                         f"{mask_pred.shape}")
    gt = np.asarray(mask_gt, dtype=bool)
    pred = np.asarray(mask_pred, dtype=bool)
    box = _bbox(gt | pred)
    empty = np.array([], dtype=np.float64)
    if box is None:
        return SurfaceDistances(empty, empty, empty, empty)
    crop_shape = tuple(s.stop - s.start + 1 for s in box)
    table = _area_table((float(spacing_mm[0]), float(spacing_mm[1]), float(spacing_mm[2])))
    codes, borders = [], []
    for mask in (gt, pred):
        crop = np.zeros(crop_shape, dtype=np.uint8)
        crop[:-1, :-1, :-1] = mask[box]
        code = ndimage.correlate(crop, _KERNEL, mode="constant", cval=0)
        codes.append(code)
        borders.append((code != 0) & (code != 255))
    dist = []
    for border in borders:
        if border.any():
            dist.append(ndimage.distance_transform_edt(~border, sampling=spacing_mm))
        else:
            dist.append(np.full(crop_shape, np.inf))
    d_gt_to_pred = dist[1][borders[0]]
    d_pred_to_gt = dist[0][borders[1]]
    a_gt = table[codes[0][borders[0]]]
    a_pred = table[codes[1][borders[1]]]
    d_gt_to_pred, a_gt = _sorted(d_gt_to_pred, a_gt)
    d_pred_to_gt, a_pred = _sorted(d_pred_to_gt, a_pred)
    return SurfaceDistances(d_gt_to_pred, d_pred_to_gt, a_gt, a_pred)


def _directed(distances: FloatArray, areas: FloatArray, percent: float) -> float:
    if len(distances) == 0:
        return float("inf")
    cumulative = np.cumsum(areas) / np.sum(areas)
    idx = int(np.searchsorted(cumulative, percent / 100.0))
    return float(distances[min(idx, len(distances) - 1)])


def robust_hausdorff(sd: SurfaceDistances, percent: float = 95.0) -> float:
    """Maximum over both directions of the area-weighted ``percent``-th distance (mm)."""
    return max(_directed(sd.distances_gt_to_pred, sd.surfel_areas_gt, percent),
               _directed(sd.distances_pred_to_gt, sd.surfel_areas_pred, percent))
