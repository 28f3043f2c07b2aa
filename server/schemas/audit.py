"""Audit-log wire types."""

from __future__ import annotations

from sealbench.server.schemas.common import WireModel

__all__ = ["AuditEventPublic", "AuditVerification"]


class AuditEventPublic(WireModel):
    seq: int
    actor_id: int | None
    action: str
    entity_type: str
    entity_id: str
    payload: str
    occurred_at: str
    prev_hash: str
    hash: str


class AuditVerification(WireModel):
    """The outcome of recomputing the chain; ``first_broken_seq`` names the first bad link."""

    ok: bool
    events_verified: int
    first_broken_seq: int | None = None
    reason: str | None = None
