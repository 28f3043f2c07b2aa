"""The application factory. :func:`create_app` takes settings (and, for tests, a clock and a
JWKS fetcher) and returns a FastAPI app; the engine, caches and verifiers are created in its
lifespan, never at import. Domain errors map to JSON ``{"code", "message"}`` here and only here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
import fastapi.routing
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from sealbench.benchmarks.registry import load as load_plugin
from sealbench.server.auth import Authenticator
from sealbench.server.db import open_database
from sealbench.server.deps import Registry
from sealbench.server.errors import RegistryError
from sealbench.server.jwks import JwksCache, JwksFetcher, UrllibJwksFetcher
from sealbench.server.limits import BodyLimitMiddleware
from sealbench.server.logkeys import ensure_log_key, publish_key
from sealbench.server.poolkey import ensure_pool_key
from sealbench.server.routers import (
    assets,
    associations,
    audit,
    benchmarks,
    inbox,
    meta,
    pools,
    results,
    runs,
    users,
)
from sealbench.server.routers._common import document_errors
from sealbench.server.routers.fast_reads import FastReads
from sealbench.server.schemas import ErrorBody, ErrorDetail
from sealbench.server.services.benchmark_plugins import PluginLookup
from sealbench.server.settings import ServerSettings
from sealbench.server.verification import ResultVerifier
from sealbench.server.web import mount_dashboard

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"
log = logging.getLogger("sealbench.server")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _error(
    status: int, code: str, message: str, details: tuple[ErrorDetail, ...] = ()
) -> JSONResponse:
    body = ErrorBody(code=code, message=message, details=details)
    return JSONResponse(status_code=status, content=body.model_dump(mode="json"))


async def _registry_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RegistryError)
    if exc.status_code >= 500 and exc.status_code != 503:
        log.error("internal registry error: %s", exc)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    response = _error(exc.status_code, exc.code, str(exc))
    if headers:
        response.headers.update(headers)
    return response


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Locations and messages only: pydantic's "input" would echo tokens or payloads back.
    details = tuple(
        ErrorDetail(
            loc=tuple(p if isinstance(p, int | str) else str(p) for p in err.get("loc", ())),
            msg=str(err.get("msg", "")),
            type=str(err.get("type", "")),
        )
        for err in exc.errors()[:20]
    )
    return _error(422, "invalid_request", "the request does not match the API schema", details)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, str(exc.detail))


def _prime_endpoint_contexts(app: FastAPI) -> None:
    """Fill FastAPI's per-endpoint context (file, line, name: used only in its error messages)
    from each endpoint's code object. FastAPI (0.165) reads it with ``inspect.getsourcelines``
    on an endpoint's first call, which reads and tokenises the endpoint's source file: about a
    tenth of a fresh process's first pooled board. A FastAPI without that cache is left as
    it is."""
    cache = getattr(fastapi.routing, "_endpoint_context_cache", None)
    if not isinstance(cache, dict):
        return
    routes = list(app.routes)
    while routes:
        route = routes.pop()
        included = getattr(route, "original_router", None)  # an included router's own routes
        if included is not None:
            routes.extend(included.routes)
            continue
        call = getattr(route, "endpoint", None)
        code = getattr(call, "__code__", None)
        if call is None or code is None or id(call) in cache:
            continue
        cache[id(call)] = {"file": code.co_filename, "line": code.co_firstlineno,
                           "function": call.__name__}


async def _warm_routes(app: FastAPI) -> None:
    """Route one request through the app, in process: FastAPI (0.165) builds each included
    router's routes (their parameter models) the first time a request walks past them. The
    request is the pooled board's route with no token (refused, 401; nothing is read), so the
    routers in front of it, those of the requests people wait for (the benchmarks, their
    associations, the boards), are built at start and the others (the dashboard's, runs,
    pools, audit, inbox, ...) by the first request that reaches them: building every router here
    cost about 0.19 s of CPU at each start. Nothing is sent anywhere and nothing is logged."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": f"{API_PREFIX}/benchmarks/1/leaderboard/pooled",
             "raw_path": b"",
             "query_string": b"", "root_path": "", "headers": [],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_message: object) -> None:
        return None

    await app(scope, receive, send)


