"""Thick-slice acquisition as a training augmentation (issue 43): a 1 mm training crop's sequence
as a clinical protocol would acquire it (an oblique stack of thick slices, each the mean of three
samples across its thickness) and resampled back onto the 1 mm grid cubically, as preparation
does. A model trained only on 1 mm volumes reads the blurred sequences of a thick-slice protocol
as less oedema; one that has seen them does not (``train.py --thick-slices``).

Each sequence of a crop gets its own geometry (:func:`draw_acquisition`): an axial, coronal or
sagittal stack tilted up to :data:`MAX_TILT_DEG` about each axis, in-plane spacing 0.8-1.2 mm,
slices 1-:data:`MAX_THICKNESS_MM` mm thick, at a random sub-voxel phase. Only numpy and scipy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import ndimage  # type: ignore[import-untyped]

__all__ = ["MARGIN", "MAX_THICKNESS_MM", "MAX_TILT_DEG", "Acquisition", "acquire_and_back",
           "draw_acquisition", "rotation"]

FloatArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float64]

MAX_TILT_DEG = 15.0
MAX_THICKNESS_MM = 4.5
#: Voxels of context around a crop that the acquisition reads: the back-resampling's cubic
#: kernel reaches two acquired voxels (up to 2 x 4.5 mm across the slices) from a crop voxel.
MARGIN = 12
#: Base orientations: columns are the stack's row, column and slice axes in the crop's frame.
_BASES = (np.eye(3), np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]),
          np.array([[0.0, 0, 1], [1, 0, 0], [0, -1, 0]]))


def rotation(degrees: tuple[float, float, float] | npt.NDArray[np.float64]) -> Matrix:
    """Rotation about x, then y, then z, by ``degrees`` (also the DICOM phantom's)."""
    ax, ay, az = np.deg2rad(degrees)
    rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
    ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    out: Matrix = rz @ ry @ rx
    return out


@dataclass(frozen=True)
class Acquisition:
    """A stack's geometry in a crop's 1 mm voxel frame: direction columns (row, column, slice
    axes), spacing in mm along them, and the grid's phase (offset of its first sample) in mm."""

    direction: Matrix
    spacing: tuple[float, float, float]
    phase: tuple[float, float, float]


def draw_acquisition(rng: np.random.Generator) -> Acquisition:
    """A random stack geometry (module docstring)."""
    base = _BASES[int(rng.integers(len(_BASES)))]
    direction = rotation(rng.uniform(-MAX_TILT_DEG, MAX_TILT_DEG, 3)) @ base
    in_plane = float(rng.uniform(0.8, 1.2))
    spacing = (in_plane, in_plane, float(rng.uniform(1.0, MAX_THICKNESS_MM)))
    phase = tuple(float(rng.uniform(0.0, s)) for s in spacing)
    return Acquisition(direction=direction, spacing=spacing,
                       phase=(phase[0], phase[1], phase[2]))


def acquire_and_back(window: FloatArray, acquisition: Acquisition, background: float = 0.0,
                     ) -> FloatArray:
    """The central ``window.shape - 2 * MARGIN`` voxels of ``window`` (one sequence, 1 mm
    voxels) acquired by ``acquisition`` and resampled back cubically. ``background`` is the
    value outside the window (the sequence's zero in the units ``window`` is in); the caller
    masks the result to the brain."""
    shape = np.array(window.shape)
    inner = shape - 2 * MARGIN
    centre = (shape - 1) / 2.0
    direction = acquisition.direction
    spacing = np.array(acquisition.spacing)
    # The stack covers the inner block (its half-extent along each of the stack's axes) and
    # two acquired voxels beyond, for the cubic kernel.
    half = np.abs(direction.T) @ ((inner - 1) / 2.0) + 2 * spacing
    first = -half + np.array(acquisition.phase) - spacing
    size = np.ceil((2 * half + spacing) / spacing).astype(int) + 1
    sub = 3 if spacing[2] > 1.5 else 1
    offsets = [-1 / 3, 0.0, 1 / 3] if sub == 3 else [0.0]
    axes = [first[a] + spacing[a] * np.arange(size[a]) for a in range(3)]
    u, v = np.meshgrid(axes[0], axes[1], indexing="ij")
    plane = np.stack([u.ravel(), v.ravel()])
    acquired = np.empty(tuple(size), dtype=np.float32)
    source = np.asarray(ndimage.spline_filter(window.astype(np.float32), order=3),
                        dtype=np.float32)
    for k, w in enumerate(axes[2]):
        total = np.zeros(plane.shape[1], dtype=np.float32)
        for t in offsets:
            stack = np.vstack([plane, np.full(plane.shape[1], w + t * spacing[2])])
            points = centre[:, None] + direction @ stack
            total += ndimage.map_coordinates(source, points, order=3, mode="constant",
                                             cval=background, prefilter=False)
        acquired[:, :, k] = (total / len(offsets)).reshape(size[0], size[1])
    grid = np.stack(np.meshgrid(*[np.arange(n, dtype=np.float64) for n in inner],
                                indexing="ij")).reshape(3, -1) + MARGIN
    index = (direction.T @ (grid - centre[:, None]) - first[:, None]) / spacing[:, None]
    back = ndimage.map_coordinates(acquired, index, order=3, mode="nearest")
    return np.asarray(back, dtype=np.float32).reshape(tuple(inner))
