"""Synthetic BraTS-like cases on real brain anatomy (the MNI ICBM152 2009 template).

The anatomy is the MNI ICBM 2009a nonlinear symmetric template that the ``nilearn`` package ships
under ``nilearn/datasets/data/`` (T1, grey-matter and white-matter probability maps, 1 mm, RAS;
no download). Each case is a function of its seed:

1. **Anatomy.** The template is mapped onto the requested grid in the BraTS orientation
   (:func:`.synthetic.brats_affine`: x and y flipped) by one trilinear affine resampling: a
   per-seed isotropic scale of 0.94-1.06 (times the factor that fits the brain in smaller grids),
   rotations of up to 6 degrees about each axis and a shift of up to 3 % of the grid. The brain
   mask is the template's T1 above 20 % of its maximum (nilearn's own threshold): the case is
   skull-stripped, with exact zeros outside.
2. **Tumours.** 5 % of cases have none, 20 % have two or three separate foci, 15 % have no
   enhancing tumour. Each focus is seeded in white matter; its tumour core is the union of 2-5
   random ellipsoids cut by a smooth random field (irregular outline). The enhancing rim (ET) is
   the part of the core within a spatially varying thickness (1.5-6 mm, a smooth field) of its
   surface, the rest is necrosis (NETC); without ET, the whole core is non-enhancing. The
   surrounding FLAIR hyperintensity (SNFH) reaches up to 6-28 mm from the core, further where
   the white-matter probability is high (oedema follows white matter) and less into grey matter
   and CSF; only the part connected to the core is kept.
3. **Contrast.** Each modality mixes per-tissue mean intensities (WM, GM, CSF, NETC, SNFH, ET)
   by the tissue fractions (healthy fractions from the template's probability maps, tumour
   fractions from the labels smoothed by a 0.8-voxel Gaussian for partial volume), T1-native
   keeps the template's own T1 texture, tumour tissue gets a 10 % heterogeneity field; then a
   smooth multiplicative bias field (about 15 %), Rician noise (sigma 3 % of WM) and an
   arbitrary per-modality scale.

Labels use class indices (0 background, 1 NETC, 2 SNFH, 3 ET), like :mod:`.synthetic`, whose
:func:`~.synthetic.write_case` writes them. Mass effect (healthy tissue pushed away from the
tumour cores, :func:`_mass_effect`) is optional and off by default. Needs the ``datasets`` extra
(``nilearn``); never the enclave.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

import nibabel as nib
import numpy as np
import numpy.typing as npt
from scipy import ndimage  # type: ignore[import-untyped]

from .contract import BRATS_2023_GLI, BratsContract
from .synthetic import SyntheticCase, _draw_foci, _smooth_field, brats_affine

__all__ = ["TEMPLATE_FILES", "Template", "encode_png", "generate_anatomy_case", "load_template",
           "preview_rgb", "render_modalities"]

FloatArray = npt.NDArray[np.float32]
Shape3 = tuple[int, int, int]

#: The nilearn data files used (MNI ICBM152 2009a nonlinear symmetric, 1 mm).
TEMPLATE_FILES = {
    "t1": "mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz",
    "gm": "mni_icbm152_gm_tal_nlin_sym_09a_converted.nii.gz",
    "wm": "mni_icbm152_wm_tal_nlin_sym_09a_converted.nii.gz",
}

# Mean intensity per tissue (WM, GM, CSF, NETC, SNFH, ET) for each modality, in WM units.
_MEANS: dict[str, tuple[float, float, float, float, float, float]] = {
    "t1n": (1.00, 0.72, 0.25, 0.45, 0.68, 0.78),
    "t1c": (1.00, 0.78, 0.25, 0.42, 0.72, 1.75),
    "t2w": (0.55, 0.85, 1.90, 1.60, 1.30, 1.10),
    "t2f": (0.70, 0.92, 0.20, 1.05, 1.65, 1.30),
}


@dataclass(frozen=True)
class Template:
    """The template cropped to its brain's bounding box (+2 voxels): T1 in [0, 1], GM and WM
    probabilities in [0, 1], the brain mask, all float32 in the template's RAS voxel axes."""

    t1: FloatArray
    gm: FloatArray
    wm: FloatArray
    mask: FloatArray


