# mypy: disable-error-code="no-untyped-call"
"""The benchmark's space for ingestion: the contract's grid as a SimpleITK image, the template
placed on it, and conversions between SimpleITK images and the contract's ``[X, Y, Z]`` arrays.

The grid is the one :func:`sealbench.benchmarks.brats.synthetic.brats_affine` states (RAS affine
``diag(-sx, -sy, sz)`` with origin ``(0, (Y-1) sy, 0)``), which in SimpleITK's LPS world is the
identity direction with origin ``(0, -(Y-1) sy, 0)``.

**The template.** BraTS's own space is the SRI24 atlas, which is not redistributable offline. The
template here is the MNI ICBM152 2009a nonlinear symmetric T1 and brain mask that the ``nilearn``
wheel ships (:func:`sealbench.benchmarks.brats.anatomy.load_template`, no download), placed on the
contract's grid exactly as the project's anatomy phantoms place it (BraTS axes, centred, scaled
only to fit a smaller grid; no per-seed pose). It is brain-only (skull-stripped), so the affine
registration to it runs on the extracted brain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import SimpleITK as sitk  # noqa: N813

from ..anatomy import load_template
from ..contract import BratsContract

__all__ = ["TEMPLATE_NAME", "GridTemplate", "from_array", "grid_image", "template_on_grid",
           "to_array"]

FloatArray = npt.NDArray[np.float32]
Shape3 = tuple[int, int, int]

#: What the preparation names as its template (recorded with every ingested dataset).
TEMPLATE_NAME = "MNI ICBM152 2009a nonlinear symmetric (nilearn), brain-only, on the contract grid"


def grid_image(contract: BratsContract, array: npt.NDArray[np.generic] | None = None,
               ) -> sitk.Image:
    """The contract's grid as a SimpleITK image (zeros, or ``array`` in ``[X, Y, Z]`` order)."""
    sx, sy, sz = contract.spacing_mm
    if array is None:
        array = np.zeros(contract.shape, dtype=np.float32)
    image = sitk.GetImageFromArray(np.ascontiguousarray(np.transpose(array, (2, 1, 0))))
    image.SetSpacing((float(sx), float(sy), float(sz)))
    image.SetOrigin((0.0, -(contract.shape[1] - 1) * float(sy), 0.0))
    image.SetDirection((1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
    return image


def to_array(image: sitk.Image) -> npt.NDArray[np.generic]:
    """A SimpleITK image's voxels in ``[X, Y, Z]`` order (SimpleITK's own is ``[Z, Y, X]``)."""
    return np.ascontiguousarray(np.transpose(sitk.GetArrayFromImage(image), (2, 1, 0)))


def from_array(array: npt.NDArray[np.generic], like: sitk.Image) -> sitk.Image:
    """``array`` (``[X, Y, Z]``) as an image with the geometry of ``like``."""
    image = sitk.GetImageFromArray(np.ascontiguousarray(np.transpose(array, (2, 1, 0))))
    image.CopyInformation(like)
    return image


@dataclass(frozen=True)
class GridTemplate:
    """The template's maps on a grid, ``[X, Y, Z]`` float32 in [0, 1] (T1, grey and white
    matter, brain mask), and the template millimetres per grid voxel (1 on the BraTS grid)."""

    t1: FloatArray
    gm: FloatArray
    wm: FloatArray
    mask: FloatArray
    voxel_mm: float


def _axis_linear(array: FloatArray, axis: int, coords: npt.NDArray[np.float64]) -> FloatArray:
    """``array`` sampled linearly at ``coords`` along ``axis``, zero outside ``[0, n - 1]``
    (scipy's ``mode="constant"``)."""
    n = array.shape[axis]
    valid = (coords >= 0.0) & (coords <= n - 1)
    low = np.clip(np.floor(coords), 0, max(n - 2, 0)).astype(np.intp)
    high = np.minimum(low + 1, n - 1)
    weight = np.where(valid, coords - low, 0.0).astype(np.float32)
    keep = valid.astype(np.float32)
    shape = [1, 1, 1]
    shape[axis] = len(coords)
    below = np.take(array, low, axis=axis) * ((1.0 - weight) * keep).reshape(shape)
    above = np.take(array, high, axis=axis) * (weight * keep).reshape(shape)
    out: FloatArray = (below + above).astype(np.float32)
    return out


def _diagonal_linear(array: FloatArray, diagonal: npt.NDArray[np.float64],
                     offset: npt.NDArray[np.float64], shape: Shape3) -> FloatArray:
    """What ``ndimage.affine_transform(array, diag(diagonal), offset, shape, order=1,
    mode="constant")`` gives, one axis at a time (a diagonal map is separable): a second, not
    ten, for the template's maps on the BraTS grid."""
    out = array
    for axis in range(3):
        coords = diagonal[axis] * np.arange(shape[axis], dtype=np.float64) + offset[axis]
        out = _axis_linear(out, axis, coords)
    return out


@functools.cache
def template_on_grid(shape: Shape3) -> GridTemplate:
    """The template placed on a grid of ``shape`` in the BraTS axes (cached): centred, x and y
    flipped, scaled only when its brain does not fit (as in
    :mod:`sealbench.benchmarks.brats.anatomy`, without the per-seed pose)."""
    template = load_template()
    extent = np.array(template.mask.shape, dtype=np.float64)
    scale = max(1.0, float(np.max(extent[:2] / (0.92 * np.array(shape[:2])))),
                float(extent[2] / (1.1 * shape[2])))
    matrix = np.diag([-1.0, -1.0, 1.0]) * scale
    centre_out = (np.array(shape, dtype=np.float64) - 1) / 2
    centre_in = (extent - 1) / 2
    centre_in[2] += max(0.0, extent[2] - shape[2] * scale) / 2  # crop the brainstem first
    offset = centre_in - matrix @ centre_out
    maps = {key: _diagonal_linear(getattr(template, key), np.diag(matrix), offset, shape)
            for key in ("t1", "gm", "wm", "mask")}
    return GridTemplate(t1=maps["t1"], gm=maps["gm"], wm=maps["wm"], mask=maps["mask"],
                        voxel_mm=scale)
