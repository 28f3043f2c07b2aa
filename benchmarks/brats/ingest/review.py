"""What the hospital looks at before a case is registered: a review per case, as JSON and images.

Each ingested case gets ``review/<case>/review.json`` (:class:`CaseReview`: status, the series
used by number and geometry, the registration quality figures, the brain mask's volume, the
tumour regions' volumes, warnings) and two images: ``overview.png`` (an axial slice through the
tumour of each prepared sequence, then FLAIR with the labels: NETC red, SNFH green, ET yellow)
and ``registration.png`` (axial, coronal and sagittal slices of the prepared reference sequence
with the brain mask's outline in green and the template brain's in red: where they part, the
registration or the extraction went wrong). A rejected case has a review with its reason only.
Nothing in a review names the patient: case ids are pseudonyms, series are named by number.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict
from scipy import ndimage  # type: ignore[import-untyped]

from ..anatomy import encode_png, preview_rgb
from ..contract import REGIONS, BratsContract
from ..synthetic import SyntheticCase, brats_affine
from .register import MIN_NMI, MIN_TEMPLATE_DICE, Registered

__all__ = ["CaseReview", "SeriesUsed", "overview_png", "registration_png", "review_case"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SeriesUsed(BaseModel):
    """The series a modality came from: its number, voxels and spacing (mm)."""

    model_config = _FROZEN

    number: int
    size: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]


class CaseReview(BaseModel):
    """One case's review (``review.json``, version 1)."""

    model_config = _FROZEN

    format: Literal["sealbench/ingest-review"] = "sealbench/ingest-review"
    version: Literal[1] = 1
    case_id: str
    status: Literal["ready", "rejected"]
    reason: str = ""
    series: dict[str, SeriesUsed] = {}
    nmi_to_reference: dict[str, float] = {}
    template_dice: float | None = None
    brain_ml: float | None = None
    region_ml: dict[str, float] = {}
    warnings: tuple[str, ...] = ()
    extractor: str = ""


def review_case(case_id: str, registered: Registered, series: dict[str, SeriesUsed],
                contract: BratsContract, template_ml: float) -> CaseReview:
    """The review of a registered case, with a warning for each figure out of its range."""
    warnings: list[str] = []
    for name, value in registered.nmi.items():
        if value < MIN_NMI:
            warnings.append(f"{name}: mutual information with the reference {value:.3f} is "
                            f"below {MIN_NMI} (co-registration may have failed)")
    if registered.template_dice < MIN_TEMPLATE_DICE:
        warnings.append(f"the brain mask overlaps the template's brain with Dice "
                        f"{registered.template_dice:.3f} < {MIN_TEMPLATE_DICE} (template "
                        "registration or brain extraction may have failed)")
    if not 0.75 * template_ml <= registered.brain_ml <= 1.25 * template_ml:
        warnings.append(f"brain mask volume {registered.brain_ml:.0f} mL is far from the "
                        f"template's {template_ml:.0f} mL")
    voxel_ml = float(np.prod(contract.spacing_mm)) / 1000.0
    regions: dict[str, float] = {}
    if registered.classes is not None:
        labels = contract.label_map.from_class_indices(registered.classes)
        for region in REGIONS:
            mask = contract.label_map.region_mask(labels, region)
            regions[region] = round(float(mask.sum()) * voxel_ml, 2)
        tumour = registered.classes > 0
        outside = int((tumour & ~registered.brain).sum())
        if not tumour.any():
            warnings.append("the annotation has no tumour label on the grid")
        elif outside > 0.01 * int(tumour.sum()):
            warnings.append(f"{outside} labelled voxels lie outside the brain mask")
    return CaseReview(case_id=case_id, status="ready", series=series,
                      nmi_to_reference=registered.nmi, template_dice=registered.template_dice,
                      brain_ml=registered.brain_ml, region_ml=regions,
                      warnings=tuple(warnings), extractor=registered.extractor)


def overview_png(registered: Registered, contract: BratsContract) -> bytes:
    """Each prepared sequence through the tumour, then FLAIR with the labels."""
    classes = registered.classes if registered.classes is not None else \
        np.zeros(contract.shape, dtype=np.uint8)
    case = SyntheticCase(seed=0, modalities=registered.modalities, classes=classes,
                         affine=brats_affine(contract.shape, contract.spacing_mm), n_lesions=0)
    return encode_png(preview_rgb(case))


def _outline(mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = mask & ~ndimage.binary_erosion(mask)
    return out


def registration_png(registered: Registered, reference: str, template_mask: npt.NDArray[
        np.float32]) -> bytes:
    """Three planes of the prepared reference with the brain mask's (green) and the template
    brain's (red) outlines."""
    image = registered.modalities[reference]
    top = float(np.percentile(image[image > 0], 99.5)) if (image > 0).any() else 1.0
    template = template_mask > 0.5
    centre = [int(c) for c in ndimage.center_of_mass(registered.brain)] \
        if registered.brain.any() else [n // 2 for n in image.shape]
    panels = []
    for axis in (2, 1, 0):
        index = [slice(None)] * 3
        index[axis] = slice(centre[axis], centre[axis] + 1)
        plane = np.squeeze(image[tuple(index)])
        grey = np.clip(plane / max(top, 1e-6) * 255.0, 0, 255).astype(np.uint8)
        rgb = np.repeat(grey[:, :, None], 3, axis=2)
        rgb[_outline(np.squeeze(template[tuple(index)]))] = (230, 40, 40)
        rgb[_outline(np.squeeze(registered.brain[tuple(index)]))] = (40, 220, 60)
        panels.append(np.ascontiguousarray(np.flipud(np.transpose(rgb, (1, 0, 2)))))
    height = max(p.shape[0] for p in panels)
    padded = [np.pad(p, ((0, height - p.shape[0]), (0, 4), (0, 0))) for p in panels]
    return encode_png(np.concatenate(padded, axis=1))
