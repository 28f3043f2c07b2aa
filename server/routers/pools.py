"""``/api/v1/benchmarks/{id}/pool-authorizations`` (issue 40: what the registry authorized the
aggregator to pool, debited on the log first) and ``/pooled-releases`` (issue 27: the pooled
releases it attested); :mod:`sealbench.server.services.pool_authorizations` and
:mod:`sealbench.server.services.pooling`."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from sealbench.contract.pool import PoolInputs
from sealbench.server.deps import CurrentUser, NowDep, RegistryDep, SessionDep
from sealbench.server.models import AuditEvent, PooledRelease
from sealbench.server.models import PoolAuthorization as AuthorizationRow
from sealbench.server.routers._common import ERRORS, IdPath, in_thread
from sealbench.server.schemas.common import JsonOut
from sealbench.server.schemas.pools import (
    LeftOutPublic,
    PoolAuthorizationCreate,
    PoolAuthorizationPublic,
    PoolDebitPublic,
    PooledInputPublic,
    PooledReleaseCreate,
    PooledReleasePublic,
)
from sealbench.server.services import pool_authorizations, pooling

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


def _authorization_public(session: Session, row: AuthorizationRow,
                          left_out: Sequence[LeftOutPublic] = (), *, reused: bool = False
                          ) -> PoolAuthorizationPublic:
    inputs = PoolInputs.from_bytes(row.inputs)
    released = pool_authorizations.released_by(session, row)
    results = session.scalars(select(AuditEvent.payload).where(
        AuditEvent.seq == row.audit_seq)).first()
    result_ids = json.loads(results).get("result_ids", []) if results else []
    return PoolAuthorizationPublic(
        pool_id=row.pool_id, benchmark_id=row.benchmark_id, model_id=row.model_id,
        inputs_digest=row.inputs_digest,
        datasets=tuple(int(i.dataset.asset_id) for i in inputs.inputs),
        result_ids=tuple(int(r) for r in result_ids), rho=inputs.rho,
        debits=tuple(PoolDebitPublic(ledger=d.ledger, datasets=tuple(int(x) for x in d.datasets),
                                     seq=d.seq) for d in inputs.debits),
        audit_seq=row.audit_seq, left_out=tuple(left_out), released_id=released,
        reused=reused, created_at=row.created_at)


@router.post("/{benchmark_id}/pool-authorizations", status_code=201)
async def authorize_pool(
    benchmark_id: IdPath,
    body: PoolAuthorizationCreate,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    now: NowDep,
    response: Response,
) -> PoolAuthorizationPublic:
    """Authorize a pool of one model (the benchmark's authority only): the registry chooses
    every current, approved site's latest accepted result, debits each ledger on the
    transparency log and signs the inputs; the aggregator draws nothing without it. 200 with
    ``reused`` when the model's previous authorization covers exactly these results and never
    produced a release (run it again: nothing more is debited)."""

    def answer() -> PoolAuthorizationPublic:
        row, choice, reused = pool_authorizations.authorize(
            session, user, benchmark_id, body.model_id, registry.log_signer, now,
            plugins=registry.plugins)
        if reused:
            response.status_code = 200
        return _authorization_public(session, row, [
            LeftOutPublic(result_id=lo.result_id, dataset_id=lo.dataset_id, run_id=lo.run_id,
                          reason=lo.reason) for lo in choice.left_out], reused=reused)

    return await in_thread(session, answer)


@router.get("/{benchmark_id}/pool-authorizations")
async def list_pool_authorizations(
    benchmark_id: IdPath,
    session: SessionDep,
    user: CurrentUser,
    model_id: Annotated[int, Query(ge=1, le=2**31 - 1, description="the model pooled")],
) -> list[PoolAuthorizationPublic]:
    """The model's pool authorizations, oldest first (the benchmark's authority only)."""

    def answer() -> list[PoolAuthorizationPublic]:
        bench = pool_authorizations.authority_benchmark(session, user, benchmark_id)
        rows = session.scalars(select(AuthorizationRow).where(
            AuthorizationRow.benchmark_id == bench.id, AuthorizationRow.model_id == model_id)
            .order_by(AuthorizationRow.id)).all()
        return [_authorization_public(session, row) for row in rows]

    return await in_thread(session, answer)


@router.get("/{benchmark_id}/pool-authorizations/{pool_id}")
async def pool_authorization(
    benchmark_id: IdPath,
    pool_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")],
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
) -> JsonOut:
    """The authorization as the aggregator reads it (``pool-authorization.json``): the signed
    inputs document, a checkpoint (cosigned by the benchmark's witnesses when it names any; 409
    until a quorum has cosigned one holding it) and the inclusion proofs of its events."""
    return await in_thread(session, lambda: pool_authorizations.evidence(
        session, user, benchmark_id, pool_id, registry.log_signer).model_dump(mode="json"))


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
