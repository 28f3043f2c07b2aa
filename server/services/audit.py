"""Reading and verifying the audit log (appending lives in :mod:`sealbench.server.audit`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from sealbench.server.audit import verify_stored_chain
from sealbench.server.auth import Principal
from sealbench.server.errors import PermissionDeniedError
from sealbench.server.models import AuditEvent
from sealbench.server.services._common import PageOf, paged

__all__ = ["list_page", "verify"]


def _require_admin(actor: Principal) -> None:
    if not actor.is_admin:
        raise PermissionDeniedError("only an admin reads the audit log")


def list_page(session: Session, actor: Principal, *, limit: int, offset: int) -> PageOf[AuditEvent]:
    _require_admin(actor)
    return paged(session, select(AuditEvent).order_by(AuditEvent.seq), limit=limit, offset=offset)


def verify(session: Session, actor: Principal) -> int:
    """Number of events verified, or :class:`AuditChainBrokenError` naming the first bad one."""
    _require_admin(actor)
    return verify_stored_chain(session)
