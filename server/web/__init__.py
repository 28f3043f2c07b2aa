"""The registry's web dashboard, served by the registry itself under ``/ui``: benchmarks,
leaderboards with server-rendered charts, attestation details, owners' assets, the audit trail
and the viewer's inbox, where a pending association can be approved or rejected (the one thing
the dashboard changes; see :mod:`sealbench.server.web._actions`). Server-rendered Jinja2
pages that work without JavaScript (there is none), a static stylesheet shipped in the package,
a strict Content-Security-Policy, CSRF tokens on every form, and sign-in with the same
credentials as the API.

Every page calls the API's own service functions with the signed-in user as the principal, so
the dashboard shows a user exactly what the API would answer to that user's token.

Errors: the services' :class:`~sealbench.server.errors.RegistryError` tree, rendered as an HTML
page with the status the API would answer (401 becomes a redirect to the sign-in page).
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from sealbench.server.settings import ServerSettings
from sealbench.server.web._actions import action_routes
from sealbench.server.web._audit_page import audit_page
from sealbench.server.web._leaderboard_page import pooled_pages
from sealbench.server.web._owner_pages import owner_pages
from sealbench.server.web._pages import benchmark_pages
from sealbench.server.web._progress_page import progress_page
from sealbench.server.web._render import STATIC_DIR, Templates
from sealbench.server.web._security import SecurityHeadersMiddleware
from sealbench.server.web._sessions import SessionStore
from sealbench.server.web._signin import signin_routes
from sealbench.server.web._state import PREFIX, STATIC_PREFIX, DashboardState, base_context

__all__ = ["DASHBOARD_PREFIX", "mount_dashboard"]

DASHBOARD_PREFIX = PREFIX


def mount_dashboard(
    app: FastAPI, settings: ServerSettings, *, sessions: SessionStore | None = None
) -> None:
    """Add the dashboard's routes, static files and security headers to ``app`` (before it
    starts). ``sessions`` defaults to the database-backed store with the standard lifetimes.
    Mounting twice is a no-op."""
    if getattr(app.state, "dashboard", None) is not None:
        return
    state = DashboardState(
        settings=settings, sessions=sessions or SessionStore(), templates=Templates()
    )
    for router in (
        signin_routes(state),
        benchmark_pages(state),
        pooled_pages(state),
        progress_page(state),
        owner_pages(state),
        audit_page(state),
        action_routes(state),
    ):
        app.include_router(router, prefix=PREFIX, include_in_schema=False)
    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC_DIR), name="dashboard-static")

    async def not_found(request: Request) -> Response:
        context = {**base_context(state, None, request), "status": 404}
        context["message"] = "There is no dashboard page at this address."
        return HTMLResponse(state.templates.render("error.html", context), 404)

    app.add_api_route(PREFIX + "/{rest:path}", not_found, methods=["GET"], include_in_schema=False)

    async def root() -> Response:
        return RedirectResponse(PREFIX + "/", 307)

    app.add_api_route("/", root, methods=["GET"], include_in_schema=False)
    app.add_middleware(SecurityHeadersMiddleware, prefix=PREFIX, static_prefix=STATIC_PREFIX)
    app.state.dashboard = state
