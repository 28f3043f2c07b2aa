"""What every dashboard route shares: the session store (in the database), the templates, who
is looking, and :func:`render_page`, which runs a page's service calls in the thread pool inside
one read transaction and turns the services' domain errors into an HTML error page with the same
status the API would answer."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sealbench.server.auth import Principal
from sealbench.server.deps import Registry
from sealbench.server.errors import RegistryError
from sealbench.server.settings import ServerSettings
from sealbench.server.web._render import Templates
from sealbench.server.web._security import cookie_name, is_secure
from sealbench.server.web._sessions import SessionStore, WebSession

__all__ = [
    "PREFIX",
    "SESSION_COOKIE",
    "STATIC_PREFIX",
    "DashboardState",
    "PageBuilder",
    "Viewer",
    "render_page",
    "resolve_viewer",
    "safe_next",
]

PREFIX = "/ui"
STATIC_PREFIX = PREFIX + "/static"
SESSION_COOKIE = "sealbench_session"
log = logging.getLogger("sealbench.server.web")

#: A page: given the read session and the viewer, the template name and its context.
PageBuilder = Callable[[Session, Principal], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class DashboardState:
    settings: ServerSettings
    sessions: SessionStore
    templates: Templates


@dataclass(frozen=True)
class Viewer:
    principal: Principal
    session_id: str
    session: WebSession


def registry_of(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def safe_next(target: str | None) -> str:
    """Only a path inside the dashboard (no scheme, no host, no ``//``) may be a redirect."""
    if (
        target
        and target.startswith(PREFIX + "/")
        and "//" not in target
        and "\\" not in target
        and all(31 < ord(c) < 127 for c in target)
    ):
        return target
    return PREFIX + "/"


async def resolve_viewer(state: DashboardState, request: Request) -> Viewer | None:
    """The signed-in viewer, read from the shared session table (which also refuses a revoked
    token or a disabled user); None when not signed in."""
    session_id = request.cookies.get(
        cookie_name(SESSION_COOKIE, is_secure(request, state.settings))
    )
    if not session_id:
        return None
    registry = registry_of(request)
    session = await run_in_threadpool(state.sessions.get, registry.db, session_id, registry.clock())
    if session is None:
        return None
    return Viewer(session.principal, session_id, session)


def base_context(state: DashboardState, viewer: Viewer | None, request: Request) -> dict[str, Any]:
    return {
        "prefix": PREFIX,
        "static": STATIC_PREFIX,
        "viewer": None if viewer is None else viewer.principal,
        "csrf": None if viewer is None else viewer.session.csrf,
        "path": request.url.path,
        "oidc": state.settings.oidc is not None,
        "nav": "",
    }


def sign_in_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/sign-in?next={quote(safe_next(target), safe='/')}", 303)


async def render_page(state: DashboardState, request: Request, build: PageBuilder) -> Response:
    """Sign-in redirect, or the page built from service calls, or the error they raised. The
    viewer's session is read in the page's own read transaction (one thread hop, one
    connection per page)."""
    session_id = request.cookies.get(
        cookie_name(SESSION_COOKIE, is_secure(request, state.settings))
    )
    if not session_id:
        return sign_in_redirect(request)
    registry = registry_of(request)
    now = registry.clock()

    def work() -> tuple[int, str] | None:
        with registry.db.reader() as session:
            web, upkeep = state.sessions.lookup(session, session_id, now)
            if web is None:
                rendered = None
            else:
                rendered = _render(session, Viewer(web.principal, session_id, web))
        state.sessions.upkeep(registry.db, session_id, now, upkeep)
        return rendered

    def _render(session: Session, viewer: Viewer) -> tuple[int, str]:
        context = base_context(state, viewer, request)
        try:
            template, values = build(session, viewer.principal)
        except RegistryError as exc:
            if exc.status_code >= 500 and exc.status_code != 503:
                log.error("dashboard page failed: %s", exc)
            status = exc.status_code if exc.status_code >= 400 else 500
            return status, state.templates.render(
                "error.html", {**context, "status": status, "message": str(exc)}
            )
        return 200, state.templates.render(template, {**context, **values})

    result = await run_in_threadpool(work)
    if result is None:
        return sign_in_redirect(request)
    status, html = result
    return HTMLResponse(html, status_code=status)
