"""Synthetic cases for the BraTS 2025 tasks: post-treatment glioma and brain metastases.

Each case is a function of its seed, labelled in class indices 0 background, 1 NETC, 2 SNFH,
3 ET, 4 RC (the 2025 label map; :func:`~.synthetic.write_case` writes them):

- **Post-treatment glioma** (:func:`generate_post_treatment_case`, ``brats-2025-gli``): a
  resection cavity (RC) of 8-22 mm radius, an irregular blob seeded in white matter, filled with
  fluid (dark on T1 and T1c, bright on T2, dark-ish on FLAIR: the suppression of fluid is
  incomplete); an enhancing rim (ET) 1.5-3.5 mm thick over a seed-drawn 40-100 % of the
  cavity's wall (15 % of cases none); residual non-enhancing tumour (NETC) beside the cavity in
  half the cases, its surface enhancing; and the surrounding FLAIR hyperintensity (SNFH),
  reaching 5-22 mm, further along white matter.
- **Metastases** (:func:`generate_metastases_case`, ``brats-2025-met``): 2-8 separate lesions
  (10 % of cases a single one), diameters log-uniform in 3-15 mm with one in 10-20 mm, seeded at
  the grey-white junction as metastases are; a lesion of 5 mm or more is ring-enhancing (an ET
  rim 1-2.5 mm thick around a necrotic, non-enhancing core), a smaller one enhances throughout;
  each with oedema (SNFH) reaching 2-6 mm plus 0.3-1.2 times its diameter, along white matter.

Two anatomies carry them: ``template`` (the MNI ICBM152 template of :mod:`.anatomy`, needs the
``datasets`` extra) and ``geometric`` (the ellipsoidal brain of :mod:`.synthetic`, no extra
dependency: what the 2025 plug-ins' demo data use, as the 2023 plug-in's do). The contrast
model is :func:`.anatomy.render_modalities` with the resection cavity's fluid added.
``python -m sealbench.benchmarks.brats.tasks2025 OUT_DIR SEED... --kind ...`` writes previews.
"""

from __future__ import annotations

from typing import Final, Literal

import numpy as np
import numpy.typing as npt
from scipy import ndimage  # type: ignore[import-untyped]

from .anatomy import _MEANS, _anatomy, _blob_core, _tissues, render_modalities
from .contract import BRATS_2025_GLI, BRATS_2025_MET, BratsContract
from .synthetic import _GM, _WM, SyntheticCase, _brain, _smooth_field, brats_affine

__all__ = ["KINDS", "Anatomy", "Kind", "generate_metastases_case", "generate_post_treatment_case",
           "generate_task_case"]

Anatomy = Literal["template", "geometric"]
Kind = Literal["post-treatment", "metastases"]
KINDS: Final[tuple[Kind, ...]] = ("post-treatment", "metastases")
FloatArray = npt.NDArray[np.float32]
Shape3 = tuple[int, int, int]
BoolArray = npt.NDArray[np.bool_]

#: The resection cavity's fluid per modality (WM units): dark on T1 and T1c, bright on T2,
#: dark-ish on FLAIR (incompletely suppressed, proteinaceous fluid).
_RC_MEANS: Final = {"t1n": 0.22, "t1c": 0.24, "t2w": 1.95, "t2f": 0.42}
_NETC, _SNFH, _ET, _RC = 1, 2, 3, 4


def _lesion_means(contract: BratsContract) -> dict[str, tuple[float, ...]]:
    return {name: (*_MEANS.get(name, _MEANS["t1n"])[3:], _RC_MEANS.get(name, 0.22))
            for name in contract.modalities}


def _maps(rng: np.random.Generator, shape: Shape3, anatomy: Anatomy,
          ) -> tuple[dict[str, FloatArray], float]:
    """Tissue maps (``gm``, ``wm``, ``mask``, and ``t1`` for the template) and the voxel size
    in millimetres of brain."""
    if anatomy == "template":
        return _anatomy(rng, shape)
    if anatomy != "geometric":
        raise ValueError(f"anatomy must be 'template' or 'geometric', received {anatomy!r}")
    brain, tissue = _brain(rng, shape)
    maps = {"gm": ((tissue == _GM) & brain), "wm": ((tissue == _WM) & brain), "mask": brain}
    smooth = {k: np.asarray(ndimage.gaussian_filter(v.astype(np.float32), 0.7), np.float32)
              for k, v in maps.items() if k != "mask"}
    smooth["mask"] = brain.astype(np.float32)
    # The ellipsoid spans about 0.78 of the grid; a brain is about 140 mm across.
    voxel_mm = max(1.0, 140.0 / (0.78 * min(shape[0], shape[1])))
    return smooth, voxel_mm


