# mypy: disable-error-code="no-untyped-call"
"""Into the benchmark's space: co-registration, brain extraction, template registration,
resampling onto the contract's grid, and annotations carried without eroding thin structures.

**Why SimpleITK.** It wraps ITK's registration framework (the one ANTs and the BraTS toolkits
build on) in a wheel with no system dependency, runs offline, and takes the exact geometry
:mod:`.dicom` gives it. The steps, each recorded in :data:`DECLARED` so the dataset says how it
was prepared:

1. **Rigid co-registration** of every sequence to the reference sequence (the plug-in's: T1
   post-contrast for BraTS): Euler 3D transform, Mattes mutual information (32 bins), regular-step
   gradient descent on the images averaged into 4 mm blocks then 2 mm blocks (10 % of them
   sampled), per axis, binned once (the reference's levels serve every sequence), from the
   identity (the sequences share the scanner's frame; the patient moved a little between them).
2. **Brain extraction** on the reference grid (:class:`MorphologicalBrainExtractor`, built in,
   offline): the sequences, each scaled by its 99th percentile and averaged, thresholded; eroded
   2 mm to cut the brain from the scalp across the dark skull; the largest piece kept, dilated
   back, holes filled. A hospital with a dedicated extractor installed runs it instead
   (:class:`CommandBrainExtractor`, ``--brain-extractor`` on the command line); its first
   input is the reference sequence.
3. **Affine registration** of the extracted reference brain to the template
   (:mod:`.geometry`): centres of mass aligned, a rigid stage (4 mm blocks) then a 12-parameter
   affine stage (4 then 2 mm blocks, then the images as they are, 1 % sampled, with a smaller
   final step: :data:`_FINE`), Mattes mutual information.
4. **One resampling** per sequence onto the contract's grid through the composed transform
   (rigid then affine: never two interpolations in a row), cubic B-spline (linear blurs a 1-2
   mm enhancing rim enough to cost a model several points of ET Dice; the B-spline's overshoot
   below zero is clipped), zero outside the brain mask
   (the mask itself resampled the same way, kept above one half, and bounded by the template's
   brain grown by 5 mm: a neck or scalp the extraction reached through thin bone is cut off),
   then its outer 1 mm peeled: that rim is partial volume (dura, CSF, skull), dark in every
   sequence, and inside the mask it widens each modality's spread and lowers a lesion's
   contrast once the case is z-scored (on a phantom study, the reference model's WT Dice 0.852
   with the rim, 0.895 without, 0.977 on the truth; peeling it in the extraction instead moved
   the template registration and cost the labels' round trip 0.02 ET Dice). Only the box of
   the grown template brain is resampled, the rest of the grid is zero.
5. **Labels**: the annotation's values mapped to class indices (the mapping file's
   ``annotation_labels``), then each class's indicator resampled linearly through the same
   composed transform and the largest taken, so a 1-2 mm enhancing rim survives (nearest
   neighbour drops it where a rotated grid straddles it); only around the labels (a nearest
   neighbour resampling finds where they are).

Quality figures for the review (:class:`Registered`): per sequence, the normalised mutual
information with the reference on the grid, inside the brain (1 = unrelated, 2 = identical);
the brain mask's Dice with the template's brain and its volume in millilitres.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
import SimpleITK as sitk  # noqa: N813
from scipy import ndimage  # type: ignore[import-untyped]

from ..contract import BratsContract
from .errors import RegistrationError
from .geometry import TEMPLATE_NAME, grid_image, template_on_grid, to_array

__all__ = ["DECLARED", "BrainExtractor", "CommandBrainExtractor", "MorphologicalBrainExtractor",
           "Registered",
           "carry_labels", "register_case"]

FloatArray = npt.NDArray[np.float32]

#: The preparation this module performs, as the dataset records it.
DECLARED: Final[dict[str, object]] = {
    "co_registration": "rigid (Euler 3D) of each sequence to the reference, Mattes MI, "
                       "4 mm then 2 mm blocks, 10 % sampled (SimpleITK)",
    "template_registration": "rigid (4 mm blocks) then affine (12 parameters; 4 then 2 mm "
                             "blocks, then full resolution 1 % sampled) of the extracted "
                             "reference brain to the template, Mattes MI (SimpleITK)",
    "template": TEMPLATE_NAME,
    "resampling": "one cubic B-spline resampling per sequence through the composed transform",
    "labels": "each label's indicator resampled linearly, then the largest (argmax)",
    "brain_extraction": "built-in morphological (threshold, 2 mm erosion, largest component, "
                        "dilation, hole filling); on the grid, its outer 1 mm peeled",
    "intensities": "as acquired (rescale slope and intercept applied), zero outside the brain; "
                   "z-scored in the brain by the BraTS preparation",
}
#: Below these, the review warns.
MIN_NMI: Final = 1.05
MIN_TEMPLATE_DICE: Final = 0.85


class BrainExtractor(Protocol):
    """Brain mask (uint8 0/1, on the reference's grid) from the co-registered sequences (the
    reference sequence first)."""

    name: str

    def extract(self, images: Mapping[str, sitk.Image]) -> sitk.Image: ...


class MorphologicalBrainExtractor:
    """The built-in offline extractor (see the module's docstring, step 2). Good on heads whose
    skull is dark in every sequence; a real scan with bright marrow or fat next to the brain
    needs a dedicated extractor."""

    name = "built-in morphological"

    def __init__(self, threshold: float = 0.12, erosion_mm: float = 2.0) -> None:
        self._threshold = threshold
        self._erosion_mm = erosion_mm

    def extract(self, images: Mapping[str, sitk.Image]) -> sitk.Image:
        reference = next(iter(images.values()))
        total: FloatArray | None = None
        for image in images.values():
            array = sitk.GetArrayViewFromImage(image).astype(np.float32)
            top = float(np.percentile(array[array > 0], 99)) if (array > 0).any() else 1.0
            scaled = array / np.float32(max(top, 1e-6))
            total = scaled if total is None else total + scaled
        assert total is not None
        mask = sitk.GetImageFromArray((total / len(images) > self._threshold).astype(np.uint8))
        mask.CopyInformation(reference)
        radius = [max(1, round(self._erosion_mm / s)) for s in reference.GetSpacing()]
        eroded = sitk.BinaryErode(mask, radius)
        components = sitk.RelabelComponent(sitk.ConnectedComponent(eroded), sortByObjectSize=True)
        brain = sitk.BinaryDilate(components == 1, radius)
        brain = sitk.And(brain, mask)
        filled: sitk.Image = sitk.Cast(sitk.BinaryFillhole(brain), sitk.sitkUInt8)
        return filled


class CommandBrainExtractor:
    """A brain extractor the hospital has installed (HD-BET, SynthStrip, BET, ...), run as a
    command: ``argv`` with ``{input}`` and ``{output}`` replaced by a NIfTI of the reference
    sequence and the path where the command writes its brain mask (non-zero is brain, on the
    input's grid). Run without a shell, in a private temporary folder, with a time limit; its
    output is not shown (it may name files)."""

    def __init__(self, argv: Sequence[str], timeout_s: float = 1800.0) -> None:
        if not argv or not any("{input}" in a for a in argv) \
                or not any("{output}" in a for a in argv):
            raise ValueError("the brain extractor command must contain {input} and {output}")
        self._argv = tuple(argv)
        self._timeout_s = timeout_s
        self.name = f"command: {Path(argv[0]).name}"

    def extract(self, images: Mapping[str, sitk.Image]) -> sitk.Image:
        reference = next(iter(images.values()))
        with tempfile.TemporaryDirectory(prefix="sealbench-bet-") as tmp:
            source, target = Path(tmp) / "input.nii.gz", Path(tmp) / "mask.nii.gz"
            sitk.WriteImage(reference, str(source), True)
            argv = [a.replace("{input}", str(source)).replace("{output}", str(target))
                    for a in self._argv]
            try:
                # The hospital's own command, from its own command line: no shell.
                done = subprocess.run(argv, capture_output=True,  # noqa: S603
                                      timeout=self._timeout_s, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RegistrationError(f"the brain extractor ({self.name}) did not run: "
                                        f"{type(exc).__name__}") from exc
            if done.returncode != 0 or not target.is_file():
                raise RegistrationError(f"the brain extractor ({self.name}) failed (exit "
                                        f"{done.returncode}) or wrote no mask")
            try:
                mask = sitk.ReadImage(str(target))
            except RuntimeError as exc:
                raise RegistrationError(f"the brain extractor ({self.name}) wrote a mask that "
                                        "cannot be read") from exc
        if mask.GetSize() != reference.GetSize() or not np.allclose(
                mask.GetOrigin(), reference.GetOrigin(), atol=1e-2):
            raise RegistrationError(f"the brain extractor ({self.name}) wrote a mask on "
                                    "another grid than its input's")
        binary = sitk.GetImageFromArray((sitk.GetArrayFromImage(mask) > 0).astype(np.uint8))
        binary.CopyInformation(reference)
        return binary


@dataclass(frozen=True)
class Registered:
    """A case on the contract's grid: float32 modalities zero outside the brain, the brain mask,
    class indices (or None without annotation), and the quality figures."""

    modalities: dict[str, FloatArray]
    brain: npt.NDArray[np.bool_]
    classes: npt.NDArray[np.uint8] | None
    nmi: dict[str, float]
    template_dice: float
    brain_ml: float
    extractor: str


#: Registration levels, coarse to fine: each image is averaged into blocks of about this many
#: millimetres (per axis, so a 3 mm slice is not averaged further at 2 mm) once, not per run.
_LEVELS_MM: Final = (4.0, 2.0)


def _binned(image: sitk.Image, mm: float) -> sitk.Image:
    """``image`` as float32 averaged into blocks of about ``mm`` per axis (the geometry kept)."""
    factors = [max(1, round(mm / s)) for s in image.GetSpacing()]
    binned: sitk.Image = sitk.BinShrink(sitk.Cast(image, sitk.sitkFloat32), factors)
    return binned


def _pyramid(image: sitk.Image) -> tuple[sitk.Image, ...]:
    return tuple(_binned(image, mm) for mm in _LEVELS_MM)


def _method(iterations: int, seed: int, sampling: float, learning_rate: float,
            min_step: float, gradient_images: bool) -> sitk.ImageRegistrationMethod:
    method = sitk.ImageRegistrationMethod()
    method.SetMetricAsMattesMutualInformation(numberOfHistogramBins=32)
    method.SetMetricUseFixedImageGradientFilter(gradient_images)
    method.SetMetricUseMovingImageGradientFilter(gradient_images)
    method.SetMetricSamplingStrategy(method.RANDOM)
    method.SetMetricSamplingPercentage(sampling, seed)
    method.SetInterpolator(sitk.sitkLinear)
    method.SetOptimizerAsRegularStepGradientDescent(
        learningRate=learning_rate, minStep=min_step, numberOfIterations=iterations,
        gradientMagnitudeTolerance=1e-6)
    method.SetOptimizerScalesFromPhysicalShift()
    return method


def _run(transform: sitk.Transform, fixed: sitk.Image, moving: sitk.Image, *,
         iterations: int, seed: int, sampling: float, learning_rate: float = 1.0,
         min_step: float = 1e-3, gradient_images: bool = True) -> None:
    """One registration level on already binned images, updating ``transform`` in place
    (``gradient_images``: the metric's gradients from whole gradient images, else at the
    sampled points only)."""
    method = _method(iterations, seed, sampling, learning_rate, min_step, gradient_images)
    method.SetInitialTransform(transform, inPlace=True)
    method.Execute(fixed, moving)


#: Metric sampling per level (fraction of the fixed image's voxels): 10 % of the 4 mm blocks and
#: of the 2 mm ones (about 18,000 and 150,000 points on a 1 mm head; 5 % at 2 mm cost the
#: half-size test's enhancing rim 0.01 Dice).
_SAMPLING: Final = (0.10, 0.10)
#: The template registration's last level, on the images as they are (1 mm on the BraTS grid):
#: 1 % of the voxels (about 90,000 points), from a quarter of the coarser levels' first step
#: down to 1e-4 (a tenth of theirs), the metric's gradients taken at the sampled points (whole
#: gradient images of a 1 mm head cost more than the level's own iterations). The 2 mm levels
#: leave a tumour up to 0.4 mm off, which costs a 1-2 mm enhancing rim several points of Dice
#: in the labels' round trip (second full-size phantom study: ET 0.934 without this level,
#: 0.962 with it, 0.959 with registration seed 11; the first 0.967 and 0.972-0.973), for about
#: 2 s of CPU (5.5 s with 2 % sampled and gradient images, for the same Dice). A 2 mm
#: refinement sampled only in the template's brain did not help (0.950 on the first study).
_FINE: Final = {"sampling": 0.01, "iterations": 60, "learning_rate": 0.25, "min_step": 1e-4}


def _rigid(fixed: tuple[sitk.Image, ...], moving: sitk.Image, *, seed: int) -> sitk.Transform:
    """Rigid transform taking ``fixed``'s points (its pyramid, :func:`_pyramid`) to
    ``moving``'s, from the identity."""
    initial = sitk.Euler3DTransform()
    base = fixed[-1]
    size = np.array(base.GetSize()) - 1
    initial.SetCenter(base.TransformContinuousIndexToPhysicalPoint((size / 2).tolist()))
    try:
        for level, (f, m) in enumerate(zip(fixed, _pyramid(moving), strict=True)):
            _run(initial, f, m, iterations=60, seed=seed + level, sampling=_SAMPLING[level])
    except RuntimeError as exc:
        raise RegistrationError("rigid co-registration failed (no overlap between the "
                                "sequences?)") from exc
    return initial


def _affine(fixed: sitk.Image, moving: sitk.Image, *, seed: int) -> sitk.Transform:
    """Affine transform taking template points (``fixed``) to the reference's (``moving``)."""
    fixed_levels, moving_levels = _pyramid(fixed), _pyramid(moving)
    try:
        rigid = sitk.CenteredTransformInitializer(
            fixed_levels[0], moving_levels[0], sitk.Euler3DTransform(),
            sitk.CenteredTransformInitializerFilter.MOMENTS)
        _run(rigid, fixed_levels[0], moving_levels[0], iterations=100, seed=seed,
             sampling=_SAMPLING[0])
        affine = sitk.AffineTransform(3)
        affine.SetCenter(rigid.GetCenter())
        affine.SetMatrix(rigid.GetMatrix())
        affine.SetTranslation(rigid.GetTranslation())
        for level, (f, m) in enumerate(zip(fixed_levels, moving_levels, strict=True)):
            _run(affine, f, m, iterations=80, seed=seed + 1 + level, sampling=_SAMPLING[level])
        _run(affine, sitk.Cast(fixed, sitk.sitkFloat32), sitk.Cast(moving, sitk.sitkFloat32),
             iterations=int(_FINE["iterations"]), seed=seed + 1 + len(_LEVELS_MM),
             sampling=_FINE["sampling"], learning_rate=_FINE["learning_rate"],
             min_step=_FINE["min_step"], gradient_images=False)
    except RuntimeError as exc:
        raise RegistrationError("registration to the template failed (is the brain mask "
                                "empty or far from a head?)") from exc
    return affine


def _nmi(a: FloatArray, b: FloatArray, bins: int = 32) -> float:
    """Normalised mutual information (H(A) + H(B)) / H(A, B) of two samples."""
    if a.size < 2:
        return 1.0
    joint, _, _ = np.histogram2d(a, b, bins=bins)
    p = joint / joint.sum()

    def entropy(q: npt.NDArray[np.float64]) -> float:
        q = q[q > 0]
        return float(-(q * np.log(q)).sum())

    return (entropy(p.sum(axis=0)) + entropy(p.sum(axis=1))) / max(entropy(p), 1e-12)


def _box(mask: npt.NDArray[np.bool_], pad: int) -> tuple[slice, slice, slice] | None:
    """The bounding box of ``mask``'s voxels grown by ``pad`` (within the array), or None."""
    where = np.argwhere(mask)
    if where.size == 0:
        return None
    lo = np.maximum(where.min(axis=0) - pad, 0)
    hi = np.minimum(where.max(axis=0) + pad + 1, mask.shape)
    return (slice(int(lo[0]), int(hi[0])), slice(int(lo[1]), int(hi[1])),
            slice(int(lo[2]), int(hi[2])))


def _sub_grid(grid: sitk.Image, box: tuple[slice, slice, slice]) -> sitk.Image:
    """The part ``box`` (``[X, Y, Z]`` slices) of ``grid``, with its own origin."""
    index = [int(b.start) for b in box]
    size = [int(b.stop - b.start) for b in box]
    part: sitk.Image = sitk.RegionOfInterest(grid, size, index)
    return part


def _resample(image: sitk.Image, grid: sitk.Image, transform: sitk.Transform,
              interpolator: int, default: float, box: tuple[slice, slice, slice],
              ) -> FloatArray:
    """``image`` resampled through ``transform`` onto the part ``box`` of ``grid`` only, as a
    float32 ``[X, Y, Z]`` array of the whole grid holding ``default`` outside the box."""
    out = np.full(grid.GetSize(), default, dtype=np.float32)
    out[box] = to_array(sitk.Resample(image, _sub_grid(grid, box), transform, interpolator,
                                      default, sitk.sitkFloat32))
    return out


def carry_labels(classes: sitk.Image, transform: sitk.Transform, grid: sitk.Image,
                 n_classes: int) -> npt.NDArray[np.uint8]:
    """Class indices on ``grid`` of the class-index image ``classes``: each class's indicator
    resampled linearly through ``transform`` (grid points to ``classes``' points), then the
    largest (ties to the lower class). Only the box around the labels (found by a nearest
    neighbour resampling, grown by 3 voxels) is interpolated; the rest is background."""
    nearest = np.asarray(to_array(sitk.Resample(classes, grid, transform,
                                                sitk.sitkNearestNeighbor, 0, sitk.sitkUInt8)))
    box = _box(nearest > 0, 3)
    if box is None:
        if int(sitk.GetArrayViewFromImage(classes).max()) == 0:
            return np.zeros(grid.GetSize(), dtype=np.uint8)
        box = (slice(0, grid.GetSize()[0]), slice(0, grid.GetSize()[1]),
               slice(0, grid.GetSize()[2]))  # a structure thinner than a voxel: all of it
    scores = []
    for k in range(n_classes):
        indicator = sitk.Cast(classes == k, sitk.sitkFloat32)
        scores.append(_resample(indicator, grid, transform, sitk.sitkLinear,
                                1.0 if k == 0 else 0.0, box))
    out: npt.NDArray[np.uint8] = np.argmax(np.stack(scores), axis=0).astype(np.uint8)
    return out


def register_case(images: Mapping[str, sitk.Image], reference: str, contract: BratsContract,
                  *, annotation: sitk.Image | None = None, annotated: str | None = None,
                  extractor: BrainExtractor | None = None, seed: int = 7) -> Registered:
    """Steps 1-5 of the module's docstring for one case. ``images`` maps each modality to its
    native volume; ``annotation`` (class indices) lies on the grid of ``annotated``'s series."""
    extractor = extractor or MorphologicalBrainExtractor()
    fixed = sitk.Cast(images[reference], sitk.sitkFloat32)
    fixed_levels = _pyramid(fixed)
    rigid: dict[str, sitk.Transform] = {}
    for name, image in images.items():
        rigid[name] = sitk.Euler3DTransform() if name == reference else \
            _rigid(fixed_levels, image, seed=seed)
    order = [reference, *(name for name in images if name != reference)]
    on_reference = {name: fixed if name == reference else sitk.Resample(
        images[name], fixed, rigid[name], sitk.sitkLinear, 0.0, sitk.sitkFloat32)
        for name in order}
    mask = extractor.extract(on_reference)
    del on_reference
    brain_native = sitk.GetArrayViewFromImage(mask)
    if int(brain_native.sum()) == 0:
        raise RegistrationError("the brain extraction found no brain")
    moving = sitk.Mask(fixed, mask)
    grid = grid_image(contract, template_on_grid(contract.shape).t1)
    to_reference = _affine(grid, moving, seed=seed)
    # The template's brain, grown by 5 mm, bounds the extracted one: what the extraction kept
    # beyond it (neck, scalp reached through a thin skull) is not brain. Only its box is
    # resampled: everything outside it is zero.
    template = template_on_grid(contract.shape)
    grown = ndimage.binary_dilation(template.mask > 0.5, iterations=max(
        1, round(5.0 / template.voxel_mm / min(contract.spacing_mm))))
    box = _box(grown, 2)
    assert box is not None
    brain = _resample(sitk.Cast(mask, sitk.sitkFloat32), grid, to_reference, sitk.sitkLinear,
                      0.0, box) > 0.5
    brain &= grown
    # The 1 mm rim of partial volume (step 4), in whole voxels where a voxel is no larger than
    # it: on the BraTS grid one voxel; on a test's smaller grid (a voxel of 1.5 template mm)
    # none, as one voxel would cut into the brain (the half-size test's model then beat the
    # direct case by 0.03 TC Dice).
    rim = int(np.floor(1.0 / (template.voxel_mm * min(contract.spacing_mm)) + 1e-6))
    if rim > 0:
        brain = ndimage.binary_erosion(brain, iterations=rim)
    modalities: dict[str, FloatArray] = {}
    for name in contract.modalities:
        composed = sitk.CompositeTransform([rigid[name], to_reference])
        array = _resample(images[name], grid, composed, sitk.sitkBSpline, 0.0, box)
        array[~brain] = 0.0
        np.maximum(array, 0.0, out=array)
        modalities[name] = array
    classes = None
    if annotation is not None and annotated is not None:
        composed = sitk.CompositeTransform([rigid[annotated], to_reference])
        classes = carry_labels(annotation, composed, grid, contract.label_map.n_classes)
    ref = modalities[reference][brain]
    nmi = {name: round(_nmi(ref, modalities[name][brain]), 4) for name in contract.modalities
           if name != reference}
    t_mask = template.mask > 0.5
    dice = float(2 * (brain & t_mask).sum() / max(int(brain.sum() + t_mask.sum()), 1))
    voxel_ml = float(np.prod(contract.spacing_mm)) / 1000.0
    return Registered(modalities=modalities, brain=brain, classes=classes, nmi=nmi,
                      template_dice=round(dice, 4), brain_ml=round(float(brain.sum()) * voxel_ml,
                                                                    1),
                      extractor=extractor.name)
