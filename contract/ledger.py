"""The transparency log's leaf format (``sealbench/audit-leaf`` version 1), on the ground floor
so that every party recomputes a leaf the same way: the registry
(:mod:`sealbench.server.audit_format`, whose docstring describes the bytes), clients checking
receipts, and the aggregator checking that the debits a pool authorization spends are logged
(:mod:`sealbench.contract.pool_authorization`)."""

from __future__ import annotations

from typing import Final, Protocol

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.tlog import leaf_hash

__all__ = ["LEAF_FORMAT", "AuditRecord", "event_leaf_hash", "leaf_data"]

LEAF_FORMAT: Final = "sealbench/audit-leaf"


class AuditRecord(Protocol):
    """The stored fields of an event (an ORM row and the wire schema both satisfy it)."""

    @property
    def seq(self) -> int: ...
    @property
    def actor_id(self) -> int | None: ...
    @property
    def action(self) -> str: ...
    @property
    def entity_type(self) -> str: ...
    @property
    def entity_id(self) -> str: ...
    @property
    def payload(self) -> str: ...
    @property
    def occurred_at(self) -> str: ...


def leaf_data(event: AuditRecord) -> bytes:
    """The transparency-log leaf of ``event`` (module docstring)."""
    return canonical_json(
        {
            "format": LEAF_FORMAT,
            "v": 1,
            "seq": event.seq,
            "actor_id": event.actor_id,
            "action": event.action,
            "entity_type": event.entity_type,
            "entity_id": event.entity_id,
            "payload": event.payload,
            "occurred_at": event.occurred_at,
        }
    )


def event_leaf_hash(event: AuditRecord) -> bytes:
    return leaf_hash(leaf_data(event))
