"""The BraTS data contract: what a case is (modalities, grid, file names) and what its labels mean.

A :class:`BratsContract` is a versioned wire object published with the benchmark definition. Its
:class:`LabelMap` says which integer is which tissue and derives the evaluated regions
(WT whole tumour, TC tumour core, ET enhancing tumour) from it, so the same code scores the
BraTS 2023+ convention {1 NETC, 2 SNFH, 3 ET} and the BraTS 2017-2022 one {1 NCR, 2 ED, 4 ET};
the BraTS 2025 convention adds a fourth tissue, {4 RC} (resection cavity).

Models always work in *class indices* 0..K (background, non-enhancing core, surrounding FLAIR
hyperintensity, enhancing tumour, and for 2025 resection cavity);
:meth:`LabelMap.from_class_indices` turns them into the contract's label values.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BRATS2021_LABELS",
    "BRATS2023_LABELS",
    "BRATS2025_LABELS",
    "BRATS_2023_GLI",
    "BRATS_2023_GLI_SMALL",
    "BRATS_2025_GLI",
    "BRATS_2025_MET",
    "REGIONS",
    "BratsContract",
    "LabelMap",
    "Region",
]

Region = Literal["WT", "TC", "ET"]
REGIONS: tuple[Region, ...] = ("WT", "TC", "ET")

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class LabelMap(BaseModel):
    """Integer label of each tissue, in class-index order (background first).

    ``tissues`` names the tissues of class indices 1..K (3, or 4 with the 2025 resection
    cavity); ``values`` gives their label values; ``regions`` lists the label values that make up
    WT, TC and ET.
    """

    model_config = _FROZEN

    name: Literal["brats2023", "brats2021", "brats2025"]
    tissues: tuple[str, ...]
    values: tuple[int, ...]
    regions: dict[Region, tuple[int, ...]]

    @model_validator(mode="after")
    def _check(self) -> LabelMap:
        k = len(self.values)
        if k not in (3, 4) or len(self.tissues) != k:
            raise ValueError(f"a label map names 3 or 4 tissues, one value each: {self.tissues} "
                             f"-> {self.values}")
        if len(set(self.values)) != k or not all(0 < v < 256 for v in self.values):
            raise ValueError(f"label values must be {k} distinct integers in 1..255: "
                             f"{self.values}")
        if set(self.regions) != set(REGIONS):
            raise ValueError(f"regions must be exactly {REGIONS}, received {tuple(self.regions)}")
        for region, vals in self.regions.items():
            if not vals or not set(vals) <= set(self.values):
                raise ValueError(f"region {region} uses labels {vals} outside {self.values}")
        return self

    @property
    def n_classes(self) -> int:
        """Class indices a model outputs: background and each tissue."""
        return len(self.values) + 1

    @property
    def allowed_values(self) -> frozenset[int]:
        """Every label value a segmentation may contain (background 0 included)."""
        return frozenset((0, *self.values))

    def region_mask(self, labels: npt.NDArray[np.integer], region: Region) -> npt.NDArray[np.bool_]:
        """Binary mask of ``region`` in a label map."""
        lut = np.zeros(256, dtype=bool)
        lut[list(self.regions[region])] = True
        return lut[np.asarray(labels).astype(np.uint8, copy=False)]

    def from_class_indices(self, classes: npt.NDArray[np.integer]) -> npt.NDArray[np.uint8]:
        """Map class indices 0..K to this convention's label values (uint8)."""
        lut = np.array((0, *self.values), dtype=np.uint8)
        return lut[np.asarray(classes)]

    def to_class_indices(self, labels: npt.NDArray[np.integer]) -> npt.NDArray[np.uint8]:
        """Map label values to class indices 0..K; values outside the map raise ``ValueError``."""
        arr = np.asarray(labels)
        present = {int(v) for v in np.unique(arr)}
        unknown = present - self.allowed_values
        if unknown:
            raise ValueError(
                f"label values {sorted(unknown)} are not in the {self.name} map "
                f"{sorted(self.allowed_values)}"
            )
        lut = np.zeros(256, dtype=np.uint8)
        for index, value in enumerate(self.values, start=1):
            lut[value] = index
        return lut[arr.astype(np.uint8, copy=False)]


BRATS2023_LABELS = LabelMap(
    name="brats2023",
    tissues=("NETC", "SNFH", "ET"),
    values=(1, 2, 3),
    regions={"WT": (1, 2, 3), "TC": (1, 3), "ET": (3,)},
)
#: BraTS 2025 (adult glioma post-treatment, metastases): the 2023 tissues and the resection
#: cavity, label 4 (``BraTS_evaluation`` 0.0.10, ``config_gli.yaml`` / ``config_mets.yaml``).
BRATS2025_LABELS = LabelMap(
    name="brats2025",
    tissues=("NETC", "SNFH", "ET", "RC"),
    values=(1, 2, 3, 4),
    regions={"WT": (1, 2, 3), "TC": (1, 3), "ET": (3,)},
)
BRATS2021_LABELS = LabelMap(
    name="brats2021",
    tissues=("NCR", "ED", "ET"),
    values=(1, 2, 4),
    regions={"WT": (1, 2, 4), "TC": (1, 4), "ET": (4,)},
)


