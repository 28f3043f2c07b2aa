"""TEE-pooling wire types (issue 27): what the authority is given to pool, what it submits back
(the aggregator's release, its token and the inputs it was asked to pool) and what readers get."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from sealbench.server.schemas.common import Digest, JsonOut, WireModel

__all__ = [
    "LeftOutPublic",
    "PoolCandidates",
    "PooledInputPublic",
    "PooledReleaseCreate",
    "PooledReleasePublic",
]

#: A pooled release of 1,000 inputs is about 150 KiB of JSON; sealing adds a few dozen bytes
#: and base64 a third.
_MAX_RELEASE_B64 = 1_500_000


class LeftOutPublic(WireModel):
    """An accepted, unpooled result of the model that the pool leaves out, and why."""

    result_id: int
    dataset_id: int
    run_id: str | None
    reason: str


class PoolCandidates(WireModel):
    """``GET /benchmarks/{id}/pool-inputs``: the model's pool inputs (a
    :class:`~sealbench.contract.pool.PoolInputs` document, None when nothing is left to pool)
    and the results left out of it."""

    benchmark_id: int
    model_id: int
    inputs: JsonOut | None = Field(description="a sealbench/pool-inputs document, to write as "
                                   "pool-inputs.json and pool exactly")
    left_out: tuple[LeftOutPublic, ...] = ()


class PooledReleaseCreate(WireModel):
    """``POST /benchmarks/{id}/pooled-releases``: the aggregator's ``pooled.sealed`` exactly as
    it wrote it (base64: its token's nonce hashes these bytes; sealed to the registry's
    pool-release key, so the submitter cannot read it), ``pooled.token``, and the
    ``pool-inputs.json`` document it was asked to pool."""

    sealed_release_b64: str = Field(min_length=1, max_length=_MAX_RELEASE_B64)
    attestation_token: str = Field(min_length=1, max_length=16_384)
    inputs: JsonOut = Field(description="the sealbench/pool-inputs document the pool was asked "
                            "to pool")


class PooledInputPublic(WireModel):
    result_id: int
    run_id: str
    dataset_id: int
    commitment: Digest


class PooledReleasePublic(WireModel):
    """A verified TEE-pooled release: the aggregator's public release, the results it pooled,
    and its attestation (the token, its issuer, the aggregator image and the nonce)."""

    id: int
    benchmark_id: int
    model_id: int
    pool_id: str
    n_sites: int
    n_cases: int
    inputs_digest: str
    aggregates: JsonOut
    inputs: tuple[PooledInputPublic, ...]
    attestation_token: str
    token_issuer: str
    image_digest: str
    nonce: str
    sealed_release_b64: str = Field(description="the pooled.sealed the token's nonce hashes")
    created_at: datetime
    tee_pooled: bool = True
