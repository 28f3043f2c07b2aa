"""``/api/v1/results`` and ``/api/v1/benchmarks/{id}/leaderboard``: submit (verified), list,
read, the latest verified summary per model and dataset, and the pooled leaderboard
(``/leaderboard/pooled``: figures pooled over sites, intervals, rank groups; issue 15)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from sealbench.benchmarks.interface import PoolingNotSupportedError
from sealbench.server import db_cache
from sealbench.server.auth import Principal
from sealbench.server.db import Database
from sealbench.server.deps import CurrentUser, Limit, NowDep, Offset, RegistryDep, SessionDep
from sealbench.server.errors import InvalidStateError, NotFoundError
from sealbench.server.models import Result
from sealbench.server.routers._common import ERRORS, IdPath, OptionalId, in_thread, to_page
from sealbench.server.schemas import (
    AssetKind,
    Leaderboard,
    LeaderboardEntry,
    Page,
    ResultCreate,
    ResultPublic,
)
from sealbench.server.schemas.leaderboard import PooledLeaderboard
from sealbench.server.services import leaderboard as pooled
from sealbench.server.services import results

__all__ = ["board_json", "leaderboard_router", "pooled_board", "router"]

#: Parsed summaries by result id and nonce (results never change; safe to lose).
SUMMARY_CACHE = pooled.SummaryCache()

router = APIRouter(prefix="/results", tags=["results"], responses=ERRORS)
leaderboard_router = APIRouter(prefix="/benchmarks", tags=["results"], responses=ERRORS)


def pooled_board(session: Session, actor: Principal, benchmark_id: int, *,
                 metric: str | None = None, sites: frozenset[int] | None = None,
                 every_metric: bool = False, with_breakdown: bool = False) -> pooled.Board:
    """:func:`~sealbench.server.services.leaderboard.pooled_board` (the API's, the dashboard's
    page's and its CSV's), where a benchmark whose plug-in does not pool results over sites
    (:class:`PoolingNotSupportedError`) is answered as such (409 ``invalid_state``, pointing to
    its per-site leaderboard), never as a server error."""
    try:
        return pooled.pooled_board(session, actor, benchmark_id, SUMMARY_CACHE, metric=metric,
                                   sites=sites, every_metric=every_metric,
                                   with_breakdown=with_breakdown)
    except PoolingNotSupportedError as exc:
        raise InvalidStateError(
            f"benchmark {benchmark_id}'s plug-in does not pool results over sites ({exc}), so "
            "it has no pooled leaderboard; each site's published results are on its per-site "
            f"leaderboard (the dashboard's /ui/benchmarks/{benchmark_id}/leaderboard, or GET "
            f"/api/v1/benchmarks/{benchmark_id}/leaderboard)") from None


def _public(row: Result, withdrawn: dict[int, tuple[AssetKind, ...]]) -> ResultPublic:
    public = ResultPublic.model_validate(row, from_attributes=True)
    sides = withdrawn.get(row.id, ())
    return public.model_copy(update={"withdrawn": sides}) if sides else public


def _publics(session: Session, rows: Sequence[Result]) -> list[ResultPublic]:
    """The rows as schemas, each marked with the sides withdrawn since it was verified."""
    withdrawn = results.withdrawn_sides(session, rows)
    return [_public(row, withdrawn) for row in rows]


@router.post("", status_code=201)
async def submit(
    body: ResultCreate,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    now: NowDep,
) -> ResultPublic:
    await run_in_threadpool(registry.verifier.prefetch_keys, body.attestation_token)
    # a result is accepted only for approved pairs, so a new one is never marked withdrawn
    return await in_thread(
        session, lambda: _public(results.submit(session, user, body, registry.verifier, now,
                                                 plugins=registry.plugins), {})
    )


@router.get("")
async def list_results(
    session: SessionDep,
    user: CurrentUser,
    benchmark_id: OptionalId = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[ResultPublic]:
    def page() -> Page[ResultPublic]:
        rows = results.list_page(
            session, user, benchmark_id=benchmark_id, limit=limit, offset=offset
        )
        withdrawn = results.withdrawn_sides(session, rows.items)
        return to_page(rows, lambda row: _public(row, withdrawn), Page[ResultPublic])

    return await in_thread(session, page)


@router.get("/{result_id}")
async def get(result_id: IdPath, session: SessionDep, user: CurrentUser) -> ResultPublic:
    return await in_thread(
        session, lambda: _publics(session, [results.get(session, user, result_id)])[0]
    )


@leaderboard_router.get("/{benchmark_id}/leaderboard")
async def leaderboard(benchmark_id: IdPath, session: SessionDep, user: CurrentUser) -> Leaderboard:
    def board() -> Leaderboard:
        rows = results.leaderboard(session, user, benchmark_id)
        withdrawn = results.withdrawn_sides(session, (result for result, _, _ in rows))
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
                withdrawn=withdrawn.get(result.id, ()),
            )
            for result, model, dataset in rows
        )
        return Leaderboard(benchmark_id=benchmark_id, entries=entries)

    return await in_thread(session, board)


@leaderboard_router.get("/{benchmark_id}/leaderboard/pooled", response_model=PooledLeaderboard)
async def pooled_leaderboard(
    benchmark_id: IdPath,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    now: NowDep,
    metric: Annotated[str | None, Query(max_length=100, description="rank by (default: the "
                                        "benchmark's headline); 'dice:WT' for a group")] = None,
    site: Annotated[list[int] | None, Query(description="only these dataset ids")] = None,
    all_metrics: Annotated[bool, Query(description="every metric's values, not only the "
                                       "ranked one")] = False,
) -> Response:
    """Each model's figures pooled over the sites the caller may read, with 95% intervals,
    between-site spread and rank groups (models whose intervals overlap share a rank)."""

    def board() -> Response:
        body = board_json(registry.db, session, user, benchmark_id, now, metric=metric,
                          sites=None if site is None else frozenset(site),
                          every_metric=all_metrics)
        return Response(content=body, media_type="application/json")

    return await in_thread(session, board)


def board_json(db: Database, session: Session, user: Principal, benchmark_id: int,
               now: datetime, *, metric: str | None = None, sites: frozenset[int] | None = None,
               every_metric: bool = False, with_breakdown: bool = False) -> bytes:
    """The pooled board as ``user`` may see it, serialised as the API answers it: the one
    stored in the database (:mod:`sealbench.server.db_cache`) when it was built from what the
    benchmark holds now, else built (the plug-in's figures of the stored statistics), stored
    for the next request of any process, and returned. Boards of a site filter are built each
    time. ``session`` is closed when a board is stored (SQLite lets one writer in at a time)."""
    key = current = None
    if sites is None:
        found = db_cache.stamp(session, benchmark_id)
        if found is None:
            raise NotFoundError("benchmark", benchmark_id)
        current, owner, published = found
        key = (f"{db_cache.viewer_class(owner, published, user.user_id)}|metric={metric or ''}"
               f"|every={int(every_metric)}|breakdown={int(with_breakdown)}")
        body = db_cache.cached_board(session, benchmark_id, key, current)
        if body is not None:
            return body
    result = pooled_board(session, user, benchmark_id, metric=metric, sites=sites,
                          every_metric=every_metric, with_breakdown=with_breakdown)
    # validated here, serialised by pydantic's own JSON encoder: FastAPI's generic encoder
    # took about 30 ms of a 41 x 32 board's 40
    body = PooledLeaderboard.model_validate(result, from_attributes=True).model_dump_json(
    ).encode()
    if key is not None and current is not None:
        session.close()
        with db.writer() as writer:
            db_cache.store_board(writer, benchmark_id, key, current, body, now)
    return body
