"""The audit log, appended in the same transaction as every mutation: a hash chain (a local
integrity check) and, over the same events, the leaves of the transparency log's Merkle tree
(what clients verify; byte formats in :mod:`sealbench.server.audit_format`).

The single ``audit_head`` row names the last event, the tree's root and its right edge (a
:class:`~sealbench.crypto.tlog.CompactRange`); appending locks it (``SELECT … FOR UPDATE`` on
PostgreSQL; SQLite write transactions already hold the database lock), so concurrent
transactions queue and neither the chain nor the tree forks, loses or duplicates a leaf. Each
append writes the event, its leaf and every complete subtree it closes (``O(log n)`` rows, one
on average besides the leaf) and updates the head.

:func:`verify_stored_log` recomputes every link, every leaf and every stored subtree and the
head, and raises :class:`~sealbench.server.errors.AuditChainBrokenError` naming the first
broken event. It catches an edited or deleted row; it cannot catch an operator who rewrites
history consistently, which is what clients holding an earlier signed checkpoint catch.

An event's time is its day (:func:`event_time`): nothing in the log dates anything finer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.tlog import CompactRange
from sealbench.server.audit_format import (
    AUDIT_FORMAT_VERSION,
    GENESIS_HASH,
    AuditRecord,
    event_hash,
    event_leaf_hash,
)
from sealbench.server.errors import AuditChainBrokenError
from sealbench.server.logtree import nodes_named
from sealbench.server.models import AuditEvent, AuditHead, AuditNode

__all__ = [
    "AUDIT_FORMAT_VERSION",
    "GENESIS_HASH",
    "ChainLink",
    "NewEvent",
    "append_event",
    "append_events",
    "event_hash",
    "event_time",
    "iter_events",
    "verify_chain",
    "verify_stored_chain",
    "verify_stored_log",
]

_BATCH = 500


def event_time(now: datetime) -> str:
    """The ``occurred_at`` of an event appended at ``now``: its UTC **day** (midnight, in the
    format's ISO 8601 with microseconds, so a verifier of earlier events reads it unchanged).

    Every event, not only a run's (issue 40): when a run started or ended is a channel from the
    cases to everyone who reads the log (a model that spins on one patient's record lengthens
    its run), and it shows in far more than ``run.*`` events: the result's submission, the
    run's link to it, a pooled release, the grant a ``policy sync --watch`` applies when the run
    asks. A list of the actions that matter would have to foresee every new one; the day costs
    the log nothing it is for (who did what, in which order: the order is the sequence number)."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.isoformat(timespec="microseconds")



class ChainLink(AuditRecord, Protocol):
    """What verification reads from a stored event: the record (:class:`AuditRecord`, the one
    audit protocol) and its links in the hash chain. An :class:`AuditEvent` row satisfies it."""

    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


@dataclass(frozen=True)
class NewEvent:
    """An event to append (the log assigns its sequence number and hashes)."""

    actor_id: int | None
    action: str
    entity_type: str
    entity_id: object
    payload: Mapping[str, object]
    now: datetime


_EVENTS: Final = cast(Table, AuditEvent.__table__)
_HEAD: Final = cast(Table, AuditHead.__table__)
_NODES: Final = cast(Table, AuditNode.__table__)
# Core statements, built once (their compiled form is cached by SQLAlchemy): the head locked,
# the events and nodes inserted, the head moved. Through the session's connection, in its
# transaction, without the ORM's unit of work (issue 42: the ORM's flush of the event and the
# head was half of a dataset registration's CPU).
_LOCK_HEAD: Final = select(_HEAD.c.seq, _HEAD.c.hash, _HEAD.c.tree_edge) \
    .where(_HEAD.c.id == 1).with_for_update()
_INSERT_EVENT: Final = insert(_EVENTS)
_INSERT_NODE: Final = insert(_NODES)
_MOVE_HEAD: Final = update(_HEAD).where(_HEAD.c.id == 1).values(
    seq=bindparam("new_seq"), hash=bindparam("new_hash"), tree_root=bindparam("new_root"),
    tree_edge=bindparam("new_edge"))


def append_events(session: Session, events: Sequence[NewEvent]) -> list[AuditEvent]:
    """Append ``events`` in order inside ``session``'s transaction (not committed here): the
    chain links, the tree's leaves and completed subtrees, and the new head. Returns the
    events as rows (not attached to the session: they are written already)."""
    head = session.execute(_LOCK_HEAD).one()
    edge = CompactRange.from_bytes(head.seq, head.tree_edge)
    seq, prev = head.seq, head.hash
    rows: list[AuditEvent] = []
    values: list[dict[str, Any]] = []
    nodes: list[dict[str, Any]] = []
    for new in events:
        seq += 1
        text = canonical_json(dict(new.payload)).decode("utf-8")
        occurred_at = event_time(new.now)
        fields = {"seq": seq, "actor_id": new.actor_id, "action": new.action,
                  "entity_type": new.entity_type, "entity_id": str(new.entity_id),
                  "payload": text, "occurred_at": occurred_at, "prev_hash": prev}
        event = AuditEvent(**fields)
        event.hash = event_hash(
            seq=seq,
            actor_id=event.actor_id,
            action=event.action,
            entity_type=event.entity_type,
            entity_id=event.entity_id,
            payload=text,
            occurred_at=occurred_at,
            prev_hash=prev,
        )
        for (level, idx), value in edge.append(event_leaf_hash(event)):
            nodes.append({"level": level, "idx": idx, "hash": value})
        rows.append(event)
        values.append({**fields, "hash": event.hash})
        prev = event.hash
    if not rows:
        return rows
    session.execute(_INSERT_EVENT, values)
    if nodes:
        session.execute(_INSERT_NODE, nodes)
    session.execute(_MOVE_HEAD, {"new_seq": seq, "new_hash": prev, "new_root": edge.root(),
                                 "new_edge": edge.to_bytes()})
    return rows


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
    """Append one event inside ``session``'s transaction (not committed here)."""
    return append_events(
        session, [NewEvent(actor_id, action, entity_type, entity_id, payload, now)]
    )[0]


def _check_link(link: ChainLink, prev_seq: int, prev_hash: str) -> None:
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


def verify_chain(links: Iterable[ChainLink], *, head: tuple[int, str] | None = None) -> int:
    """Recompute every link in order; return how many verified or raise
    :class:`AuditChainBrokenError` naming the first broken event. ``head`` (seq, hash), when
    given, must name the last link, so that dropping events from the end is detected too."""
    prev_seq, prev_hash = 0, GENESIS_HASH
    for link in links:
        _check_link(link, prev_seq, prev_hash)
        prev_seq, prev_hash = link.seq, link.hash
    if head is not None and head != (prev_seq, prev_hash):
        raise AuditChainBrokenError(prev_seq + 1, f"head names event {head[0]}, chain ends earlier")
    return prev_seq


def iter_events(session: Session, *, batch: int = _BATCH) -> Iterator[AuditEvent]:
    """Every stored event in chain order, read in bounded batches."""
    after = 0
    while True:
        rows = session.scalars(
            select(AuditEvent).where(AuditEvent.seq > after).order_by(AuditEvent.seq).limit(batch)
        ).all()
        if not rows:
            return
        yield from rows
        after = rows[-1].seq


def _event_batches(session: Session) -> Iterator[Sequence[Any]]:
    columns = [
        AuditEvent.seq, AuditEvent.actor_id, AuditEvent.action, AuditEvent.entity_type,
        AuditEvent.entity_id, AuditEvent.payload, AuditEvent.occurred_at, AuditEvent.prev_hash,
        AuditEvent.hash,
    ]
    after = 0
    while True:
        rows = session.execute(
            select(*columns).where(AuditEvent.seq > after).order_by(AuditEvent.seq).limit(_BATCH)
        ).all()
        if not rows:
            return
        yield rows
        after = rows[-1].seq


def _stored_nodes(
    session: Session, keys: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], bytes]:
    if not keys:
        return {}
    rows = session.execute(
        select(AuditNode.level, AuditNode.idx, AuditNode.hash).where(nodes_named(keys))
    ).all()
    return {(r.level, r.idx): bytes(r.hash) for r in rows}