@functools.cache
def load_template() -> Template:
    """Read the template from the installed ``nilearn`` package (cached)."""
    if importlib.util.find_spec("nilearn") is None:
        raise RuntimeError("anatomy-based synthetic cases need nilearn's MNI template: "
                           "pip install 'sealbench[datasets]'")
    # The data folder of nilearn.datasets, found without importing it (that imports
    # scikit-learn: five seconds of CPU for a path).
    data = resources.files("nilearn") / "datasets" / "data"
    maps: dict[str, FloatArray] = {}
    for key, name in TEMPLATE_FILES.items():
        raw = gzip.decompress((data / name).read_bytes())
        image = nib.Nifti1Image.from_bytes(raw)
        array = np.asarray(image.get_fdata(dtype=np.float32), dtype=np.float32)
        maps[key] = array / np.float32(max(float(array.max()), 1e-6))
    mask = maps["t1"] > 0.2
    lo = np.maximum(np.argwhere(mask).min(axis=0) - 2, 0)
    hi = np.argwhere(mask).max(axis=0) + 3
    box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))
    return Template(t1=maps["t1"][box], gm=maps["gm"][box], wm=maps["wm"][box],
                    mask=mask[box].astype(np.float32))


def _rotation(rng: np.random.Generator, max_degrees: float) -> npt.NDArray[np.float64]:
    ax, ay, az = np.deg2rad(rng.uniform(-max_degrees, max_degrees, 3))
    rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
    ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    out: npt.NDArray[np.float64] = rz @ ry @ rx
    return out


def _anatomy(rng: np.random.Generator, shape: Shape3) -> tuple[dict[str, FloatArray], float]:
    """The template's maps resampled onto ``shape`` (BraTS orientation); returns the maps and
    the voxel size in template millimetres (1.0 on the full grid)."""
    template = load_template()
    extent = np.array(template.mask.shape, dtype=np.float64)
    fit = max(1.0, float(np.max(extent[:2] / (0.92 * np.array(shape[:2])))),
              float(extent[2] / (1.1 * shape[2])))
    scale = fit * rng.uniform(0.94, 1.06)
    # Output voxel o -> template voxel i = M o + b; the flip puts RAS into the BraTS axes.
    flip = np.diag([-1.0, -1.0, 1.0])
    matrix = _rotation(rng, 6.0) @ flip * scale
    centre_out = (np.array(shape, dtype=np.float64) - 1) / 2
    centre_out += rng.uniform(-0.03, 0.03, 3) * np.array(shape)
    centre_in = (extent - 1) / 2
    centre_in[2] += max(0.0, extent[2] - shape[2] * scale) / 2  # crop the brainstem first
    offset = centre_in - matrix @ centre_out
    maps = {}
    for key in ("t1", "gm", "wm", "mask"):
        maps[key] = np.asarray(ndimage.affine_transform(
            getattr(template, key), matrix, offset, output_shape=shape, order=1, mode="constant",
            cval=0.0), dtype=np.float32)
    return maps, scale


def _blob_core(rng: np.random.Generator, box: Shape3, centre: npt.NDArray[np.float64],
               radius: float) -> npt.NDArray[np.bool_]:
    x, y, z = (np.arange(n, dtype=np.float32) for n in box)
    potential = np.full(box, -np.inf, dtype=np.float32)
    for _ in range(int(rng.integers(2, 6))):
        c = centre + rng.normal(0.0, radius * 0.35, 3)
        a = radius * rng.uniform(0.45, 1.0, 3)
        rho = np.sqrt(((x[:, None, None] - c[0]) / a[0]) ** 2
                      + ((y[None, :, None] - c[1]) / a[1]) ** 2
                      + ((z[None, None, :] - c[2]) / a[2]) ** 2)
        potential = np.maximum(potential, 1.0 - rho)
    potential += 0.25 * _smooth_field(rng, box, 6) + 0.08 * _smooth_field(rng, box, 14)
    core: npt.NDArray[np.bool_] = potential > 0.0
    return core


