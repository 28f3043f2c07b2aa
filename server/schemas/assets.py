"""Dataset, model and confidential-computing coordinate wire types, split by direction."""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise
from typing import Annotated, Final, Literal

from pydantic import Field, StringConstraints, ValidationError, model_validator

from sealbench.contract.spec import KMS_KEY_PATTERN, POOL_PROVIDER_PATTERN, StorageUri
from sealbench.server.schemas.budgets import MAX_BUDGET_DELTA, MAX_BUDGET_EPSILON
from sealbench.server.schemas.common import (
    Digest,
    Id,
    JsonObject,
    JsonOut,
    Name,
    Version,
    WireModel,
)

__all__ = [
    "GRID_STATISTIC",
    "MAX_CASE_FINGERPRINTS",
    "AssetKind",
    "CaseFingerprint",
    "CoordinatesPublic",
    "CoordinatesUpdate",
    "DatasetCreate",
    "DatasetGrid",
    "DatasetPublic",
    "ModelCreate",
    "ModelPublic",
]

AssetKind = Literal["dataset", "model"]


#: A case's keyed fingerprint: 64 lowercase hex digits (HMAC-SHA256).
CaseFingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
#: Most fingerprints one registration carries (the request body limit binds first: about
#: 15 000 cases per MiB of ``max_body_bytes``).
MAX_CASE_FINGERPRINTS: Final = 10_000_000

#: Key of a dataset's grid in its registration's ``statistics``.
GRID_STATISTIC = "grid"


class DatasetGrid(WireModel):
    """The voxel grid a dataset's cases are on, as a benchmark's data contract states one
    (``shape`` and ``spacing_mm``, the contract's own keys): what the registry compares when a
    dataset is registered for, or associated with, a benchmark whose contract fixes a grid."""

    shape: tuple[int, ...] = Field(min_length=1, max_length=4)
    spacing_mm: tuple[float, ...] | None = Field(default=None, min_length=1, max_length=4)

    @model_validator(mode="after")
    def _positive(self) -> DatasetGrid:
        if any(not 0 < n <= 1_000_000 for n in self.shape):
            raise ValueError(f"grid shape must be positive voxel counts, received {self.shape}")
        spacing = self.spacing_mm or ()
        if any(not 0 < s < 1e6 for s in spacing) or len(spacing) not in (0, len(self.shape)):
            raise ValueError(f"grid spacing must be {len(self.shape)} positive millimetres, "
                             f"received {self.spacing_mm}")
        return self


class DatasetCreate(WireModel):
    name: Name
    digest: Digest = Field(description="digest of the prepared dataset's canonical manifest")
    case_count: int = Field(ge=0, le=10_000_000)
    statistics: JsonObject = Field(
        default_factory=dict,
        description="aggregates only; 'grid' ({'shape': [...], 'spacing_mm': [...]}) is the "
        "grid of its cases, required when registering for a benchmark whose contract fixes one",
    )
    prepared_for_id: Id | None = None
    budget_epsilon: float | None = Field(
        default=None, ge=1e-6, le=MAX_BUDGET_EPSILON,
        description="lifetime privacy budget (epsilon, read at budget_delta) of every release "
        "of this dataset's results together; default: the group's when joining a budget "
        "group, else schemas.budgets.DEFAULT_BUDGET_EPSILON",
    )
    budget_delta: float | None = Field(
        # a denormal delta makes ln(1/delta) infinite: no budget could be read in epsilon
        default=None, ge=1e-30, le=MAX_BUDGET_DELTA,
        description="the delta of the budget; default as for budget_epsilon",
    )
    budget_group: Name | None = Field(
        default=None,
        description="a budget group of yours: datasets sharing cases share one budget. Created "
        "with this dataset's budget if new; joining an existing one with another budget is "
        "refused",
    )

    case_fingerprints: list[CaseFingerprint] | None = Field(
        default=None, max_length=MAX_CASE_FINGERPRINTS,
        description="one keyed fingerprint per case (HMAC-SHA256 under the owner's own key of a "
        "digest of the case's content, no case id or file name in it), sorted, as many as "
        "case_count: a dataset holding cases of an earlier dataset of the same owner shares "
        "its privacy budget. Stored, never returned; absent: the dataset's own ledger",
    )

    @model_validator(mode="after")
    def _fingerprints(self) -> DatasetCreate:
        prints = self.case_fingerprints
        if prints is None:
            return self
        if len(prints) != self.case_count:
            raise ValueError(f"case_fingerprints lists {len(prints)} fingerprints for "
                             f"case_count {self.case_count}: one per case")
        if any(a > b for a, b in pairwise(prints)):
            raise ValueError("case_fingerprints must be sorted (their order would otherwise "
                             "say something about the cases)")
        return self

    @model_validator(mode="after")
    def _grid(self) -> DatasetCreate:
        if GRID_STATISTIC in self.statistics:
            try:
                DatasetGrid.model_validate(self.statistics[GRID_STATISTIC])
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"]
                raise ValueError(f"statistics.grid is not a grid: {reason}") from None
        return self


class DatasetPublic(WireModel):
    id: int
    owner_id: int
    name: str
    digest: str
    case_count: int
    statistics: JsonOut
    prepared_for_id: int | None
    state: Literal["registered"]
    created_at: datetime
    budget_epsilon: float
    budget_delta: float


class ModelCreate(WireModel):
    name: Name
    version: Version
    digest: Digest = Field(description="SHA-256 of the ONNX weights file")
    format: Literal["onnx"] = "onnx"
    io_contract: JsonObject = Field(default_factory=dict)


class ModelPublic(WireModel):
    id: int
    owner_id: int
    name: str
    version: str
    digest: str
    format: Literal["onnx"]
    io_contract: JsonOut
    state: Literal["registered"]
    created_at: datetime


class CoordinatesUpdate(WireModel):
    """Where the sealed asset and its key live (never the key itself).

    Each field is checked with the pattern the enclave's run spec applies to the same value
    (:mod:`sealbench.contract.spec`, the run-spec wire contract), so the registry stores only
    coordinates that a run could be launched with: a Cloud KMS crypto key name, a ``gs://`` (or
    ``file:///``) location without control characters, and a workload identity pool provider
    named by project number."""

    kms_key_name: str = Field(min_length=1, max_length=512, pattern=KMS_KEY_PATTERN)
    storage_uri: StorageUri = Field(min_length=1, max_length=1024)
    wip_provider: str = Field(min_length=1, max_length=512, pattern=POOL_PROVIDER_PATTERN)


class CoordinatesPublic(WireModel):
    asset_kind: AssetKind
    asset_id: int
    kms_key_name: str
    storage_uri: str
    wip_provider: str
    updated_at: datetime
