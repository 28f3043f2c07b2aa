"""Orientation of raw volumes: every prepared case is RAS+ (voxel axes i, j, k increase towards
the patient's Right, Anterior and Superior, nibabel's canonical
orientation).

An axis-aligned volume stored in another orientation (BraTS files are LPS: x and y flipped) is
reoriented *losslessly*: axes are flipped and permuted, voxel values are untouched, and the
affine is updated so every voxel keeps its place in the scanner's space
(:func:`nibabel.as_closest_canonical`). An **oblique** volume (its voxel axes are rotated against
the scanner's) cannot be made RAS+ without resampling, which would change the data; it is
rejected with the reason, never resampled here.

Before that, a raw header must say where left is (:func:`check_header_orientation`): a file with
no orientation codes (``qform_code`` and ``sform_code`` both 0) would be read in nibabel's
fallback order (LAS, radiological) and so silently flipped left-right against a file that
states RAS, and a file whose qform and sform disagree is placed differently by tools that read
one or the other. Both are refused with what was found; neither is guessed.
"""

from __future__ import annotations

import nibabel as nib
import numpy as np
import numpy.typing as npt

from .errors import CaseContractError

__all__ = ["CANONICAL_AXES", "OBLIQUE_TOLERANCE", "axis_codes", "check_header_orientation",
           "to_ras"]

CANONICAL_AXES = ("R", "A", "S")
#: Largest off-axis component (cosine) of a voxel axis still taken as axis-aligned: 1e-4 is
#: about 0.006 degrees, float32 header rounding, far below any real obliquity.
OBLIQUE_TOLERANCE = 1e-4


def axis_codes(affine: npt.NDArray[np.float64]) -> tuple[str, str, str]:
    """The anatomical direction of each voxel axis (``("L", "P", "S")`` for BraTS files)."""
    codes = nib.orientations.aff2axcodes(affine)  # type: ignore[no-untyped-call]
    return (str(codes[0]), str(codes[1]), str(codes[2]))


def _obliquity(affine: npt.NDArray[np.float64]) -> float:
    """The largest off-axis direction cosine of the voxel axes (0 when axis-aligned)."""
    linear = np.asarray(affine, dtype=np.float64)[:3, :3]
    norms = np.linalg.norm(linear, axis=0)
    if not np.all(norms > 0) or not np.all(np.isfinite(linear)):
        raise CaseContractError("the affine is singular or not finite (no orientation)")
    cosines = np.abs(linear / norms)
    return float(np.max(cosines.sum(axis=0) - cosines.max(axis=0)))


def _angle(degrees: float) -> str:
    """An angle as a reader needs it: ``10.0`` or ``0.01`` (never ``0.0`` for a real tilt)."""
    return f"{degrees:.1f}" if degrees >= 1 else f"{degrees:.2g}"


def check_header_orientation(part: str, image: nib.Nifti1Image, tolerance: float) -> None:
    """Refuse a raw header whose orientation is unknown (no qform or sform code) or ambiguous
    (qform and sform both set and more than ``tolerance`` apart); see the module's docstring."""
    header = image.header
    qform, qcode = header.get_qform(coded=True)  # type: ignore[no-untyped-call]
    sform, scode = header.get_sform(coded=True)  # type: ignore[no-untyped-call]
    if not qcode and not scode:
        fallback = "".join(axis_codes(header.get_base_affine()))  # type: ignore[no-untyped-call]
        raise CaseContractError(
            f"{part}: the header states no orientation (qform_code and sform_code are 0), so "
            f"left and right are unknown (readers would assume {fallback}); write the "
            "scanner orientation into the header (for example with nibabel: "
            "img.set_sform(affine, code=1); img.set_qform(affine, code=1)) and prepare again")
    if qcode and scode:
        apart = float(np.max(np.abs(np.asarray(qform) - np.asarray(sform))))
        if apart > tolerance:
            raise CaseContractError(
                f"{part}: the qform ({''.join(axis_codes(qform))}) and sform "
                f"({''.join(axis_codes(sform))}) disagree (by up to {apart:.3g} in the "
                "affine); tools that read one or the other place the image differently: "
                "make them agree (for example with nibabel: img.set_qform(img.get_sform(), "
                "code=1)) and prepare again")


def to_ras(part: str, image: nib.Nifti1Image) -> nib.Nifti1Image:
    """``image`` in RAS+ orientation, or :class:`CaseContractError` for an oblique one.

    An image already RAS+ is returned as it is; an axis-aligned one is flipped/permuted into
    RAS+ without changing any voxel value."""
    affine = np.asarray(image.affine, dtype=np.float64)
    off_axis = _obliquity(affine)
    if off_axis > OBLIQUE_TOLERANCE:
        degrees = float(np.degrees(np.arcsin(min(1.0, off_axis))))
        raise CaseContractError(
            f"{part}: oblique orientation (voxel axes about {_angle(degrees)} degrees off the "
            f"scanner axes, closest {''.join(axis_codes(affine))}); only axis-aligned volumes "
            "are reoriented to RAS+ without resampling: resample the case to the benchmark's "
            "grid in RAS+ first")
    if axis_codes(affine) == CANONICAL_AXES:
        return image
    canonical = nib.as_closest_canonical(image)  # type: ignore[no-untyped-call]
    return canonical  # type: ignore[no-any-return]