def _tumour(rng: np.random.Generator, brain: npt.NDArray[np.bool_], wm: FloatArray,
            classes: npt.NDArray[np.uint8], *, with_et: bool, voxel_mm: float) -> bool:
    """Paint one focus into ``classes`` (in place); False when there is no room for it."""
    shape: Shape3 = (brain.shape[0], brain.shape[1], brain.shape[2])
    core_r = rng.uniform(7.0, 20.0) / voxel_mm
    oedema_r = rng.uniform(6.0, 28.0) / voxel_mm
    depth = ndimage.distance_transform_edt(np.pad(brain[::2, ::2, ::2], 1))[1:-1, 1:-1, 1:-1] * 2
    ok = (depth > core_r * 1.2) & (wm[::2, ::2, ::2] > 0.5)
    if classes.any():
        free = classes[::2, ::2, ::2] == 0
        ok &= ndimage.distance_transform_edt(free) * 2 > core_r * 2 + oedema_r + 6 / voxel_mm
    candidates = np.argwhere(ok)
    if candidates.size == 0:
        return False
    centre = candidates[rng.integers(len(candidates))] * 2
    half = int(np.ceil(core_r * 1.8 + oedema_r * 1.6)) + 3
    lo = [max(0, int(c) - half) for c in centre]
    hi = [min(n, int(c) + half + 1) for c, n in zip(centre, shape, strict=True)]
    sub = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
    box: Shape3 = (hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2])
    inside = brain[sub]
    core = _blob_core(rng, box, centre - np.array(lo, dtype=np.float64), core_r) & inside
    if not core.any():
        return False
    # Oedema reaches further along white matter, less into grey matter and CSF.
    reach = oedema_r * (0.25 + 1.0 * wm[sub]) * (1.0 + 0.35 * _smooth_field(rng, box, 6))
    outside = ndimage.distance_transform_edt(~core)
    oedema = (outside <= reach) & inside & ~core
    grown, _ = ndimage.label(oedema | core, structure=np.ones((3, 3, 3), dtype=bool))
    keep = np.unique(grown[core])
    oedema &= np.isin(grown, keep[keep > 0])
    region = classes[sub]
    region[oedema & (region == 0)] = 2
    if with_et:
        thickness = (rng.uniform(1.5, 4.0) * (1.0 + 0.5 * _smooth_field(rng, box, 5))
                     / voxel_mm)
        depth_in = ndimage.distance_transform_edt(np.pad(core, 1))[1:-1, 1:-1, 1:-1]
        region[core] = 1
        region[core & (depth_in <= np.clip(thickness, 1.0, 6.0 / voxel_mm))] = 3
    else:
        region[core] = 1
    return True


