"""Deterministic synthetic BraTS-like cases, for tests, demos and training the reference model.

Each case is a function of its seed: an irregular ellipsoidal brain with white matter, grey
matter and ventricles; zero, one or several blobby tumours whose potential field is cut into
surrounding FLAIR hyperintensity (SNFH), an enhancing rim (ET) and a non-enhancing core (NETC);
modality-specific intensities, a smooth multiplicative bias field, Gaussian noise and an
arbitrary per-modality scale, with exact zeros outside the brain (skull-stripped). Labels use
class indices (0 background, 1 NETC, 2 SNFH, 3 ET); :func:`write_case` writes them in the
contract's label convention with BraTS names. No real patient data is involved.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy import ndimage  # type: ignore[import-untyped]

from .cases import encode_nifti
from .contract import BRATS_2023_GLI, BratsContract

__all__ = ["SyntheticCase", "brats_affine", "case_id_for", "generate_case", "write_case",
           "write_dataset"]

FloatArray = npt.NDArray[np.float32]

# Mean intensity per tissue (WM, GM, CSF, NETC, SNFH, ET) for each modality, in WM units.
_MEANS: dict[str, tuple[float, float, float, float, float, float]] = {
    "t1n": (1.00, 0.75, 0.30, 0.45, 0.70, 0.80),
    "t1c": (1.00, 0.80, 0.30, 0.50, 0.75, 1.80),
    "t2w": (0.60, 0.85, 1.80, 1.50, 1.30, 1.10),
    "t2f": (0.70, 0.90, 0.25, 1.10, 1.70, 1.30),
}
_WM, _GM, _CSF, _NETC, _SNFH, _ET = range(6)


@dataclass(frozen=True)
class SyntheticCase:
    """One generated case: float32 modalities, class-index labels (uint8), the affine, and how
    many tumours were placed (they may touch on small grids)."""

    seed: int
    modalities: dict[str, FloatArray]
    classes: npt.NDArray[np.uint8]
    affine: npt.NDArray[np.float64]
    n_lesions: int


def brats_affine(shape: tuple[int, int, int], spacing: tuple[float, float, float]) -> npt.NDArray[
    np.float64
]:
    """The BraTS (SRI24) orientation: x and y flipped, origin at ``(0, -(Y-1), 0)`` in LPS."""
    affine = np.diag([-spacing[0], -spacing[1], spacing[2], 1.0])
    affine[1, 3] = (shape[1] - 1) * spacing[1]
    return affine


def case_id_for(index: int, timepoint: int = 0) -> str:
    """BraTS 2023 GLI case id ``BraTS-GLI-XXXXX-YYY``."""
    return f"BraTS-GLI-{index:05d}-{timepoint:03d}"


def _smooth_field(rng: np.random.Generator, shape: tuple[int, int, int], cells: int) -> FloatArray:
    """Smooth random field (zero mean, unit-ish amplitude): a coarse grid, linearly up-sampled."""
    coarse = rng.standard_normal((cells, cells, max(2, cells * shape[2] // shape[0]))).astype(
        np.float32
    )
    zoom = [s / c for s, c in zip(shape, coarse.shape, strict=True)]
    field = np.asarray(ndimage.zoom(coarse, zoom, order=1, mode="nearest", grid_mode=True),
                       dtype=np.float32)
    return field[: shape[0], : shape[1], : shape[2]]


def _grid(shape: tuple[int, int, int]) -> tuple[FloatArray, FloatArray, FloatArray]:
    x, y, z = (np.arange(n, dtype=np.float32) for n in shape)
    return x[:, None, None], y[None, :, None], z[None, None, :]


def _brain(rng: np.random.Generator, shape: tuple[int, int, int]) -> tuple[
    npt.NDArray[np.bool_], npt.NDArray[np.uint8]
]:
    x, y, z = _grid(shape)
    centre = [n / 2 - 0.5 + rng.uniform(-0.02, 0.02) * n for n in shape]
    semi = [n * rng.uniform(0.36, 0.42) for n in shape]
    rho = ((x - centre[0]) / semi[0]) ** 2 + ((y - centre[1]) / semi[1]) ** 2
    rho = rho + ((z - centre[2]) / semi[2]) ** 2
    rho += 0.08 * _smooth_field(rng, shape, 6)
    brain = rho < 1.0
    tissue = np.full(shape, _WM, dtype=np.uint8)
    tissue[(rho > 0.72 + 0.1 * _smooth_field(rng, shape, 10)) & brain] = _GM
    vent = ((x - centre[0]) / (semi[0] * 0.12)) ** 2 + ((y - centre[1]) / (semi[1] * 0.30)) ** 2
    vent = vent + ((z - centre[2] - 0.05 * shape[2]) / (semi[2] * 0.25)) ** 2
    tissue[vent < 1.0] = _CSF
    return brain, tissue


def _tumour(
    rng: np.random.Generator,
    brain: npt.NDArray[np.bool_],
    classes: npt.NDArray[np.uint8],
    *,
    with_et: bool,
    scale: float,
) -> None:
    """Paint one blobby tumour into ``classes`` (in place), inside the brain."""
    shape = brain.shape
    radius = rng.uniform(15.0, 30.0) * scale
    inner = ndimage.distance_transform_edt(np.pad(brain, 1)[::4, ::4, ::4])[1:-1, 1:-1, 1:-1] * 4
    inside = inner > radius * 1.3
    if classes.any():
        # Keep further lesions apart from earlier ones, so that they are separate lesions.
        free = np.pad(classes == 0, 1, constant_values=True)[::4, ::4, ::4][1:-1, 1:-1, 1:-1]
        apart = ndimage.distance_transform_edt(free) * 4
        inside_apart = inside & (apart > radius * 2.0 + 8)
        inside = inside_apart if inside_apart.any() else inside
    candidates = np.argwhere(inside)
    if candidates.size == 0:
        candidates = np.argwhere(inner > 0)
    centre = candidates[rng.integers(len(candidates))] * 4 + 2
    half = int(np.ceil(radius * 1.6)) + 2
    lo = [max(0, int(c) - half) for c in centre]
    hi = [min(n, int(c) + half + 1) for c, n in zip(centre, shape, strict=True)]
    sub = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
    sub_shape = tuple(b - a for a, b in zip(lo, hi, strict=True))
    x, y, z = (np.arange(a, b, dtype=np.float32) for a, b in zip(lo, hi, strict=True))
    potential = np.full(sub_shape, -np.inf, dtype=np.float32)
    for _ in range(int(rng.integers(2, 5))):
        c = centre + rng.normal(0.0, radius * 0.25, 3)
        a = radius * rng.uniform(0.6, 1.0, 3)
        rho = np.sqrt(((x[:, None, None] - c[0]) / a[0]) ** 2
                      + ((y[None, :, None] - c[1]) / a[1]) ** 2
                      + ((z[None, None, :] - c[2]) / a[2]) ** 2)
        potential = np.maximum(potential, 1.0 - rho)
    if min(sub_shape) >= 2:
        potential += 0.08 * _smooth_field(rng, (sub_shape[0], sub_shape[1], sub_shape[2]), 5)
    core_level = rng.uniform(0.35, 0.5)
    necrosis_level = core_level + rng.uniform(0.12, 0.2)
    inside = brain[sub]
    region = classes[sub]
    region[(potential > 0.0) & inside] = 2
    if with_et:
        region[(potential > core_level) & inside] = 3
        region[(potential > necrosis_level) & inside] = 1
    else:
        region[(potential > core_level) & inside] = 1


def _draw_foci(rng: np.random.Generator, foci: int | None = None) -> int:
    """The number of tumour foci: 0 for 5 % of cases, 2-3 for 20 %, else 1; or ``foci`` when
    given. The draws are made either way, so an override leaves the rest of the seed's stream
    (and so its case) as it was."""
    kind = rng.uniform()
    drawn = 0 if kind < 0.05 else (int(rng.integers(2, 4)) if kind < 0.25 else 1)
    if foci is None:
        return drawn
    if foci < 0:
        raise ValueError(f"foci must be 0 or more, received {foci}")
    return foci


def generate_case(seed: int, shape: tuple[int, int, int] = BRATS_2023_GLI.shape,
                  contract: BratsContract = BRATS_2023_GLI, *,
                  foci: int | None = None) -> SyntheticCase:
    """Generate the case of ``seed`` on ``shape`` (default: the full BraTS grid).

    About 5 % of cases have no tumour, 15 % no enhancing tumour, 20 % several lesions;
    ``foci`` overrides the number of lesions the seed draws (0: tumour-free). Tumour sizes
    scale with the grid so that small test grids still hold whole lesions.
    """
    rng = np.random.default_rng(seed)
    brain, tissue = _brain(rng, shape)
    classes = np.zeros(shape, dtype=np.uint8)
    scale = min(1.0, min(shape) / 155.0 * 1.4)
    n_lesions = _draw_foci(rng, foci)
    with_et = rng.uniform() >= 0.15
    for _ in range(n_lesions):
        _tumour(rng, brain, classes, with_et=with_et, scale=scale)
    layer = tissue.copy()
    layer[classes == 1] = _NETC
    layer[classes == 2] = _SNFH
    layer[classes == 3] = _ET
    modalities: dict[str, FloatArray] = {}
    texture = 0.05 * _smooth_field(rng, shape, 24)
    for name in contract.modalities:
        means = np.array(_MEANS.get(name, _MEANS["t1n"]), dtype=np.float32)
        image = means[layer] + texture
        image *= 1.0 + 0.15 * _smooth_field(rng, shape, 4)
        image += rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05)
        image *= np.float32(rng.uniform(300.0, 1200.0))
        np.maximum(image, 1.0, out=image)
        image[~brain] = 0.0
        modalities[name] = image
    return SyntheticCase(seed=seed, modalities=modalities, classes=classes,
                         affine=brats_affine(shape, contract.spacing_mm), n_lesions=n_lesions)


def write_case(case: SyntheticCase, out_dir: Path, case_id: str,
               contract: BratsContract = BRATS_2023_GLI, *, with_seg: bool = True) -> Path:
    """Write ``case`` as ``out_dir/<case_id>/<case_id>-<part>.nii.gz`` in the contract's naming and
    label convention; returns the case folder."""
    folder = out_dir / case_id
    folder.mkdir(parents=True, exist_ok=True)
    for name, image in case.modalities.items():
        (folder / contract.file_name(case_id, name)).write_bytes(encode_nifti(image, case.affine))
    if with_seg:
        labels = contract.label_map.from_class_indices(case.classes)
        seg_path = folder / contract.file_name(case_id, contract.seg_name)
        seg_path.write_bytes(encode_nifti(labels, case.affine))
    return folder


def write_dataset(out_dir: Path, seeds: range | list[int],
                  shape: tuple[int, int, int] | None = None,
                  contract: BratsContract = BRATS_2023_GLI) -> Iterator[str]:
    """Generate and write one case per seed (case index = seed); yields each case id."""
    grid = shape or contract.shape
    for seed in seeds:
        case_id = case_id_for(seed)
        write_case(generate_case(seed, grid, contract), out_dir, case_id, contract)
        yield case_id
