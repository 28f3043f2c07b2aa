"""Intensity normalisation shared by preparation, training and inference.

Each modality is z-scored over the brain mask (voxels where any modality is non-zero; BraTS
volumes are skull-stripped, so the background is exactly 0) and the background is set to 0.
The operation is idempotent up to rounding, so a prepared (already normalised) case can be
normalised again safely.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["brain_mask", "normalise_modalities"]

_CLIP = 30.0


def brain_mask(modalities: Mapping[str, npt.NDArray[np.floating]]) -> npt.NDArray[np.bool_]:
    """Voxels where any modality is non-zero."""
    arrays = list(modalities.values())
    mask: npt.NDArray[np.bool_] = np.asarray(arrays[0]) != 0
    for array in arrays[1:]:
        mask |= np.asarray(array) != 0
    return mask


def normalise_modalities(modalities: Mapping[str, npt.NDArray[np.floating]]) -> npt.NDArray[
    np.float32
]:
    """Stack the modalities (in mapping order) into a float32 ``[C, X, Y, Z]`` array, z-scored
    within the brain mask, clipped to +-30, background 0."""
    mask = brain_mask(modalities)
    out = np.zeros((len(modalities), *mask.shape), dtype=np.float32)
    if not mask.any():
        return out
    for channel, array in enumerate(modalities.values()):
        values = np.asarray(array, dtype=np.float32)[mask]
        mean = float(values.mean(dtype=np.float64))
        std = float(values.std(dtype=np.float64))
        scaled = (values - np.float32(mean)) / np.float32(std if std > 1e-8 else 1.0)
        out[channel][mask] = np.clip(scaled, -_CLIP, _CLIP)
    return out