def verify_stored_log(session: Session) -> int:
    """Verify the stored chain, every leaf, every stored subtree and the head; return the
    number of events."""
    head = session.execute(select(AuditHead).where(AuditHead.id == 1)).scalar_one()
    edge = CompactRange()
    prev_seq, prev_hash = 0, GENESIS_HASH
    for rows in _event_batches(session):
        first = rows[0].seq
        leaves = _stored_nodes(session, [(0, first - 1 + i) for i in range(len(rows))])
        completed: list[tuple[tuple[int, int], bytes, int]] = []
        for row in rows:
            _check_link(row, prev_seq, prev_hash)
            leaf = event_leaf_hash(row)
            stored = leaves.get((0, row.seq - 1))
            if stored is None:
                raise AuditChainBrokenError(row.seq, "its leaf is missing from the log's tree")
            if stored != leaf:
                raise AuditChainBrokenError(row.seq, "content does not match its leaf hash")
            completed.extend((key, value, row.seq) for key, value in edge.append(leaf)[1:])
            prev_seq, prev_hash = row.seq, row.hash
        stored_nodes = _stored_nodes(session, [key for key, _, _ in completed])
        for key, value, seq in completed:
            if stored_nodes.get(key) != value:
                raise AuditChainBrokenError(
                    seq, f"the log's tree node {key} does not match the events below it"
                )
    if (head.seq, head.hash) != (prev_seq, prev_hash):
        raise AuditChainBrokenError(
            prev_seq + 1, f"head names event {head.seq}, chain ends earlier"
        )
    if bytes(head.tree_root) != edge.root() or bytes(head.tree_edge) != edge.to_bytes():
        raise AuditChainBrokenError(
            prev_seq, "the tree head's root does not match the events (the head was altered)"
        )
    return prev_seq


#: The name callers used before the transparency log: it now verifies the tree too.
verify_stored_chain = verify_stored_log
