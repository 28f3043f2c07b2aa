"""``/api/v1/audit``: page through the hash chain and verify it (admins only: payloads name
every actor and change)."""

from __future__ import annotations

from fastapi import APIRouter

from sealbench.server.deps import CurrentUser, Limit, Offset, SessionDep
from sealbench.server.errors import AuditChainBrokenError
from sealbench.server.models import AuditEvent
from sealbench.server.routers._common import ERRORS, in_thread, to_page
from sealbench.server.schemas import AuditEventPublic, AuditVerification, Page
from sealbench.server.services import audit

__all__ = ["router"]

router = APIRouter(prefix="/audit", tags=["audit"], responses=ERRORS)


def _public(row: AuditEvent) -> AuditEventPublic:
    return AuditEventPublic.model_validate(row, from_attributes=True)


@router.get("")
async def list_events(
    session: SessionDep, user: CurrentUser, limit: Limit = 50, offset: Offset = 0
) -> Page[AuditEventPublic]:
    return await in_thread(
        session,
        lambda: to_page(
            audit.list_page(session, user, limit=limit, offset=offset),
            _public,
            Page[AuditEventPublic],
        ),
    )


@router.get("/verify")
async def verify(session: SessionDep, user: CurrentUser) -> AuditVerification:
    def run() -> AuditVerification:
        try:
            count = audit.verify(session, user)
        except AuditChainBrokenError as exc:
            return AuditVerification(
                ok=False, events_verified=exc.seq - 1, first_broken_seq=exc.seq, reason=exc.reason
            )
        return AuditVerification(ok=True, events_verified=count)

    return await in_thread(session, run)
