"""The pooled leaderboard page (issue 15): the API's pooled board for the viewer, a forest plot
per model (each site's estimate with its 95% interval, the pooled diamond), a per-region or
per-class breakdown, filters by metric and site, and the CSV download.

Both routes call :func:`sealbench.server.services.leaderboard.pooled_board` with the viewer as
the principal, so the page and the download show what the API answers that user."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response

from sealbench.server.auth import Principal
from sealbench.server.errors import RegistryError
from sealbench.server.routers._common import IdPath
from sealbench.server.routers.results import pooled_board
from sealbench.server.schemas.leaderboard import PooledLeaderboard, to_csv
from sealbench.server.services import benchmarks
from sealbench.server.web._charts import Forest, axis_note, build_forest, forest_axis
from sealbench.server.web._state import (
    DashboardState,
    registry_of,
    render_page,
    resolve_viewer,
    sign_in_redirect,
)

__all__ = ["MOCK_BADGE", "pooled_pages"]

MOCK_BADGE = "mock TEE, not a confidential run"
MetricQuery = Annotated[str | None, Query(max_length=100)]
SiteQuery = Annotated[list[int] | None, Query()]


def _board(session: Session, viewer: Principal, benchmark_id: int, metric: str | None,
           site: list[int] | None) -> PooledLeaderboard:
    board = pooled_board(
        session, viewer, benchmark_id, metric=metric or None,
        sites=None if not site else frozenset(site), with_breakdown=True)
    return PooledLeaderboard.model_validate(board, from_attributes=True)


def _forests(board: PooledLeaderboard) -> tuple[Forest, ...]:
    info = next(m for m in board.metrics if m.key == board.metric)
    names = {s.dataset_id: s.name for s in board.sites}
    values = [s.values[0] for s in board.standings]
    # what is drawn: informative sites' estimates and intervals, and the pooled diamonds (a
    # site that is not informative draws nothing, so its 0-1 interval must not set the axis)
    drawn = [(x.value, x.ci95_low, x.ci95_high) for v in values for x in v.sites
             if x.value is not None]
    drawn += [(v.pooled, v.ci95_low, v.ci95_high) for v in values if v.pooled is not None]
    lows = [x for value, low, _ in drawn for x in (value, low) if x is not None]
    highs = [x for value, _, high in drawn for x in (value, high) if x is not None]
    bounded = not info.unit and info.direction != "neutral" and all(
        0.0 <= x <= 1.0 for x in lows + highs)
    core = [x for v in values if v.pooled is not None
            for x in (v.pooled, v.ci95_low, v.ci95_high) if x is not None]
    core += [value for value, _, _ in drawn if value is not None]
    ticks = forest_axis(lows, highs, unit=info.unit, bounded=bounded, core=core)
    note = axis_note(ticks, bounded=bounded)
    unit = f" {info.unit}" if info.unit else ""
    return tuple(
        build_forest(
            s.model_id, f"{s.model_name} {s.model_version}",
            [(names.get(x.dataset_id, f"#{x.dataset_id}"), x.value, x.ci95_low, x.ci95_high,
              x.mock_tee) for x in s.values[0].sites],
            (s.values[0].pooled, s.values[0].ci95_low, s.values[0].ci95_high), ticks, unit,
            note)
        for s in board.standings)


def pooled_pages(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/benchmarks/{benchmark_id}/pooled")
    async def pooled(request: Request, benchmark_id: IdPath, metric: MetricQuery = None,
                     site: SiteQuery = None) -> Response:
        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            bench = benchmarks.get(session, benchmark_id)
            board = _board(session, viewer, benchmark_id, metric, site)
            by_key = {m.key: m for m in board.metrics}
            values = {s.model_id: {v.metric: v for v in s.values} for s in board.standings}
            # each model's site values by dataset id (the table looks them up per column)
            cells = {s.model_id: {x.dataset_id: x for x in s.values[0].sites}
                     for s in board.standings}
            query = "&".join([*(f"metric={board.metric}",),
                              *(f"site={i}" for i in (site or ()))])
            return "pooled.html", {
                "b": bench,
                "board": board,
                "info": by_key[board.metric],
                "metrics": board.metrics,
                "forests": _forests(board),
                "breakdown": [by_key[k] for k in board.breakdown],
                "values": values,
                "cells": cells,
                "has_bias": any(v.bias is not None or any(x.bias is not None for x in v.sites)
                                for st in board.standings for v in st.values),
                "selected_sites": set(site or ()),
                "csv_query": query,
                "mock_badge": MOCK_BADGE,
                "nav": "benchmarks",
            }

        return await render_page(state, request, build)

    @router.get("/benchmarks/{benchmark_id}/pooled.csv")
    async def pooled_csv(request: Request, benchmark_id: IdPath, metric: MetricQuery = None,
                         site: SiteQuery = None, every: Annotated[bool, Query()] = True
                         ) -> Response:
        viewer = await resolve_viewer(state, request)
        if viewer is None:
            return sign_in_redirect(request)
        registry = registry_of(request)

        def work() -> Response:
            with registry.db.reader() as session:
                try:
                    board = pooled_board(
                        session, viewer.principal, benchmark_id,
                        metric=metric or None, sites=None if not site else frozenset(site),
                        every_metric=every)
                except RegistryError as exc:
                    return PlainTextResponse(str(exc), status_code=exc.status_code)
            return Response(to_csv(board), media_type="text/csv; charset=utf-8", headers={
                "Content-Disposition":
                    f'attachment; filename="benchmark-{benchmark_id}-leaderboard.csv"'})

        return await run_in_threadpool(work)

    return router
