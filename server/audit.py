"""The audit log: a hash chain appended in the same transaction as every mutation.

Event ``n`` (version 1) hashes, as ``"sha256:" + hex``, the canonical JSON of::

    {"v": 1, "seq": n, "actor_id": int|null, "action": str, "entity_type": str,
     "entity_id": str, "payload": <the stored canonical-JSON text>, "occurred_at": <ISO 8601 UTC>,
     "prev_hash": <hash of event n-1, or GENESIS_HASH for n = 1>}

The single ``audit_head`` row names the last event; appending locks it (``SELECT … FOR UPDATE``
on PostgreSQL; SQLite write transactions already hold the database lock), so concurrent
transactions queue and the chain never forks. :func:`verify_chain` recomputes every link and
raises :class:`~sealbench.server.errors.AuditChainBrokenError` naming the first broken one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import sha256_digest
from sealbench.server.errors import AuditChainBrokenError
from sealbench.server.models import AuditEvent, AuditHead

__all__ = [
    "AUDIT_FORMAT_VERSION",
    "GENESIS_HASH",
    "ChainLink",
    "append_event",
    "event_hash",
    "iter_events",
    "verify_chain",
    "verify_stored_chain",
]

AUDIT_FORMAT_VERSION = 1
GENESIS_HASH = "sha256:" + "0" * 64
_BATCH = 500


class ChainLink(Protocol):
    """What verification reads from a stored event (an :class:`AuditEvent` row satisfies it)."""

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
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


def event_hash(
    *,
    seq: int,
    actor_id: int | None,
    action: str,
    entity_type: str,
    entity_id: str,
    payload: str,
    occurred_at: str,
    prev_hash: str,
) -> str:
    """The hash of one event, as described in the module docstring."""
    return sha256_digest(
        canonical_json(
            {
                "v": AUDIT_FORMAT_VERSION,
                "seq": seq,
                "actor_id": actor_id,
                "action": action,
                "entity_type": entity_type,
                "entity_id": entity_id,
                "payload": payload,
                "occurred_at": occurred_at,
                "prev_hash": prev_hash,
            }
        )
    )


def append_event(
    session: Session,
    *,
    actor_id: int | None,
    action: str,
    entity_type: str,
    entity_id: object,
    payload: Mapping[str, object],
    now: datetime,
) -> AuditEvent:
    """Append one event to the chain inside ``session``'s transaction (not committed here)."""
    head = session.execute(
        select(AuditHead).where(AuditHead.id == 1).with_for_update()
    ).scalar_one()
    seq = head.seq + 1
    text = canonical_json(dict(payload)).decode("utf-8")
    occurred_at = now.astimezone(UTC).isoformat(timespec="microseconds")
    digest = event_hash(
        seq=seq,
        actor_id=actor_id,
        action=action,
        entity_type=entity_type,
        entity_id=str(entity_id),
        payload=text,
        occurred_at=occurred_at,
        prev_hash=head.hash,
    )
    event = AuditEvent(
        seq=seq,
        actor_id=actor_id,
        action=action,
        entity_type=entity_type,
        entity_id=str(entity_id),
        payload=text,
        occurred_at=occurred_at,
        prev_hash=head.hash,
        hash=digest,
    )
    session.add(event)
    head.seq = seq
    head.hash = digest
    return event


def verify_chain(links: Iterable[ChainLink], *, head: tuple[int, str] | None = None) -> int:
    """Recompute every link in order; return how many verified or raise
    :class:`AuditChainBrokenError` naming the first broken event. ``head`` (seq, hash), when
    given, must name the last link, so that dropping events from the end is detected too."""
    prev_seq, prev_hash = 0, GENESIS_HASH
    for link in links:
        if link.seq != prev_seq + 1:
            raise AuditChainBrokenError(prev_seq + 1, f"event missing (next stored is {link.seq})")
        if link.prev_hash != prev_hash:
            raise AuditChainBrokenError(link.seq, "prev_hash does not match the previous event")
        recomputed = event_hash(
            seq=link.seq,
            actor_id=link.actor_id,
            action=link.action,
            entity_type=link.entity_type,
            entity_id=link.entity_id,
            payload=link.payload,
            occurred_at=link.occurred_at,
            prev_hash=link.prev_hash,
        )
        if recomputed != link.hash:
            raise AuditChainBrokenError(link.seq, "content does not match its hash")
        prev_seq, prev_hash = link.seq, link.hash
    if head is not None and head != (prev_seq, prev_hash):
        raise AuditChainBrokenError(prev_seq + 1, f"head names event {head[0]}, chain ends earlier")
    return prev_seq


def iter_events(session: Session) -> Iterator[AuditEvent]:
    """Every stored event in chain order, read in bounded batches."""
    after = 0
    while True:
        batch = session.scalars(
            select(AuditEvent).where(AuditEvent.seq > after).order_by(AuditEvent.seq).limit(_BATCH)
        ).all()
        if not batch:
            return
        yield from batch
        after = batch[-1].seq


def verify_stored_chain(session: Session) -> int:
    """Verify the whole stored chain against its head row."""
    head = session.execute(select(AuditHead).where(AuditHead.id == 1)).scalar_one()
    return verify_chain(iter_events(session), head=(head.seq, head.hash))
