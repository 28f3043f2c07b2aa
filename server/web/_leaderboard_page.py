"""The pooled leaderboard page (issue 15): the API's pooled board for the viewer, a forest plot
per model (each site's estimate with its 95% interval, the pooled diamond), a per-region or
per-class breakdown, filters by metric and site, and the CSV download.

Both routes call :func:`sealbench.server.services.leaderboard.pooled_board` with the viewer as
the principal, so the page and the download show what the API answers that user (the page
through the API's stored board, :func:`sealbench.server.routers.results.board_json`).

What a person reads first comes first, the rest on demand (issue 42: at FeTS scale, 41 models
by 32 sites, the whole page was 718 KB): the ranking table, the forest plots of the
:data:`FIRST_FORESTS` best-ranked models and the breakdown; each site's value as a column of the
table only when the board has at most :data:`SITE_COLUMNS` sites. ``?show=all`` draws every
forest plot and every site's column, as the links on the page say."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response

from sealbench.server.auth import Principal
from sealbench.server.db import Database
from sealbench.server.errors import RegistryError
from sealbench.server.routers._common import IdPath
from sealbench.server.routers.results import board_json, pooled_board
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

__all__ = ["FIRST_FORESTS", "MOCK_BADGE", "SITE_COLUMNS", "pooled_pages"]

MOCK_BADGE = "mock TEE, not a confidential run"
#: Forest plots drawn unless every one is asked for (the best-ranked models').
FIRST_FORESTS = 10
#: The most sites whose values are columns of the ranking table unless all are asked for.
SITE_COLUMNS = 12
MetricQuery = Annotated[str | None, Query(max_length=100)]
ShowQuery = Annotated[Literal["first", "all"], Query()]
SiteQuery = Annotated[list[int] | None, Query()]


def _board(db: Database, session: Session, viewer: Principal, benchmark_id: int,
           metric: str | None, site: list[int] | None, now: datetime) -> PooledLeaderboard:
    body = board_json(db, session, viewer, benchmark_id, now, metric=metric or None,
                      sites=None if not site else frozenset(site), with_breakdown=True)
    return PooledLeaderboard.model_validate_json(body)


def _forests(board: PooledLeaderboard, first: int | None) -> tuple[Forest, ...]:
    """The forest plots of the first ``first`` standings (all for None), on one axis that
    spans every model's, so a plot drawn later on demand reads the same."""
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
        for s in board.standings[:first])


def pooled_pages(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/benchmarks/{benchmark_id}/pooled")
    async def pooled(request: Request, benchmark_id: IdPath, metric: MetricQuery = None,
                     site: SiteQuery = None, show: ShowQuery = "first") -> Response:
        registry = registry_of(request)

        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            bench = benchmarks.get(session, benchmark_id)
            board = _board(registry.db, session, viewer, benchmark_id, metric, site,
                           registry.clock())
            every = show == "all"
            columns = every or len(board.sites) <= SITE_COLUMNS
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
                "forests": _forests(board, None if every else FIRST_FORESTS),
                "site_columns": board.sites if columns else (),
                "show_all_query": "&".join([f"metric={board.metric}", "show=all",
                                            *(f"site={i}" for i in (site or ()))]),
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
