"""``/api/v1/runs`` and ``/api/v1/benchmarks/{id}/progress``: a data owner's client reports the
state of each confidential run; the benchmark's owner, the data owners and the model owners read
the runs (and the progress matrix) that concern them."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from sealbench.server.deps import (
    CurrentUser,
    Limit,
    NowDep,
    Offset,
    Registry,
    RegistryDep,
    SessionDep,
)
from sealbench.server.errors import RegistryError
from sealbench.server.models import Run
from sealbench.server.routers._common import ERRORS, IdPath, OptionalId, in_thread, to_page
from sealbench.server.schemas import Page
from sealbench.server.schemas.runs import (
    BenchmarkProgress,
    RunBatchPublic,
    RunPublic,
    RunReport,
    RunReportBatch,
    RunState,
    day_of,
)
from sealbench.server.services import runs

__all__ = ["progress_router", "router"]

_log = logging.getLogger("sealbench.server")

router = APIRouter(prefix="/runs", tags=["runs"], responses=ERRORS)
progress_router = APIRouter(prefix="/benchmarks", tags=["runs"], responses=ERRORS)

RunKeyPath = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]


def _public(row: Run) -> RunPublic:
    return RunPublic(
        id=row.id,
        run_id=row.run_key,
        reporter_id=row.reporter_id,
        benchmark_id=row.benchmark_id,
        dataset_id=row.dataset_id,
        model_id=row.model_id,
        state=row.state,  # type: ignore[arg-type]  # written only from RunState
        reason=row.reason,
        image_digest=row.image_digest,
        tee=row.tee,
        attempts=row.attempts,
        execution_provider=row.execution_provider,
        result_id=row.result_id,
        failure_attested=row.failure_attested,
        seq=row.seq,
        created_at=day_of(row.created_at),  # rows of before issue 40 were stored finer
        updated_at=day_of(row.updated_at),
    )


async def _prefetch(registry: Registry, token: str | None) -> None:
    """The key set a failure token needs, fetched before the write transaction; a fetch that
    fails never blocks the report (the failure is then stored as a claim, and logged)."""
    if token is None:
        return
    try:
        await run_in_threadpool(registry.verifier.prefetch_keys, token)
    except RegistryError as exc:
        _log.warning("the key set of a failure token could not be fetched: %s", exc)


@router.put("/{run_id}")
async def report(
    run_id: RunKeyPath, body: RunReport, session: SessionDep, user: CurrentUser, now: NowDep,
    registry: RegistryDep,
) -> RunPublic:
    """Create or advance one of your runs (idempotent: a report whose ``seq`` is not higher
    than the stored one changes nothing). A failed run's enclave-attested failure record is
    verified; one that does not verify is stored as the hospital's claim."""
    await _prefetch(registry, body.failure_token)
    return await in_thread(session, lambda: _public(
        runs.report(session, user, run_id, body, now, registry.verifier)))


@router.post("/reports")
async def report_many(
    body: RunReportBatch, session: SessionDep, user: CurrentUser, now: NowDep,
    registry: RegistryDep,
) -> RunBatchPublic:
    """Several of your runs' reports in one transaction (all or none), each applied as
    ``PUT /runs/{run_id}`` would be."""
    for item in body.reports:
        await _prefetch(registry, item.failure_token)
    return await in_thread(session, lambda: RunBatchPublic(
        runs=tuple(_public(row) for row in runs.report_many(session, user, body, now,
                                                            registry.verifier))
    ))


@router.get("")
async def list_runs(
    session: SessionDep,
    user: CurrentUser,
    benchmark_id: OptionalId = None,
    state: Annotated[RunState | None, Query()] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Page[RunPublic]:
    def page() -> Page[RunPublic]:
        rows = runs.list_page(
            session, user, benchmark_id=benchmark_id, state=state, limit=limit, offset=offset
        )
        return to_page(rows, _public, Page[RunPublic])

    return await in_thread(session, page)


@progress_router.get("/{benchmark_id}/progress")
async def progress(
    benchmark_id: IdPath, session: SessionDep, user: CurrentUser
) -> BenchmarkProgress:
    """Per approved (model, dataset): pending, planned, running, failed, interrupted or done."""
    return await in_thread(session, lambda: runs.progress(session, user, benchmark_id))
