"""``/api/v1/benchmarks``: register, list, read, approve (admin), change state, close to new
associations."""

from __future__ import annotations

from fastapi import APIRouter, Query

from sealbench.server.deps import (
    CurrentUser,
    Limit,
    NowDep,
    Offset,
    RegistryDep,
    SessionDep,
)
from sealbench.server.routers._common import ERRORS, IdPath, in_thread, to_page
from sealbench.server.schemas import (
    BenchmarkCreate,
    BenchmarkLeaderboardUpdate,
    BenchmarkPublic,
    BenchmarkState,
    BenchmarkStateUpdate,
    Page,
)
from sealbench.server.services import benchmarks

__all__ = ["router"]

router = APIRouter(prefix="/benchmarks", tags=["benchmarks"], responses=ERRORS)


def _public(row: object) -> BenchmarkPublic:
    """From an ORM row or a plain row with the same columns."""
    return BenchmarkPublic.model_validate(row, from_attributes=True)


@router.post("", status_code=201)
async def create(
    body: BenchmarkCreate, session: SessionDep, user: CurrentUser, now: NowDep,
    registry: RegistryDep,
) -> BenchmarkPublic:
    pool_key = registry.pool_key.public_key()
    return await in_thread(session, lambda: _public(
        benchmarks.create(session, user, body, now, pool_key=pool_key,
                          plugins=registry.plugins)))


@router.get("")
async def list_benchmarks(
    session: SessionDep,
    _user: CurrentUser,
    state: BenchmarkState | None = Query(default=None),  # noqa: B008
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[BenchmarkPublic]:
    return await in_thread(
        session,
        lambda: to_page(
            benchmarks.list_page(session, state=state, limit=limit, offset=offset),
            _public,
            Page[BenchmarkPublic],
        ),
    )


@router.get("/{benchmark_id}")
async def get(benchmark_id: IdPath, session: SessionDep, _user: CurrentUser) -> BenchmarkPublic:
    return await in_thread(session, lambda: _public(benchmarks.get(session, benchmark_id)))


@router.post("/{benchmark_id}/approve")
async def approve(
    benchmark_id: IdPath, session: SessionDep, user: CurrentUser, now: NowDep
) -> BenchmarkPublic:
    return await in_thread(
        session, lambda: _public(benchmarks.approve(session, user, benchmark_id, now))
    )


@router.post("/{benchmark_id}/state")
async def set_state(
    benchmark_id: IdPath,
    body: BenchmarkStateUpdate,
    session: SessionDep,
    user: CurrentUser,
    now: NowDep,
) -> BenchmarkPublic:
    return await in_thread(
        session,
        lambda: _public(benchmarks.set_state(session, user, benchmark_id, body.state, now)),
    )


@router.post("/{benchmark_id}/leaderboard")
async def set_leaderboard(
    benchmark_id: IdPath,
    body: BenchmarkLeaderboardUpdate,
    session: SessionDep,
    user: CurrentUser,
    now: NowDep,
) -> BenchmarkPublic:
    """The owner (or an admin) publishes the leaderboard (every signed-in user sees every
    model's pooled and per-site values) or stops publishing it."""
    return await in_thread(
        session,
        lambda: _public(benchmarks.set_leaderboard_published(
            session, user, benchmark_id, body.published, now)),
    )


@router.post("/{benchmark_id}/close")
async def close(
    benchmark_id: IdPath, session: SessionDep, user: CurrentUser, now: NowDep
) -> BenchmarkPublic:
    """The owner (or an admin) closes an approved benchmark to new associations; approved
    links keep running and submitting results."""
    return await in_thread(
        session, lambda: _public(benchmarks.close(session, user, benchmark_id, now))
    )
