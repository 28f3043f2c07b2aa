"""The dashboard's HTTP hardening: security headers on every dashboard response, and the
cookie attributes (names, ``Secure``) chosen per request.

The Content-Security-Policy allows only this origin's own files: no script at all, no inline
style, no frames around the dashboard, forms posting only here.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sealbench.server.settings import ServerSettings

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "SECURITY_HEADERS",
    "SecurityHeadersMiddleware",
    "clear_cookie",
    "cookie_name",
    "is_secure",
    "set_cookie",
]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cross-origin-opener-policy", "same-origin"),
    ("permissions-policy", "camera=(), microphone=(), geolocation=()"),
)


class SecurityHeadersMiddleware:
    """Adds :data:`SECURITY_HEADERS` (and ``Cache-Control: no-store`` for pages) to every
    response under ``prefix``; the JSON API is left as it is."""

    def __init__(self, app: ASGIApp, *, prefix: str, static_prefix: str) -> None:
        self.app = app
        self.prefix = prefix
        self.static_prefix = static_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.app(scope, receive, send)
            return
        static = path.startswith(self.static_prefix + "/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() not in {name.encode() for name, _ in SECURITY_HEADERS}
                ]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def is_secure(request: Request, settings: ServerSettings) -> bool:
    """Cookies are ``Secure`` over HTTPS and always outside local mode (behind a TLS proxy)."""
    return request.url.scheme == "https" or settings.mode != "local"


def cookie_name(base: str, secure: bool) -> str:
    """``__Host-`` cookies must be Secure, host-only and path ``/``: the browser enforces it."""
    return f"__Host-{base}" if secure else base


def set_cookie(
    response: Response, request: Request, settings: ServerSettings, base: str, value: str
) -> None:
    secure = is_secure(request, settings)
    response.set_cookie(
        cookie_name(base, secure),
        value,
        path="/",
        httponly=True,
        secure=secure,
        samesite="strict",
    )


def clear_cookie(response: Response, request: Request, settings: ServerSettings, base: str) -> None:
    secure = is_secure(request, settings)
    response.delete_cookie(
        cookie_name(base, secure), path="/", httponly=True, secure=secure, samesite="strict"
    )