class _RegistryApp(FastAPI):
    """The registry's FastAPI application with :attr:`front` (the fast benchmark reads, which
    pass every other request to :meth:`api`) in front of FastAPI's own layers."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is None:
            await self.api(scope, receive, send)
        else:
            await self.front(scope, receive, send)

    async def api(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI's handling of a request: its middleware, routers and exception handlers."""
        await super().__call__(scope, receive, send)


def create_app(
    settings: ServerSettings,
    *,
    clock: Callable[[], datetime] = _utcnow,
    jwks_fetcher: JwksFetcher | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    plugins: PluginLookup = load_plugin,
) -> FastAPI:
    """Build the registry application for ``settings`` (``plugins``: which benchmark plug-in
    a pin names when results are checked and budgets read; the installed ones by default)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Handlers run their database work in this pool (one hop per request).
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.worker_threads
        db = open_database(settings.effective_database_url, pool_size=settings.db_pool_size)
        jwks = JwksCache(
            jwks_fetcher or UrllibJwksFetcher(),
            ttl=settings.jwks_cache_seconds,
            clock=monotonic,
        )
        # The transparency log's key: created here only in local mode (tests, demos); a
        # deployment runs 'sealbench-server init' first.
        log_signer = ensure_log_key(settings, create=settings.mode == "local")
        pool_key = ensure_pool_key(settings, create=settings.mode == "local")
        with db.writer() as session:
            publish_key(session, log_signer, clock())
        app.state.registry = Registry(
            settings=settings,
            db=db,
            authenticator=Authenticator(
                db,
                oidc=settings.oidc,
                jwks=jwks,
                clock=clock,
                cache_seconds=settings.token_cache_seconds,
                monotonic=monotonic,
                revocation_check_seconds=settings.revocation_check_seconds,
            ),
            verifier=ResultVerifier(
                settings.trusted_issuers, jwks, clock=lambda: clock().timestamp()
            ),
            log_signer=log_signer,
            clock=clock,
            pool_key=pool_key,
            write_gate=asyncio.Lock() if db.is_sqlite else None,
            plugins=plugins,
        )
        # Nothing else is prepared at start: no plug-in is imported and no board built (a
        # board the first request needs is stored in the database, db_cache); only FastAPI's
        # per-route work, which every first request would pay.
        _prime_endpoint_contexts(app)
        await _warm_routes(app)
        try:
            yield
        finally:
            fast_reads.close()
            db.dispose()

    app = _RegistryApp(
        title="sealbench registry",
        version="1",
        description="Benchmarks, datasets, models, approvals, verified results and audit log.",
        lifespan=lifespan,
    )
    # the most frequent reads, from rows straight to JSON, in front of every layer of FastAPI's
    # (they are GETs of the API, which none of those layers changes: no body to limit, no
    # dashboard headers, no exception they would map; a read the database fails goes on to
    # the API, which answers it as before)
    app.front = fast_reads = FastReads(app.api, prefix=API_PREFIX, state=app.state,
                                       threads=settings.worker_threads)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        max_depth=settings.max_json_depth,
    )
    app.add_exception_handler(RegistryError, _registry_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.include_router(meta.router)
    for router in (
        users.router,
        benchmarks.router,
        associations.router,
        results.leaderboard_router,
        pools.router,
        assets.datasets_router,
        assets.models_router,
        results.router,
        audit.router,
        inbox.router,
        runs.router,
        runs.progress_router,
    ):
        app.include_router(router, prefix=API_PREFIX)
    mount_dashboard(app, settings)
    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        # the error answers' body schema, added once (see routers._common.ERRORS)
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(base_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
