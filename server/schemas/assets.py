"""Dataset, model and confidential-computing coordinate wire types, split by direction."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from sealbench.enclave.spec import KMS_KEY_PATTERN, POOL_PROVIDER_PATTERN, StorageUri
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
    "AssetKind",
    "CoordinatesPublic",
    "CoordinatesUpdate",
    "DatasetCreate",
    "DatasetPublic",
    "ModelCreate",
    "ModelPublic",
]

AssetKind = Literal["dataset", "model"]


class DatasetCreate(WireModel):
    name: Name
    digest: Digest = Field(description="digest of the prepared dataset's canonical manifest")
    case_count: int = Field(ge=0, le=10_000_000)
    statistics: JsonObject = Field(default_factory=dict)
    prepared_for_id: Id | None = None


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
    (:mod:`sealbench.enclave.spec`, the run-spec wire contract), so the registry stores only
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
