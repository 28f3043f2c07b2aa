"""TEE-pooling wire types (issue 27): what the authority is given to pool, what it submits back
(the aggregator's release, its token and the inputs it was asked to pool) and what readers get."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from sealbench.server.schemas.common import Digest, JsonOut, WireModel

__all__ = [
    "LeftOutPublic",
    "PoolAuthorizationCreate",
    "PoolAuthorizationPublic",
    "PoolDebitPublic",
    "PooledInputPublic",
    "PooledReleaseCreate",
    "PooledReleasePublic",
]

#: A pooled release of 1,000 inputs is about 150 KiB of JSON; sealing adds a few dozen bytes
#: and base64 a third.
_MAX_RELEASE_B64 = 1_500_000


class LeftOutPublic(WireModel):
    """An accepted result of the model that the pool leaves out, and why."""

    result_id: int
    dataset_id: int
    run_id: str | None
    reason: str


class PoolAuthorizationCreate(WireModel):
    """``POST /benchmarks/{id}/pool-authorizations``: the model to pool. Nothing else: the
    registry chooses the inputs (every current, approved site's latest accepted result)."""

    model_id: int = Field(ge=1, le=2**31 - 1)


class PoolDebitPublic(WireModel):
    ledger: str
    datasets: tuple[int, ...]
    seq: int


class PoolAuthorizationPublic(WireModel):
    """A pool the registry authorized: its id (the aggregator run's), the inputs document's
    digest, the sites and cases it covers, the debits it charged (each a ``privacy.debit``
    event of the log), the results it left out and why, and the release it produced (None until
    one was submitted)."""

    pool_id: str
    benchmark_id: int
    model_id: int
    inputs_digest: Digest
    datasets: tuple[int, ...]
    result_ids: tuple[int, ...]
    rho: float | None
    debits: tuple[PoolDebitPublic, ...]
    audit_seq: int
    left_out: tuple[LeftOutPublic, ...] = ()
    released_id: int | None = None
    #: The model's previous authorization, answered again: it covers exactly the results the
    #: registry would pool now and never produced a release (nothing more was debited).
    reused: bool = False
    created_at: datetime


class PooledReleaseCreate(WireModel):
    """``POST /benchmarks/{id}/pooled-releases``: the aggregator's ``pooled.sealed`` exactly as
    it wrote it (base64: its token's nonce hashes these bytes; sealed to the registry's
    pool-release key, so the submitter cannot read it), ``pooled.token``, and the
    ``pool-inputs.json`` document it was asked to pool."""

    sealed_release_b64: str = Field(min_length=1, max_length=_MAX_RELEASE_B64)
    attestation_token: str = Field(min_length=1, max_length=16_384)
    inputs: JsonOut = Field(description="the sealbench/pool-inputs document of the registry's "
                            "authorization the pool spent")


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
