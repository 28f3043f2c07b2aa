"""``/health`` and ``/version``: unauthenticated, no database writes."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from sqlalchemy import text

from sealbench.server.deps import SessionDep
from sealbench.server.migrate import head_revision
from sealbench.server.routers._common import in_thread
from sealbench.server.schemas import Health, VersionInfo

__all__ = ["API_VERSION", "router"]

API_VERSION = "v1"
router = APIRouter(tags=["meta"])


@functools.cache
def _version_info() -> VersionInfo:
    try:
        installed = version("sealbench")
    except PackageNotFoundError:
        installed = "unknown"
    return VersionInfo(version=installed, api=API_VERSION, schema_revision=head_revision())


@router.get("/health")
async def health(session: SessionDep) -> Health:
    def probe() -> Health:
        session.execute(text("SELECT 1"))
        return Health(status="ok")

    return await in_thread(session, probe)


@router.get("/version")
async def version_info() -> VersionInfo:
    return _version_info()
