"""Orientation of raw volumes: every prepared case is RAS+ (voxel axes i, j, k increase towards
the patient's Right, Anterior and Superior, nibabel's canonical
orientation).

An axis-aligned volume stored in another orientation (BraTS files are LPS: x and y flipped) is
reoriented *losslessly*: axes are flipped and permuted, voxel values are untouched, and the
affine is updated so every voxel keeps its place in the scanner's space
(:func:`nibabel.as_closest_canonical`). An **oblique** volume (its voxel axes are rotated against
the scanner's) cannot be made RAS+ without resampling, which would change the data; it is
rejected with the reason, never resampled here.
"""

from __future__ import annotations

import nibabel as nib
import numpy as np

from .errors import CaseContractError

__all__ = ["CANONICAL_AXES", "OBLIQUE_TOLERANCE", "axis_codes", "to_ras"]

CANONICAL_AXES = ("R", "A", "S")
#: Largest off-axis component (cosine) of a voxel axis still taken as axis-aligned: 1e-4 is
#: about 0.006 degrees, float32 header rounding, far below any real obliquity.
OBLIQUE_TOLERANCE = 1e-4


def axis_codes(affine: np.ndarray) -> tuple[str, str, str]:
    """The anatomical direction of each voxel axis (``("L", "P", "S")`` for BraTS files)."""
    codes = nib.orientations.aff2axcodes(affine)  # type: ignore[no-untyped-call]
    return (str(codes[0]), str(codes[1]), str(codes[2]))


def _obliquity(affine: np.ndarray) -> float:
    """The largest off-axis direction cosine of the voxel axes (0 when axis-aligned)."""
    linear = np.asarray(affine, dtype=np.float64)[:3, :3]
    norms = np.linalg.norm(linear, axis=0)
    if not np.all(norms > 0) or not np.all(np.isfinite(linear)):
        raise CaseContractError("the affine is singular or not finite (no orientation)")
    cosines = np.abs(linear / norms)
    return float(np.max(cosines.sum(axis=0) - cosines.max(axis=0)))


def to_ras(part: str, image: nib.Nifti1Image) -> nib.Nifti1Image:
    """``image`` in RAS+ orientation, or :class:`CaseContractError` for an oblique one.

    An image already RAS+ is returned as it is; an axis-aligned one is flipped/permuted into
    RAS+ without changing any voxel value."""
    affine = np.asarray(image.affine, dtype=np.float64)
    off_axis = _obliquity(affine)
    if off_axis > OBLIQUE_TOLERANCE:
        degrees = float(np.degrees(np.arcsin(min(1.0, off_axis))))
        raise CaseContractError(
            f"{part}: oblique orientation (voxel axes about {degrees:.1f} degrees off the "
            f"scanner axes, closest {''.join(axis_codes(affine))}); only axis-aligned volumes "
            "are reoriented to RAS+ without resampling: resample the case to the benchmark's "
            "grid in RAS+ first")
    if axis_codes(affine) == CANONICAL_AXES:
        return image
    canonical = nib.as_closest_canonical(image)  # type: ignore[no-untyped-call]
    return canonical  # type: ignore[no-any-return]
