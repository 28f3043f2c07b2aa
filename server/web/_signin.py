"""Sign-in with the API token (or a trusted OIDC JWT) and sign-out, both POST forms with a CSRF
token. The credential is checked by the API's own authenticator; the session table then records
who signed in and with which token, never the credential (see
:mod:`sealbench.server.web._sessions`); the browser gets a random session id. A new sign-in
replaces any previous session of that browser (no fixation)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sealbench.server.errors import AuthenticationError, UpstreamUnavailableError
from sealbench.server.web._security import clear_cookie, cookie_name, is_secure, set_cookie
from sealbench.server.web._sessions import new_csrf_token, tokens_match
from sealbench.server.web._state import (
    PREFIX,
    SESSION_COOKIE,
    DashboardState,
    base_context,
    registry_of,
    resolve_viewer,
    safe_next,
)

__all__ = ["MAX_CREDENTIAL_CHARS", "SIGNIN_CSRF_COOKIE", "signin_routes"]

SIGNIN_CSRF_COOKIE = "sealbench_signin_csrf"
MAX_CREDENTIAL_CHARS = 16_384
log = logging.getLogger("sealbench.server.web")


def _field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def _same_origin(request: Request) -> bool:
    """A browser's ``Origin`` (when sent) must be this server; CSRF tokens are checked too."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    parts = urlsplit(origin)
    return parts.netloc == request.url.netloc and parts.scheme == request.url.scheme


async def _read_form(request: Request) -> FormData:
    async with request.form(max_files=0, max_fields=8) as form:
        return form


def signin_routes(state: DashboardState) -> APIRouter:
    router = APIRouter()

    def form_page(
        request: Request, *, csrf: str, next_path: str, status: int = 200, error: str | None = None
    ) -> Response:
        context: dict[str, Any] = {
            **base_context(state, None, request),
            "signin_csrf": csrf,
            "next_path": next_path,
            "error": error,
            "nav": "signin",
        }
        response = HTMLResponse(state.templates.render("signin.html", context), status)
        set_cookie(response, request, state.settings, SIGNIN_CSRF_COOKIE, csrf)
        return response

    def refused(request: Request, message: str, status: int = 403) -> Response:
        context = {**base_context(state, None, request), "status": status, "message": message}
        return HTMLResponse(state.templates.render("error.html", context), status)

    @router.get("/sign-in")
    async def sign_in_form(request: Request, next: str | None = None) -> Response:
        if await resolve_viewer(state, request) is not None:
            return RedirectResponse(safe_next(next), 303)
        return form_page(request, csrf=new_csrf_token(), next_path=safe_next(next))

    @router.post("/sign-in")
    async def sign_in(request: Request) -> Response:
        form = await _read_form(request)
        secure = is_secure(request, state.settings)
        expected = request.cookies.get(cookie_name(SIGNIN_CSRF_COOKIE, secure))
        next_path = safe_next(_field(form, "next"))
        if not _same_origin(request) or not tokens_match(expected, _field(form, "csrf")):
            return refused(
                request, "This form was not sent by this site, or it expired. Reload the page."
            )
        credential = (_field(form, "token") or "").strip()
        if not credential or len(credential) > MAX_CREDENTIAL_CHARS:
            return form_page(
                request,
                csrf=new_csrf_token(),
                next_path=next_path,
                status=400,
                error="Paste an API token (sbt_…) or a JWT from the configured identity provider.",
            )
        registry = registry_of(request)
        try:
            identity = await run_in_threadpool(
                registry.authenticator.identify, f"Bearer {credential}"
            )
        except (AuthenticationError, UpstreamUnavailableError) as exc:
            status = 503 if isinstance(exc, UpstreamUnavailableError) else 401
            return form_page(
                request, csrf=new_csrf_token(), next_path=next_path, status=status, error=str(exc)
            )
        previous = request.cookies.get(cookie_name(SESSION_COOKIE, secure))
        await run_in_threadpool(state.sessions.drop, registry.db, previous)
        session_id, _ = await run_in_threadpool(
            state.sessions.create, registry.db, identity, registry.clock()
        )
        log.info("dashboard sign-in by user %d", identity.principal.user_id)
        response = RedirectResponse(next_path, 303)
        set_cookie(response, request, state.settings, SESSION_COOKIE, session_id)
        clear_cookie(response, request, state.settings, SIGNIN_CSRF_COOKIE)
        return response

    @router.post("/sign-out")
    async def sign_out(request: Request) -> Response:
        form = await _read_form(request)
        viewer = await resolve_viewer(state, request)
        if viewer is None:
            return RedirectResponse(f"{PREFIX}/sign-in", 303)
        if not _same_origin(request) or not tokens_match(viewer.session.csrf, _field(form, "csrf")):
            return refused(request, "This form was not sent by this site. Reload the page.")
        await run_in_threadpool(state.sessions.drop, registry_of(request).db, viewer.session_id)
        response = RedirectResponse(f"{PREFIX}/sign-in", 303)
        clear_cookie(response, request, state.settings, SESSION_COOKIE)
        return response

    return router
