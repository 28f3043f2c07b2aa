"""The dashboard's one place that changes anything: the inbox page (what waits for the viewer)
and the approve / reject forms of a pending association. Everything else stays read-only.

A decision is a POST form carrying the session's CSRF token, compared in constant time, from
this origin only (the browser's ``Origin``, when sent, must be this server); it calls the same
service function as ``POST /api/v1/benchmarks/{id}/{datasets|models}/{asset}/{approve|reject}``
with the viewer as the principal, in a write transaction queued like the API's writers, so the
permissions, the state rules and the audit event are the API's own. A refused decision renders
the error page with the status the API would answer; a decision made redirects (303) to the
form's ``next`` page inside the dashboard.

Each decision shows what every run of the benchmark publishes about a dataset's cases (its
release's privacy loss per run, or EXACT); approving a dataset's invitation to a benchmark that
publishes exact figures takes the form's explicit consent box, as the API's
``exact_release_consent``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Literal

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sealbench.server.auth import Principal
from sealbench.server.errors import RegistryError
from sealbench.server.routers._common import IdPath
from sealbench.server.services import associations
from sealbench.server.services import inbox as inbox_service
from sealbench.server.services.benchmark_plugins import release_terms
from sealbench.server.web._sessions import tokens_match
from sealbench.server.web._signin import _field, _read_form, _same_origin
from sealbench.server.web._state import (
    PREFIX,
    DashboardState,
    base_context,
    registry_of,
    render_page,
    resolve_viewer,
    safe_next,
)

__all__ = ["INBOX_PATH", "action_routes"]

INBOX_PATH = PREFIX + "/inbox"
log = logging.getLogger("sealbench.server.web")


def action_routes(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/inbox")
    async def inbox_page(request: Request) -> Response:
        plugins = registry_of(request).plugins

        def build(session: Session, viewer: Principal) -> tuple[str, dict[str, Any]]:
            data = inbox_service.inbox(session, viewer)
            benchmarks = {p.benchmark for p in (*data.to_decide, *data.awaiting_others)}
            benchmarks |= {e.benchmark for e in data.evaluations}
            return "inbox.html", {
                "data": data,
                "terms": {b.id: release_terms(b.metrics_version, plugins) for b in benchmarks},
                "to_run": [e for e in data.evaluations if e.result_id is None],
                "evaluated": sum(e.result_id is not None for e in data.evaluations),
                "nav": "inbox",
            }

        return await render_page(state, request, build)

    def refused(request: Request, viewer: Any, status: int, message: str) -> Response:
        context = {**base_context(state, viewer, request), "status": status, "message": message}
        return HTMLResponse(state.templates.render("error.html", context), status)

    def decider(
        kind: Literal["dataset", "model"], approve: bool
    ) -> Any:
        async def decide(request: Request, benchmark_id: IdPath, asset_id: IdPath) -> Response:
            form = await _read_form(request)
            viewer = await resolve_viewer(state, request)
            if viewer is None:
                return RedirectResponse(f"{PREFIX}/sign-in?next={INBOX_PATH}", 303)
            if not _same_origin(request) or not tokens_match(
                viewer.session.csrf, _field(form, "csrf")
            ):
                return refused(
                    request, viewer, 403,
                    "This form was not sent by this site, or it expired. Reload the page.",
                )
            registry = registry_of(request)
            now = registry.clock()

            def work() -> None:
                with registry.db.writer() as session:
                    associations.decide(
                        session, viewer.principal, kind, benchmark_id, asset_id,
                        approve=approve, now=now, plugins=registry.plugins,
                        exact_release_consent=_field(form, "exact_release_consent") == "yes",
                    )

            gate = registry.write_gate or contextlib.nullcontext()
            try:
                async with gate:
                    await run_in_threadpool(work)
            except RegistryError as exc:
                status = exc.status_code if exc.status_code >= 400 else 500
                return refused(request, viewer, status, str(exc))
            log.info(
                "dashboard: user %d %s %s %d in benchmark %d", viewer.principal.user_id,
                "approved" if approve else "rejected", kind, asset_id, benchmark_id,
            )
            target = _field(form, "next")
            return RedirectResponse(safe_next(target) if target else INBOX_PATH, 303)

        return decide

    for kind, plural in (("dataset", "datasets"), ("model", "models")):
        for verb, approve in (("approve", True), ("reject", False)):
            router.add_api_route(
                f"/benchmarks/{{benchmark_id}}/{plural}/{{asset_id}}/{verb}",
                decider(kind, approve),  # type: ignore[arg-type]
                methods=["POST"],
            )
    return router