def _depth(mask: BoolArray) -> npt.NDArray[np.float64]:
    """Distance to the outside of ``mask``, on a grid halved in each axis (in full voxels)."""
    half = np.pad(mask[::2, ::2, ::2], 1)
    out: npt.NDArray[np.float64] = ndimage.distance_transform_edt(half)[1:-1, 1:-1, 1:-1] * 2
    return out


def _window(centre: npt.NDArray[np.int64], half: int, shape: Shape3,
            ) -> tuple[tuple[slice, ...], Shape3, npt.NDArray[np.float64]]:
    lo = [max(0, int(c) - half) for c in centre]
    hi = [min(n, int(c) + half + 1) for c, n in zip(centre, shape, strict=True)]
    box: Shape3 = (hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2])
    return (tuple(slice(a, b) for a, b in zip(lo, hi, strict=True)), box,
            np.asarray(centre - np.array(lo), dtype=np.float64))


def _oedema(rng: np.random.Generator, lesion: BoolArray, inside: BoolArray, wm: FloatArray,
            reach: float) -> BoolArray:
    """SNFH around ``lesion``: up to ``reach`` voxels, further along white matter, connected to
    the lesion."""
    box: Shape3 = (lesion.shape[0], lesion.shape[1], lesion.shape[2])
    limit = reach * (0.25 + 1.0 * wm) * (1.0 + 0.35 * _smooth_field(rng, box, 6))
    oedema = (ndimage.distance_transform_edt(~lesion) <= limit) & inside & ~lesion
    grown, _ = ndimage.label(oedema | lesion, structure=np.ones((3, 3, 3), dtype=bool))
    keep = np.unique(grown[lesion])
    out: BoolArray = oedema & np.isin(grown, keep[keep > 0])
    return out


def _shell(core: BoolArray, thickness: float) -> BoolArray:
    """The voxels of ``core`` within ``thickness`` voxels of its surface."""
    depth = ndimage.distance_transform_edt(np.pad(core, 1))[1:-1, 1:-1, 1:-1]
    out: BoolArray = core & (depth <= thickness)
    return out


def _cavity(rng: np.random.Generator, brain: BoolArray, wm: FloatArray,
            classes: npt.NDArray[np.uint8], voxel_mm: float) -> bool:
    """Paint one resected tumour's bed into ``classes``; False when there is no room."""
    shape: Shape3 = (brain.shape[0], brain.shape[1], brain.shape[2])
    radius = rng.uniform(8.0, 22.0) / voxel_mm
    reach = rng.uniform(5.0, 22.0) / voxel_mm
    rim = max(1.0, rng.uniform(1.5, 3.5) / voxel_mm)
    coverage = rng.uniform(-0.5, 0.4)  # a wall voxel enhances where a smooth field exceeds it
    with_et = rng.uniform() >= 0.15
    residual = rng.uniform() < 0.5
    ok = (_depth(brain) > radius * 1.1) & (wm[::2, ::2, ::2] > 0.4)
    if classes.any():
        ok &= ndimage.distance_transform_edt(classes[::2, ::2, ::2] == 0) * 2 > radius * 2 + reach
    candidates = np.argwhere(ok)
    if candidates.size == 0:
        return False
    centre = candidates[rng.integers(len(candidates))] * 2
    sub, box, local = _window(centre, int(np.ceil(radius * 1.8 + reach * 1.6)) + 3, shape)
    inside = brain[sub]
    cavity = _blob_core(rng, box, local, radius) & inside
    if not cavity.any():
        return False
    wall = (ndimage.distance_transform_edt(~cavity) <= rim) & inside & ~cavity
    wall &= _smooth_field(rng, box, 5) > coverage
    netc: BoolArray = np.zeros(box, dtype=bool)
    if residual:
        surface = np.argwhere(wall | (ndimage.binary_dilation(cavity) & ~cavity & inside))
        if len(surface):
            seed_at = surface[rng.integers(len(surface))].astype(np.float64)
            netc = _blob_core(rng, box, seed_at, rng.uniform(3.0, 8.0) / voxel_mm)
            netc &= inside & ~cavity
    enhancing = (wall | _shell(netc, rim)) & ~cavity if with_et else np.zeros(box, dtype=bool)
    lesion = cavity | netc | enhancing
    oedema = _oedema(rng, lesion, inside, wm[sub], reach)
    region = classes[sub]
    region[oedema & (region == 0)] = _SNFH
    region[netc] = _NETC
    region[enhancing] = _ET
    region[cavity] = _RC
    return True


