"""The progress matrix of a benchmark (``/ui/benchmarks/{id}/progress``): per approved model and
dataset, what the hospitals' clients reported for the benchmark's current image (pending,
planned, running, failed with its failure class, interrupted, done), each cell labelled by who
vouches for it: an attested result, an attested failure (the enclave's signed failure record),
or the hospital. It calls the API's own
service (:func:`sealbench.server.services.runs.progress`) with the viewer as principal, so the
authority sees every cell, a data or model owner the cells of its assets, and others a 403."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from sealbench.server.auth import Principal
from sealbench.server.routers._common import IdPath
from sealbench.server.schemas.runs import ProgressCell
from sealbench.server.services import benchmarks, runs
from sealbench.server.web._state import DashboardState, render_page

__all__ = ["progress_page"]

#: The order in which the summary counts are shown.
STATUSES = ("done", "running", "planned", "pending", "failed", "interrupted")


def _matrix(cells: tuple[ProgressCell, ...]) -> dict[str, Any]:
    models = sorted({(c.model_id, c.model_name) for c in cells})
    datasets = sorted({(c.dataset_id, c.dataset_name) for c in cells})
    by_pair = {(c.model_id, c.dataset_id): c for c in cells}
    rows = [
        (model_id, name, [by_pair.get((model_id, dataset_id)) for dataset_id, _ in datasets])
        for model_id, name in models
    ]
    return {"datasets": datasets, "rows": rows}


def progress_page(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/benchmarks/{benchmark_id}/progress")
    async def progress(request: Request, benchmark_id: IdPath) -> Response:
        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            bench = benchmarks.get(session, benchmark_id)
            board = runs.progress(session, viewer, benchmark_id)
            return "progress.html", {
                "b": bench,
                "board": board,
                "matrix": _matrix(board.cells),
                "counts": [(s, board.counts.get(s, 0)) for s in STATUSES],
                "is_authority": bench.owner_id == viewer.user_id,
                "nav": "benchmarks",
            }

        return await render_page(state, request, build)

    return router
