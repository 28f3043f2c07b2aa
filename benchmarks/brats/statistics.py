"""``statistics.json``, what a data owner's registration sends to the registry: facts about the
dataset that reveal no patient (issue 25).

Version 2 holds the case count, the count of rejected raw cases, and what the contract fixes for
every case (contract identity, grid, spacing, modalities, label map); nothing computed from a
case's voxels, and no aggregate over cases either: a mean, a quartile or a count of cases with a
region, over few cases or over two datasets one case apart, gives cases' values back. Version 1
listed distributions of tumour and brain volumes and raw intensities over cases; a reader refuses
it (:func:`read_statistics`, :class:`StatisticsVersionError`), so an old document is never sent
as it is: prepare the dataset again.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.crypto.canonical import canonical_json

from .contract import BratsContract
from .errors import StatisticsError, StatisticsVersionError

__all__ = ["FORMAT", "VERSION", "DatasetStatistics", "dataset_statistics", "read_statistics"]

FORMAT: Final = "sealbench/brats-statistics"
VERSION: Final = 2
_MAX_BYTES: Final = 1 << 16
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class DatasetStatistics(BaseModel):
    """``statistics.json`` of a prepared dataset (version 2): counts and the contract's facts,
    nothing computed from a case."""

    model_config = _FROZEN

    format: Literal["sealbench/brats-statistics"] = FORMAT
    version: Literal[2] = VERSION
    #: Cases prepared, and raw case folders (or stray entries) rejected.
    n_cases: int
    n_rejected: int
    #: The contract every case was checked against: identity, grid, modalities, label map.
    contract_id: str
    contract_version: int
    shape: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]
    modalities: tuple[str, ...]
    label_map: str

    def to_canonical_json(self) -> bytes:
        """Canonical JSON bytes, as written to ``statistics.json``."""
        return canonical_json(self.model_dump(mode="json"))


def dataset_statistics(contract: BratsContract, n_cases: int,
                       n_rejected: int) -> DatasetStatistics:
    """The statistics of a dataset of ``n_cases`` prepared cases (``n_rejected`` rejected) under
    ``contract``."""
    return DatasetStatistics(
        n_cases=n_cases, n_rejected=n_rejected, contract_id=contract.contract_id,
        contract_version=contract.version, shape=contract.shape,
        spacing_mm=contract.spacing_mm, modalities=contract.modalities,
        label_map=contract.label_map.name)


def read_statistics(data: bytes) -> DatasetStatistics:
    """Parse ``statistics.json``; :class:`StatisticsVersionError` for a document of another
    version (version 1 listed aggregates over cases and is never sent on), and
    :class:`StatisticsError` for anything else that is not a version-2 document."""
    if len(data) > _MAX_BYTES:
        raise StatisticsError(f"statistics.json is larger than {_MAX_BYTES} bytes")
    try:
        doc: Any = json.loads(data)
    except ValueError as exc:
        raise StatisticsError("statistics.json is not JSON") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StatisticsError(f"statistics.json is not a {FORMAT} document")
    if doc.get("version") != VERSION:
        raise StatisticsVersionError(
            f"statistics.json is version {doc.get('version')!r}, expected {VERSION} (version 1 "
            "lists distributions over cases, which may reveal patients): prepare the dataset "
            "again")
    try:
        return DatasetStatistics.model_validate(doc)
    except ValidationError as exc:
        raise StatisticsError(
            f"statistics.json is not a valid version-{VERSION} document "
            f"({exc.error_count()} errors)") from exc
