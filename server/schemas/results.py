"""Result wire types: what a data owner submits, what readers get, the leaderboard."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from sealbench.contract.spec import StorageUri
from sealbench.server.schemas.assets import AssetKind
from sealbench.server.schemas.common import Digest, Id, JsonObject, JsonOut, WireModel

__all__ = ["Leaderboard", "LeaderboardEntry", "ResultCreate", "ResultPublic"]


class ResultCreate(WireModel):
    benchmark_id: Id
    dataset_id: Id
    model_id: Id
    summary: JsonObject = Field(description="public aggregate metrics, exactly as attested")
    sealed_result_digest: Digest
    attestation_token: str = Field(min_length=1, max_length=16_384)
    result_uri: StorageUri | None = Field(
        default=None, description="where the run left its objects (its run spec's result "
        "location): a benchmark that pools in the TEE has its aggregator read the site's sealed "
        "statistics there; without it the result cannot be pooled in the TEE")


class ResultPublic(WireModel):
    id: int
    benchmark_id: int
    dataset_id: int
    model_id: int
    submitted_by_id: int
    summary: JsonOut
    sealed_result_digest: str
    attestation_token: str
    token_issuer: str
    image_digest: str
    nonce: str
    created_at: datetime
    result_uri: str | None = Field(default=None, description="where the run left its objects")
    withdrawn: tuple[AssetKind, ...] = Field(
        default=(),
        description="the sides (dataset, model) whose association with the benchmark was "
        "withdrawn after this result was verified; the result stays, marked",
    )


class LeaderboardEntry(WireModel):
    result_id: int
    model_id: int
    model_name: str
    model_version: str
    dataset_id: int
    dataset_name: str
    summary: JsonOut
    created_at: datetime
    withdrawn: tuple[AssetKind, ...] = Field(
        default=(), description="as in ResultPublic: sides withdrawn since the result"
    )


class Leaderboard(WireModel):
    """The latest verified result per (model, dataset) that the caller may read."""

    benchmark_id: int
    entries: tuple[LeaderboardEntry, ...]
