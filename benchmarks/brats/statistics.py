"""Dataset statistics a data owner may share: counts and distributions over cases, never a
per-case value.

Distributions (mean, standard deviation, quartiles) are computed only from at least
:data:`MIN_CASES_FOR_DISTRIBUTIONS` cases; below that they are withheld (``None``), since the
statistics of one or two cases would be those patients' values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from sealbench.crypto.canonical import canonical_json

from .contract import BratsContract, Region

__all__ = ["MIN_CASES_FOR_DISTRIBUTIONS", "DatasetStatistics", "Distribution",
           "StatisticsAccumulator"]

MIN_CASES_FOR_DISTRIBUTIONS = 5
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Distribution(BaseModel):
    """Summary of one quantity over cases."""

    model_config = _FROZEN

    mean: float
    std: float
    q25: float
    median: float
    q75: float

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        """Distribution of ``values`` (at least one)."""
        arr = np.asarray(values, dtype=np.float64)
        q25, median, q75 = np.quantile(arr, [0.25, 0.5, 0.75])
        return cls(mean=float(arr.mean()), std=float(arr.std()), q25=float(q25),
                   median=float(median), q75=float(q75))


class DatasetStatistics(BaseModel):
    """``statistics.json`` of a prepared dataset (version 1)."""

    model_config = _FROZEN

    format: Literal["sealbench/brats-statistics"] = "sealbench/brats-statistics"
    version: Literal[1] = 1
    n_cases: int
    cases_with_region: dict[Region, int]
    region_volume_mm3: dict[Region, Distribution] | None
    brain_volume_mm3: Distribution | None
    raw_intensity_mean: dict[str, Distribution] | None
    raw_intensity_std: dict[str, Distribution] | None

    def to_canonical_json(self) -> bytes:
        """Canonical JSON bytes, as written to ``statistics.json``."""
        return canonical_json(self.model_dump(mode="json"))


class StatisticsAccumulator:
    """Collects per-case quantities in memory and releases only their aggregates."""

    def __init__(self, contract: BratsContract) -> None:
        self._contract = contract
        self._voxel_mm3 = float(np.prod(contract.spacing_mm))
        self._volumes: dict[Region, list[float]] = {r: [] for r in ("WT", "TC", "ET")}
        self._brain: list[float] = []
        self._means: dict[str, list[float]] = {m: [] for m in contract.modalities}
        self._stds: dict[str, list[float]] = {m: [] for m in contract.modalities}

    def add(self, modalities: Mapping[str, npt.NDArray[np.float32]],
            brain: npt.NDArray[np.bool_], seg: npt.NDArray[np.uint8]) -> None:
        """Record one accepted case (raw intensities, brain mask, labels)."""
        label_map = self._contract.label_map
        for region, values in self._volumes.items():
            values.append(float(np.count_nonzero(label_map.region_mask(seg, region)))
                          * self._voxel_mm3)
        self._brain.append(float(np.count_nonzero(brain)) * self._voxel_mm3)
        for name, image in modalities.items():
            inside = image[brain] if brain.any() else image.ravel()
            self._means[name].append(float(inside.mean(dtype=np.float64)))
            self._stds[name].append(float(inside.std(dtype=np.float64)))

    def result(self) -> DatasetStatistics:
        """The aggregates (distributions withheld below the minimum case count)."""
        n = len(self._brain)
        with_region: dict[Region, int] = {r: sum(v > 0 for v in vals)
                                          for r, vals in self._volumes.items()}
        if n < MIN_CASES_FOR_DISTRIBUTIONS:
            return DatasetStatistics(n_cases=n, cases_with_region=with_region,
                                     region_volume_mm3=None, brain_volume_mm3=None,
                                     raw_intensity_mean=None, raw_intensity_std=None)
        return DatasetStatistics(
            n_cases=n, cases_with_region=with_region,
            region_volume_mm3={r: Distribution.of(v) for r, v in self._volumes.items()},
            brain_volume_mm3=Distribution.of(self._brain),
            raw_intensity_mean={m: Distribution.of(v) for m, v in self._means.items()},
            raw_intensity_std={m: Distribution.of(v) for m, v in self._stds.items()},
        )
