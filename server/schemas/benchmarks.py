"""Benchmark wire types, split by direction."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from sealbench.server.schemas.common import (
    Digest,
    Id,
    JsonObject,
    JsonOut,
    MetricsVersion,
    Name,
    Version,
    WireModel,
)

__all__ = [
    "BenchmarkCreate",
    "BenchmarkLeaderboardUpdate",
    "BenchmarkPublic",
    "BenchmarkState",
    "BenchmarkStateUpdate",
]

BenchmarkState = Literal["pending", "approved", "rejected", "retired"]


class BenchmarkCreate(WireModel):
    name: Name
    version: Version
    description: str = Field(default="", max_length=10_000)
    data_contract: JsonObject
    metrics_spec: JsonObject
    metrics_version: MetricsVersion = Field(
        description="the benchmark plug-in it pins, <name>/<version> (brats-2023-gli/1)")
    image_reference: str = Field(min_length=1, max_length=512)
    image_digest: Digest
    reference_model_id: Id | None = None
    leaderboard_published: bool = Field(
        default=False,
        description="publish the leaderboard: every signed-in user sees every model's pooled and "
        "per-site values (default: a model owner sees only its own model's)")
    accept_experimental: bool = Field(
        default=False,
        description="accept runs on confidential-GPU preview images (support attribute "
        "EXPERIMENTAL, GPU cc_mode ON) besides STABLE ones; owners see it before approving")
    aggregator_image_digest: Digest | None = Field(
        default=None,
        description="the benchmark's aggregator image (issue 27), a second approved workload "
        "that pools the sites' exact statistics inside the TEE and publishes one "
        "differentially private figure per model; each dataset's owner grants its key to it "
        "for the models approved in the benchmark when it associates, like the evaluation "
        "image. Fixed at creation, as the evaluation image is (None: the benchmark does not "
        "pool in the TEE)")
    pool_witnesses: tuple[str, ...] = Field(
        default=(), max_length=16,
        description="witnesses (C2SP cosigner verifier keys) whose cosignatures a checkpoint "
        "needs before the aggregator accepts a pool authorization logged in it (issue 40); "
        "fixed at creation, part of the aggregator's uid. Needs an aggregator image")
    pool_witness_quorum: int = Field(
        default=0, ge=0, le=16,
        description="how many of pool_witnesses must cosign (0 without witnesses; at least 1 "
        "with some)")


class BenchmarkLeaderboardUpdate(WireModel):
    """The authority publishes its benchmark's leaderboard, or stops publishing it."""

    published: bool


class BenchmarkStateUpdate(WireModel):
    """An admin rejects a pending benchmark; the owner or an admin retires one."""

    state: Literal["rejected", "retired"]


class BenchmarkPublic(WireModel):
    id: int
    owner_id: int
    name: str
    version: str
    description: str
    data_contract: JsonOut
    metrics_spec: JsonOut
    metrics_version: MetricsVersion = Field(description="the benchmark plug-in it pins")
    image_reference: str
    image_digest: str
    reference_model_id: int | None
    state: BenchmarkState
    approved_by_id: int | None
    approved_at: datetime | None
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = Field(
        default=None,
        description="when the authority closed the benchmark to new associations (None: open); "
        "its existing links keep running",
    )
    closed_by_id: int | None = None
    leaderboard_published: bool = Field(
        default=False, description="whether every signed-in user sees every model's values")
    accept_experimental: bool = Field(
        default=False, description="whether runs on confidential-GPU preview (EXPERIMENTAL) "
        "images are accepted")
    site_releases: bool = Field(
        default=True, description="whether each run publishes its own (per-site) release "
        "(issue 41). False for a pin ending in '-pool': the benchmark pools in the TEE and its "
        "pooled release is the one public figure per model and pooling round; each hospital "
        "still reads its exact figures locally ('result open'). The authority's choice at "
        "'benchmark create', in the pin, so the owners' key-release conditions bind it")
    aggregator_image_digest: str | None = Field(
        default=None, description="the aggregator image whose attested pooled releases the "
        "registry accepts and to which each dataset's owner grants its key (None: the "
        "benchmark does not pool in the TEE)")
    pool_recipient_key: str | None = Field(
        default=None, description="the registry's pool-release key (base64 X25519) the "
        "aggregator seals each pooled release to, so that only the release the registry "
        "accepts and debits is ever read; its SHA-256 is the recipient in the aggregator's "
        "uid that each dataset's owner grants. Fixed at creation (None: no aggregator)")
    pool_log_key: str | None = Field(
        default=None, description="the registry's transparency-log key (C2SP verifier key) "
        "against which the aggregator checks every pool authorization and the log inclusion of "
        "its debits; with pool_recipient_key and the witnesses, the pool anchor whose digest "
        "is the aggregator uid's recipient (issue 40). None: no aggregator")
    pool_witnesses: tuple[str, ...] | None = Field(
        default=None, description="the witnesses whose cosignatures the aggregator requires")
    pool_witness_quorum: int | None = Field(
        default=None, description="how many of pool_witnesses must cosign a checkpoint")
