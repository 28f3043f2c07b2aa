"""The application's state and the ``Annotated`` dependencies routers use (``SessionDep``,
``CurrentUser``, ``RegistryDep``, ``NowDep``, page parameters). Tests replace the registry's parts
(clock, JWKS fetcher, benchmark plug-ins) when they build the app, not by patching."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from sealbench.benchmarks.registry import load as load_plugin
from sealbench.crypto.note import SignerKey
from sealbench.server.auth import Authenticator, Principal
from sealbench.server.db import Database
from sealbench.server.errors import AuthenticationError
from sealbench.server.services.benchmark_plugins import PluginLookup
from sealbench.server.settings import ServerSettings
from sealbench.server.verification import ResultVerifier

__all__ = [
    "CurrentUser",
    "Limit",
    "NowDep",
    "Offset",
    "Registry",
    "RegistryDep",
    "SessionDep",
    "SettingsDep",
]

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Registry:
    """Everything a request handler may need, built once in the app's lifespan."""

    settings: ServerSettings
    db: Database
    authenticator: Authenticator
    verifier: ResultVerifier
    log_signer: SignerKey
    clock: Callable[[], datetime]
    #: The pool-release key the benchmarks' aggregators seal their releases to (issue 27).
    pool_key: X25519PrivateKey
    write_gate: asyncio.Lock | None = None
    #: The benchmark plug-in a pin names, where results are checked and budgets read.
    plugins: PluginLookup = load_plugin


async def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


RegistryDep = Annotated[Registry, Depends(get_registry)]


async def get_settings(registry: RegistryDep) -> ServerSettings:
    return registry.settings


SettingsDep = Annotated[ServerSettings, Depends(get_settings)]


async def get_session(request: Request, registry: RegistryDep) -> AsyncIterator[Session]:
    """A session per request: plain transactions for reads, write transactions (SQLite
    ``BEGIN IMMEDIATE``) for everything else. Services commit; closing rolls back the rest.

    On SQLite, writers of this process also queue on ``write_gate`` (FIFO) so that they take
    the database lock in turn instead of polling it with SQLite's busy handler, whose growing
    sleeps give long tail latencies under concurrent writes."""
    if request.method in _READ_METHODS:
        session = registry.db.reader()
        try:
            yield session
        finally:
            session.close()
        return
    async with contextlib.AsyncExitStack() as stack:
        if registry.write_gate is not None:
            await stack.enter_async_context(registry.write_gate)
        session = registry.db.writer()
        try:
            yield session
        finally:
            session.close()


SessionDep = Annotated[Session, Depends(get_session)]

_bearer = HTTPBearer(auto_error=False, description="an API token or a trusted OIDC JWT")


async def current_user(
    registry: RegistryDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None:
        raise AuthenticationError("an 'Authorization: Bearer <token>' header is required")
    header = f"{credentials.scheme} {credentials.credentials}"
    cached = registry.authenticator.cached(header)
    if cached is not None:
        return cached
    return await run_in_threadpool(registry.authenticator.authenticate, header)


CurrentUser = Annotated[Principal, Depends(current_user)]


async def get_now(registry: RegistryDep) -> datetime:
    return registry.clock()


NowDep = Annotated[datetime, Depends(get_now)]
Limit = Annotated[int, Query(ge=1, le=200, description="page size")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="rows to skip")]
