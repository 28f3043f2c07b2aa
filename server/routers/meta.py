"""``/health`` and ``/version``: unauthenticated, no database writes."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from sqlalchemy import text

from sealbench.server.deps import SessionDep
from sealbench.server.migrate import head_revision
from sealbench.server.schemas import Health, VersionInfo

__all__ = ["API_VERSION", "router"]

API_VERSION = "v1"
router = APIRouter(tags=["meta"])


def _package_version() -> str:
    try:
        return version("sealbench")
    except PackageNotFoundError:
        return "unknown"


@router.get("/health")
def health(session: SessionDep) -> Health:
    session.execute(text("SELECT 1"))
    return Health(status="ok")


@router.get("/version")
def version_info() -> VersionInfo:
    return VersionInfo(version=_package_version(), api=API_VERSION, schema_revision=head_revision())