def _metastasis(rng: np.random.Generator, brain: BoolArray, gm: FloatArray, wm: FloatArray,
                classes: npt.NDArray[np.uint8], voxel_mm: float, diameter_mm: float) -> bool:
    """Paint one metastasis of ``diameter_mm`` into ``classes``, its core apart from every
    earlier core; False when there is no room."""
    shape: Shape3 = (brain.shape[0], brain.shape[1], brain.shape[2])
    radius = max(0.75, diameter_mm / 2 / voxel_mm)
    reach = (rng.uniform(2.0, 6.0) + diameter_mm * rng.uniform(0.3, 1.2)) / voxel_mm
    thickness = max(1.0, rng.uniform(1.0, 2.5) / voxel_mm)
    ok = ((_depth(brain) > radius + 2) & (gm[::2, ::2, ::2] > 0.2)
          & (wm[::2, ::2, ::2] > 0.2))
    cores = (classes == _NETC) | (classes == _ET)
    if cores.any():
        apart = ndimage.distance_transform_edt(~cores[::2, ::2, ::2]) * 2
        ok &= apart > radius + 3 + 4.0 / voxel_mm
    candidates = np.argwhere(ok)
    if candidates.size == 0:
        return False
    centre = candidates[rng.integers(len(candidates))] * 2
    sub, box, local = _window(centre, int(np.ceil(radius * 1.5 + reach * 1.6)) + 3, shape)
    x, y, z = (np.arange(n, dtype=np.float64) for n in box)
    axes = radius * rng.uniform(0.8, 1.2, 3)
    rho = np.sqrt(((x[:, None, None] - local[0]) / axes[0]) ** 2
                  + ((y[None, :, None] - local[1]) / axes[1]) ** 2
                  + ((z[None, None, :] - local[2]) / axes[2]) ** 2)
    rho += 0.15 * _smooth_field(rng, box, 4)
    inside = brain[sub]
    core = (rho <= 1.0) & inside
    if not core.any():
        core = np.zeros(box, dtype=bool)
        core[tuple(int(np.rint(c)) for c in local)] = True  # at least the centre voxel
        core &= inside
        if not core.any():
            return False
    ring = diameter_mm >= 5.0
    enhancing = _shell(core, thickness) if ring else core
    oedema = _oedema(rng, core, inside, wm[sub], reach)
    region = classes[sub]
    region[oedema & (region == 0)] = _SNFH
    region[core] = _NETC
    region[enhancing] = _ET
    return True


def _case(seed: int, rng: np.random.Generator, maps: dict[str, FloatArray],
          classes: npt.NDArray[np.uint8], brain: BoolArray,
          healthy: tuple[FloatArray, FloatArray, FloatArray], contract: BratsContract,
          n_lesions: int) -> SyntheticCase:
    if len(contract.label_map.values) < _RC:
        raise ValueError(f"the {contract.label_map.name} label map has no resection cavity: "
                         "2025 cases need a 2025 contract")
    modalities = render_modalities(rng, maps, healthy, brain, classes, contract,
                                   _lesion_means(contract))
    classes[~brain] = 0
    shape: Shape3 = (classes.shape[0], classes.shape[1], classes.shape[2])
    return SyntheticCase(seed=seed, modalities=modalities, classes=classes,
                         affine=brats_affine(shape, contract.spacing_mm), n_lesions=n_lesions)