def _tissues(maps: dict[str, FloatArray]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """GM, WM and CSF fractions from the probability maps (GM + WM scaled to at most 1)."""
    gm = np.clip(maps["gm"], 0.0, 1.0)
    wm = np.clip(maps["wm"], 0.0, 1.0)
    total = gm + wm
    over = total > 1.0
    gm[over] /= total[over]
    wm[over] /= total[over]
    return gm, wm, 1.0 - gm - wm


def _mass_effect(rng: np.random.Generator, classes: npt.NDArray[np.uint8],
                 brain: npt.NDArray[np.bool_], maps: dict[str, FloatArray],
                 voxel_mm: float) -> dict[str, FloatArray]:
    """``maps`` with the healthy tissue pushed away from each tumour core.

    Each core component (NETC + ET) of equivalent radius ``r`` displaces tissue radially by
    ``push = s * r`` at its surface (``s`` drawn in 0.3-0.6, at most 8 mm), decaying outside as
    ``exp(-(d - r) / (1.5 r + 10 mm))`` and shrinking linearly to 0 at its centre, so the map
    ``x -> x - u(x)`` stays one-to-one (no folding). The skull holds: the displacement fades to
    0 over the 10 mm inside the brain's edge, and the brain mask itself does not move. Maps are
    pulled back (value at ``x`` = old value at ``x - u(x)``, trilinear)."""
    core = (classes == 1) | (classes == 3)
    components, n = ndimage.label(core, structure=np.ones((3, 3, 3), dtype=bool))
    if n == 0:
        return maps
    grid = np.indices(classes.shape, dtype=np.float32)
    displacement = np.zeros_like(grid)
    decay_mm = 10.0
    for index in range(1, n + 1):
        voxels = components == index
        centre = np.array(ndimage.center_of_mass(voxels), dtype=np.float32)
        radius = float(np.cbrt(3.0 * voxels.sum() / (4.0 * np.pi)))
        push = min(rng.uniform(0.3, 0.6) * radius, 8.0 / voxel_mm)
        offset = grid - centre[:, None, None, None]
        distance = np.sqrt((offset * offset).sum(axis=0))
        outside = np.maximum(distance - radius, 0.0)
        magnitude = (push * np.exp(-outside / (1.5 * radius + decay_mm / voxel_mm))
                     * np.minimum(distance / max(radius, 1e-3), 1.0))
        displacement += offset / np.maximum(distance, 1e-3) * magnitude
    depth = ndimage.distance_transform_edt(np.pad(brain, 1))[1:-1, 1:-1, 1:-1]
    # depth 1 is the brain's outermost voxel: there the tissue does not move at all.
    displacement *= np.clip((depth - 1.0) * voxel_mm / decay_mm, 0.0, 1.0).astype(np.float32)
    source = grid - displacement
    moved = {key: value if key == "mask" else np.asarray(
        ndimage.map_coordinates(value, source, order=1, mode="nearest"), dtype=np.float32)
        for key, value in maps.items()}
    return moved


def generate_anatomy_case(seed: int, shape: Shape3 = BRATS_2023_GLI.shape,
                          contract: BratsContract = BRATS_2023_GLI, *,
                          foci: int | None = None, mass_effect: bool = False) -> SyntheticCase:
    """Generate the anatomy-based case of ``seed`` on ``shape`` (default: the BraTS grid).

    ``foci`` overrides the number of tumour foci the seed draws (0: a tumour-free case, as
    training uses to teach the model what healthy anatomy looks like); every other draw is the
    seed's own. ``mass_effect`` pushes the healthy tissue away from the tumour cores
    (:func:`_mass_effect`, its draws from a stream of its own, so the case is otherwise the
    seed's); it is off by default, so every seed's case, and the figures measured on it, stay
    as they were."""
    rng = np.random.default_rng(seed)
    maps, voxel_mm = _anatomy(rng, shape)
    brain = maps["mask"] > 0.5
    gm, wm, csf = _tissues(maps)
    classes = np.zeros(shape, dtype=np.uint8)
    wanted = _draw_foci(rng, foci)
    with_et = rng.uniform() >= 0.15
    n_lesions = sum(_tumour(rng, brain, wm, classes, with_et=with_et, voxel_mm=voxel_mm)
                    for _ in range(wanted))
    if mass_effect and n_lesions:
        maps = _mass_effect(np.random.default_rng([seed, 1]), classes, brain, maps, voxel_mm)
        gm, wm, csf = _tissues(maps)
    lesion_means = {name: _MEANS.get(name, _MEANS["t1n"])[3:] for name in contract.modalities}
    modalities = render_modalities(rng, maps, (gm, wm, csf), brain, classes, contract,
                                   lesion_means)
    classes[~brain] = 0
    return SyntheticCase(seed=seed, modalities=modalities, classes=classes,
                         affine=brats_affine(shape, contract.spacing_mm), n_lesions=n_lesions)


def render_modalities(rng: np.random.Generator, maps: dict[str, FloatArray],
                      healthy_fractions: tuple[FloatArray, FloatArray, FloatArray],
                      brain: npt.NDArray[np.bool_], classes: npt.NDArray[np.uint8],
                      contract: BratsContract, lesion_means: Mapping[str, Sequence[float]],
                      ) -> dict[str, FloatArray]:
    """The contract's modalities of a case: per-tissue means mixed by the tissue fractions
    (``healthy_fractions``: GM, WM, CSF; lesion class ``k`` (1..K) with mean
    ``lesion_means[modality][k - 1]``, its fraction the labels smoothed by a 0.8-voxel Gaussian),
    T1-native keeping the template's texture when ``maps`` has ``t1``, a 10 % heterogeneity
    field on lesions, a bias field, Rician noise and a per-modality scale; zero outside
    ``brain``. Draws from ``rng`` in a fixed order (heterogeneity, then per modality: bias,
    noise, scale)."""
    shape: Shape3 = (classes.shape[0], classes.shape[1], classes.shape[2])
    gm, wm, csf = healthy_fractions
    n_tissues = len(next(iter(lesion_means.values())))
    tumour = [np.asarray(ndimage.gaussian_filter((classes == k).astype(np.float32), 0.8),
                         dtype=np.float32) for k in range(1, n_tissues + 1)]
    rest = 1.0 - tumour[0]
    for fraction in tumour[1:]:
        rest = rest - fraction
    healthy = np.clip(rest, 0.0, 1.0)
    fractions = [wm * healthy, gm * healthy, csf * healthy, *tumour]
    heterogeneity = 1.0 + 0.10 * _smooth_field(rng, shape, 30)
    t1_texture = maps["t1"] / np.float32(max(float(np.median(maps["t1"][wm > 0.9])), 1e-3)) \
        if "t1" in maps and (wm > 0.9).any() else None
    modalities: dict[str, FloatArray] = {}
    for name in contract.modalities:
        means = _MEANS.get(name, _MEANS["t1n"])
        lesion_mean = lesion_means[name]
        if name == "t1n" and t1_texture is not None:
            image = t1_texture * healthy
        else:
            image = sum((f * np.float32(m) for f, m in zip(fractions[:3], means[:3],
                                                          strict=True)),
                        np.zeros(shape, dtype=np.float32))
        lesion = sum((f * np.float32(m)
                      for f, m in zip(fractions[3:], lesion_mean, strict=True)),
                     np.zeros(shape, dtype=np.float32))
        image = image + lesion * heterogeneity
        image *= np.exp(0.15 * _smooth_field(rng, shape, 4))
        noise = np.float32(0.03)
        real = image + rng.standard_normal(shape, dtype=np.float32) * noise
        imag = rng.standard_normal(shape, dtype=np.float32) * noise
        image = np.sqrt(real * real + imag * imag)
        image *= np.float32(rng.uniform(300.0, 1200.0))
        np.maximum(image, 1.0, out=image)
        image[~brain] = 0.0
        modalities[name] = image.astype(np.float32, copy=False)
    return modalities


_OVERLAY = {1: (220, 40, 40), 2: (40, 200, 60), 3: (250, 220, 30), 4: (40, 170, 250)}


def preview_rgb(case: SyntheticCase, z: int | None = None) -> npt.NDArray[np.uint8]:
    """An RGB strip of axial slice ``z`` (default: through the tumour's centre, else the middle):
    each modality (windowed at its 99.5th percentile in the brain), then FLAIR with the labels
    overlaid (NETC red, SNFH green, ET yellow, RC blue). Anterior is up, the patient's left is
    right."""
    if z is None:
        tumour = np.argwhere(case.classes > 0)
        z = int(np.median(tumour[:, 2])) if len(tumour) else case.classes.shape[2] // 2
    panels = []
    for image in case.modalities.values():
        plane = image[:, :, z].T
        top = float(np.percentile(image[image > 0], 99.5)) if (image > 0).any() else 1.0
        grey = np.clip(plane / max(top, 1e-6) * 255.0, 0, 255).astype(np.uint8)
        panels.append(np.repeat(grey[:, :, None], 3, axis=2))
    overlay = panels[-1].astype(np.float32)
    labels = case.classes[:, :, z].T
    for label, colour in _OVERLAY.items():
        hit = labels == label
        overlay[hit] = 0.45 * overlay[hit] + 0.55 * np.array(colour, dtype=np.float32)
    panels.append(overlay.astype(np.uint8))
    gap = np.zeros((panels[0].shape[0], 4, 3), dtype=np.uint8)
    strip: npt.NDArray[np.uint8] = np.concatenate(
        [p for panel in panels for p in (panel, gap)][:-1], axis=1)
    return strip


def encode_png(rgb: npt.NDArray[np.uint8]) -> bytes:
    """Minimal PNG (8-bit RGB, no filter) of an ``[H, W, 3]`` array, with the standard library."""
    import struct
    import zlib

    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main(argv: list[str] | None = None) -> int:
    """``python -m sealbench.benchmarks.brats.anatomy OUT_DIR SEED... [--mass-effect]``: write
    one preview PNG per seed (``synthetic-anatomy-<seed>[-mass-effect].png``)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="python -m sealbench.benchmarks.brats.anatomy",
        description="Write a preview PNG (four modalities, then FLAIR with the labels) of the "
                    "anatomy-based synthetic case of each seed.")
    parser.add_argument("out", type=Path, metavar="OUT_DIR")
    parser.add_argument("seeds", type=int, nargs="+", metavar="SEED")
    parser.add_argument("--mass-effect", action="store_true",
                        help="push healthy tissue away from the tumour cores")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "-mass-effect" if args.mass_effect else ""
    for seed in args.seeds:
        case = generate_anatomy_case(seed, mass_effect=args.mass_effect)
        (args.out / f"synthetic-anatomy-{seed}{suffix}.png").write_bytes(
            encode_png(preview_rgb(case)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
