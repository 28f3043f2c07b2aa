"""``/api/v1/benchmarks/{id}/pool-inputs`` and ``/pooled-releases`` (issue 27): what the
authority's aggregator is to pool, and the pooled releases it attested
(:mod:`sealbench.server.services.pooling`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from sealbench.server.deps import CurrentUser, NowDep, RegistryDep, SessionDep
from sealbench.server.models import PooledRelease
from sealbench.server.routers._common import ERRORS, IdPath, in_thread
from sealbench.server.schemas.pools import (
    LeftOutPublic,
    PoolCandidates,
    PooledInputPublic,
    PooledReleaseCreate,
    PooledReleasePublic,
)
from sealbench.server.services import pooling

__all__ = ["router"]

router = APIRouter(prefix="/benchmarks", tags=["pooling"], responses=ERRORS)


def public(row: PooledRelease, inputs: Sequence[Mapping[str, Any]]) -> PooledReleasePublic:
    aggregates = row.release.get("aggregates") if isinstance(row.release, dict) else None
    return PooledReleasePublic(
        id=row.id, benchmark_id=row.benchmark_id, model_id=row.model_id,
        pool_id=str(row.release.get("pool_id", "")), n_sites=row.n_sites, n_cases=row.n_cases,
        inputs_digest=row.inputs_digest,
        aggregates=aggregates if isinstance(aggregates, dict) else {},
        inputs=tuple(PooledInputPublic(**i) for i in inputs),
        attestation_token=row.attestation_token, token_issuer=row.token_issuer,
        image_digest=row.image_digest, nonce=row.nonce,
        sealed_release_b64=base64.b64encode(row.sealed_release).decode("ascii"),
        created_at=row.created_at)


def _publics(session: Session, rows: Sequence[PooledRelease]) -> list[PooledReleasePublic]:
    inputs = pooling.inputs_of(session, rows)
    return [public(row, inputs[row.id]) for row in rows]


@router.get("/{benchmark_id}/pool-inputs")
async def pool_inputs(
    benchmark_id: IdPath,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    model_id: Annotated[int, Query(ge=1, le=2**31 - 1, description="the model to pool")],
) -> PoolCandidates:
    """The model's accepted results not yet pooled, as the aggregator's inputs document, and
    those left out with the reason (the benchmark's authority only)."""

    def answer() -> PoolCandidates:
        found = pooling.candidates(session, user, benchmark_id, model_id,
                                   plugins=registry.plugins)
        return PoolCandidates(
            benchmark_id=found.benchmark_id, model_id=found.model_id,
            inputs=None if found.inputs is None else found.inputs.model_dump(mode="json"),
            left_out=tuple(LeftOutPublic(result_id=lo.result_id, dataset_id=lo.dataset_id,
                                         run_id=lo.run_id, reason=lo.reason)
                           for lo in found.left_out))

    return await in_thread(session, answer)


@router.post("/{benchmark_id}/pooled-releases", status_code=201)
async def submit_pooled_release(
    benchmark_id: IdPath,
    body: PooledReleaseCreate,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    now: NowDep,
) -> PooledReleasePublic:
    """Verify the aggregator's sealed release against its attestation and the inputs it was
    asked to pool, open it with the registry's pool-release key, store it and debit every
    included dataset (the benchmark's authority only)."""
    await run_in_threadpool(registry.verifier.prefetch_keys, body.attestation_token)
    return await in_thread(session, lambda: _publics(session, [pooling.submit(
        session, user, benchmark_id, body, registry.verifier, now, pool_key=registry.pool_key,
        plugins=registry.plugins)])[0])


@router.get("/{benchmark_id}/pooled-releases")
async def list_pooled_releases(
    benchmark_id: IdPath, session: SessionDep, user: CurrentUser
) -> list[PooledReleasePublic]:
    """The benchmark's TEE-pooled releases the caller may see (the leaderboard's rules)."""
    return await in_thread(
        session, lambda: _publics(session, pooling.list_releases(session, user, benchmark_id)))