class BratsContract(BaseModel):
    """Versioned description of one case: four co-registered MRI modalities and a label map on a
    fixed grid, stored as NIfTI with BraTS 2023 names
    (``BraTS-GLI-XXXXX-YYY/BraTS-GLI-XXXXX-YYY-{t1n,t1c,t2w,t2f,seg}.nii.gz``)."""

    model_config = _FROZEN

    contract_id: Literal["sealbench/brats-contract"] = "sealbench/brats-contract"
    version: Literal[1] = 1
    modalities: tuple[str, ...] = ("t1n", "t1c", "t2w", "t2f")
    shape: tuple[int, int, int] = (240, 240, 155)
    spacing_mm: tuple[float, float, float] = (1.0, 1.0, 1.0)
    file_suffix: Literal[".nii.gz"] = ".nii.gz"
    seg_name: str = "seg"
    case_id_pattern: str = r"BraTS-GLI-\d{5}-\d{3}"
    label_map: LabelMap = BRATS2023_LABELS
    spacing_tolerance_mm: float = Field(default=1e-3, ge=0)
    affine_tolerance: float = Field(default=1e-3, ge=0)

    @model_validator(mode="after")
    def _check(self) -> BratsContract:
        if len(set(self.modalities)) != len(self.modalities) or not self.modalities:
            raise ValueError(f"modalities must be distinct and non-empty: {self.modalities}")
        if self.seg_name in self.modalities:
            raise ValueError("the segmentation name must differ from every modality")
        if any(s <= 0 for s in self.shape) or any(s <= 0 for s in self.spacing_mm):
            raise ValueError("shape and spacing must be positive")
        re.compile(self.case_id_pattern)
        return self

    def is_case_id(self, name: str) -> bool:
        """Whether ``name`` is a case id in this contract's naming."""
        return re.fullmatch(self.case_id_pattern, name) is not None

    def file_name(self, case_id: str, part: str) -> str:
        """File name of one modality (or the segmentation) of a case."""
        if part != self.seg_name and part not in self.modalities:
            raise ValueError(f"unknown part {part!r}; expected one of {self.parts}")
        return f"{case_id}-{part}{self.file_suffix}"

    @property
    def parts(self) -> tuple[str, ...]:
        """Modalities then the segmentation: every file a labelled case has."""
        return (*self.modalities, self.seg_name)

    @property
    def n_voxels(self) -> int:
        """Voxels in one volume of this grid."""
        return int(np.prod(self.shape))

    def with_shape(self, shape: tuple[int, int, int]) -> BratsContract:
        """The same contract on another grid (a new contract: data prepared on one grid is
        refused by a benchmark whose contract names the other)."""
        return BratsContract.model_validate({**self.model_dump(), "shape": shape})

    @property
    def grid(self) -> dict[str, Any]:
        """The grid a dataset prepared under this contract states when it is registered:
        ``{"shape": [X, Y, Z], "spacing_mm": [x, y, z]}`` (the keys of the contract itself)."""
        return {"shape": list(self.shape), "spacing_mm": list(self.spacing_mm)}

    def grid_text(self) -> str:
        """``240x240x155 at 1.0x1.0x1.0 mm``: the grid in messages."""
        return (f"{'x'.join(map(str, self.shape))} at "
                f"{'x'.join(f'{s:g}' for s in self.spacing_mm)} mm")


#: The BraTS 2023 GLI contract on its real grid, 240x240x155 at 1 mm (SRI24 space).
BRATS_2023_GLI = BratsContract()
#: The same tissues, modalities and labels on a 64x64x48 grid: the contract of the small demo
#: benchmark (``brats-gli-synthetic-small``), never mixed with the real grid's benchmark.
BRATS_2023_GLI_SMALL = BratsContract(shape=(64, 64, 48))
#: BraTS 2025 adult glioma (pre- and post-treatment), 240x240x155 at 1 mm: ``brats-2025-gli/1``.
BRATS_2025_GLI = BratsContract(case_id_pattern=r"BraTS-GLI-\d{5}-\d{3}",
                               label_map=BRATS2025_LABELS)
#: BraTS 2025 brain metastases, 240x240x155 at 1 mm: ``brats-2025-met/1``.
BRATS_2025_MET = BratsContract(case_id_pattern=r"BraTS-MET-\d{5}-\d{3}",
                               label_map=BRATS2025_LABELS)
