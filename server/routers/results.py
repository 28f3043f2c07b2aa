"""``/api/v1/results`` and ``/api/v1/benchmarks/{id}/leaderboard``: submit (verified), list,
read, and the latest verified summary per model and dataset."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from sealbench.server.deps import CurrentUser, Limit, NowDep, Offset, RegistryDep, SessionDep
from sealbench.server.models import Result
from sealbench.server.routers._common import ERRORS, IdPath, OptionalId, in_thread, to_page
from sealbench.server.schemas import (
    Leaderboard,
    LeaderboardEntry,
    Page,
    ResultCreate,
    ResultPublic,
)
from sealbench.server.services import results

__all__ = ["leaderboard_router", "router"]

router = APIRouter(prefix="/results", tags=["results"], responses=ERRORS)
leaderboard_router = APIRouter(prefix="/benchmarks", tags=["results"], responses=ERRORS)


def _public(row: Result) -> ResultPublic:
    return ResultPublic.model_validate(row, from_attributes=True)


@router.post("", status_code=201)
async def submit(
    body: ResultCreate,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    now: NowDep,
) -> ResultPublic:
    await run_in_threadpool(registry.verifier.prefetch_keys, body.attestation_token)
    return await in_thread(
        session, lambda: _public(results.submit(session, user, body, registry.verifier, now))
    )


@router.get("")
async def list_results(
    session: SessionDep,
    user: CurrentUser,
    benchmark_id: OptionalId = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[ResultPublic]:
    return await in_thread(
        session,
        lambda: to_page(
            results.list_page(session, user, benchmark_id=benchmark_id, limit=limit, offset=offset),
            _public,
            Page[ResultPublic],
        ),
    )


@router.get("/{result_id}")
async def get(result_id: IdPath, session: SessionDep, user: CurrentUser) -> ResultPublic:
    return await in_thread(session, lambda: _public(results.get(session, user, result_id)))


@leaderboard_router.get("/{benchmark_id}/leaderboard")
async def leaderboard(benchmark_id: IdPath, session: SessionDep, user: CurrentUser) -> Leaderboard:
    def board() -> Leaderboard:
        entries = tuple(
            LeaderboardEntry(
                result_id=result.id,
                model_id=model.id,
                model_name=model.name,
                model_version=model.version,
                dataset_id=dataset.id,
                dataset_name=dataset.name,
                summary=result.summary,
                created_at=result.created_at,
            )
            for result, model, dataset in results.leaderboard(session, user, benchmark_id)
        )
        return Leaderboard(benchmark_id=benchmark_id, entries=entries)

    return await in_thread(session, board)