def generate_post_treatment_case(seed: int, shape: Shape3 = BRATS_2025_GLI.shape,
                                 contract: BratsContract = BRATS_2025_GLI, *,
                                 foci: int | None = None,
                                 anatomy: Anatomy = "template") -> SyntheticCase:
    """The post-treatment glioma case of ``seed``: one resection cavity with its rim, residual
    tumour and oedema (``foci``: that many cavities instead, 0 for a tumour-free case)."""
    rng = np.random.default_rng(seed)
    maps, voxel_mm = _maps(rng, shape, anatomy)
    brain = maps["mask"] > 0.5
    gm, wm, csf = _tissues(maps)
    classes = np.zeros(shape, dtype=np.uint8)
    wanted = 1 if foci is None else foci
    placed = sum(_cavity(rng, brain, wm, classes, voxel_mm) for _ in range(wanted))
    return _case(seed, rng, maps, classes, brain, (gm, wm, csf), contract, placed)


def _diameters(rng: np.random.Generator, foci: int | None) -> list[float]:
    """Lesion diameters in mm: one in 10-20 mm, the others log-uniform in 3-15 mm; 2-8 lesions
    (10 % of cases one), or ``foci``."""
    drawn = 1 if rng.uniform() < 0.10 else int(rng.integers(2, 9))
    count = drawn if foci is None else foci
    sizes = [float(rng.uniform(10.0, 20.0))]
    sizes += [float(np.exp(rng.uniform(np.log(3.0), np.log(15.0)))) for _ in range(8)]
    return sizes[:count] if count <= len(sizes) else sizes + [5.0] * (count - len(sizes))


def generate_metastases_case(seed: int, shape: Shape3 = BRATS_2025_MET.shape,
                             contract: BratsContract = BRATS_2025_MET, *,
                             foci: int | None = None,
                             anatomy: Anatomy = "template") -> SyntheticCase:
    """The brain metastases case of ``seed``: several separate lesions of varied size, each
    enhancing (ring-enhancing from 5 mm) with its oedema (``foci``: that many lesions
    instead, 0 for a tumour-free case)."""
    rng = np.random.default_rng(seed)
    maps, voxel_mm = _maps(rng, shape, anatomy)
    brain = maps["mask"] > 0.5
    gm, wm, csf = _tissues(maps)
    classes = np.zeros(shape, dtype=np.uint8)
    placed = sum(_metastasis(rng, brain, gm, wm, classes, voxel_mm, d)
                 for d in _diameters(rng, foci))
    return _case(seed, rng, maps, classes, brain, (gm, wm, csf), contract, placed)


def generate_task_case(kind: Kind, seed: int, shape: Shape3, contract: BratsContract, *,
                       foci: int | None = None, anatomy: Anatomy = "template") -> SyntheticCase:
    """The case of ``seed`` from the generator of ``kind``."""
    if kind == "post-treatment":
        return generate_post_treatment_case(seed, shape, contract, foci=foci, anatomy=anatomy)
    if kind == "metastases":
        return generate_metastases_case(seed, shape, contract, foci=foci, anatomy=anatomy)
    raise ValueError(f"kind must be one of {', '.join(KINDS)}, received {kind!r}")


def main(argv: list[str] | None = None) -> int:
    """``python -m sealbench.benchmarks.brats.tasks2025 OUT_DIR SEED... --kind KIND``: write one
    preview PNG per seed (``synthetic-<kind>-<seed>.png``: each modality's axial slice through
    the lesions, then FLAIR with the labels: NETC red, SNFH green, ET yellow, RC blue)."""
    import argparse
    from pathlib import Path

    from .anatomy import encode_png, preview_rgb

    parser = argparse.ArgumentParser(prog="python -m sealbench.benchmarks.brats.tasks2025",
                                     description=main.__doc__)
    parser.add_argument("out", type=Path, metavar="OUT_DIR")
    parser.add_argument("seeds", type=int, nargs="+", metavar="SEED")
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--anatomy", choices=("template", "geometric"), default="template")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    contract = BRATS_2025_GLI if args.kind == "post-treatment" else BRATS_2025_MET
    for seed in args.seeds:
        case = generate_task_case(args.kind, seed, contract.shape, contract,
                                  anatomy=args.anatomy)
        (args.out / f"synthetic-{args.kind}-{seed}.png").write_bytes(
            encode_png(preview_rgb(case)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
