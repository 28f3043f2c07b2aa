"""Reading the audit log and its transparency log (appending lives in
:mod:`sealbench.server.audit`).

Who may read what (docs/server.md): the signed checkpoint, the log's keys, witnesses'
cosignatures and consistency proofs carry only sizes and hashes, so anyone signed in reads them
(and may submit a cosignature, which is stored only if it verifies over this log's checkpoint);
an event with its inclusion proof is readable by admins and by the event's actor; a result's
receipt by whoever may read the result; event pages, ranges and the server-side recomputation
by admins only, because payloads name every actor and change.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import (
    ALG_COSIGNATURE,
    Checkpoint,
    NoteSignature,
    SignerKey,
    VerifierKey,
    sign_checkpoint,
    verify_cosignature,
)
from sealbench.server.audit import verify_stored_log
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    AuditChainBrokenError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
)
from sealbench.server.logtree import StoredTree, TreeHead
from sealbench.server.models import AuditCheck, AuditCosignature, AuditEvent, LogKey
from sealbench.server.services import results
from sealbench.server.services._common import PageOf, commit

__all__ = [
    "CLOCK_SKEW_S",
    "Inclusion",
    "SignedHead",
    "add_cosignature",
    "checkpoint",
    "consistency",
    "event_range",
    "inclusion",
    "latest_check",
    "latest_cosignatures",
    "list_page",
    "published_keys",
    "receipt",
    "record_check",
    "verify",
]

#: Cosignatures stamped further in the future than this are refused.
CLOCK_SKEW_S = 300
_MAX_WITNESSES = 50


def _require_admin(actor: Principal) -> None:
    if not actor.is_admin:
        raise PermissionDeniedError("only an admin reads the audit log")


def list_page(session: Session, actor: Principal, *, limit: int, offset: int) -> PageOf[AuditEvent]:
    """Events ``offset + 1`` … ``offset + limit``. Sequence numbers run 1, 2, 3, … so the page
    is found through the primary key (``seq > offset``) instead of counting ``offset`` rows:
    any page of the log costs the same."""
    _require_admin(actor)
    rows = tuple(session.scalars(
        select(AuditEvent).where(AuditEvent.seq > offset).order_by(AuditEvent.seq)
        .limit(limit + 1)
    ).all())
    more = len(rows) > limit
    return PageOf(rows[:limit], limit, offset, offset + limit if more else None)


def verify(session: Session, actor: Principal) -> int:
    """Number of events verified, or :class:`AuditChainBrokenError` naming the first bad one
    (the chain, every leaf and stored subtree of the tree, and the head)."""
    _require_admin(actor)
    return verify_stored_log(session)


def record_check(
    session: Session, *, actor_id: int | None, size: int, error: AuditChainBrokenError | None,
    now: datetime,
) -> None:
    """Store the outcome of a full recomputation (the dashboard shows the latest)."""
    session.add(
        AuditCheck(
            checked_at=now,
            actor_id=actor_id,
            tree_size=size,
            ok=error is None,
            first_broken_seq=None if error is None else error.seq,
            reason=None if error is None else error.reason[:500],
        )
    )
    commit(session, "audit check")


def latest_check(session: Session) -> AuditCheck | None:
    return session.scalars(select(AuditCheck).order_by(AuditCheck.id.desc()).limit(1)).first()


@dataclass(frozen=True)
class SignedHead:
    """A checkpoint of this log and its signed note."""

    checkpoint: Checkpoint
    note: bytes


def _sign(
    tree: StoredTree, signer: SignerKey, size: int | None = None, head: TreeHead | None = None
) -> SignedHead:
    head = head or tree.head()
    size = head.size if size is None else size
    cp = Checkpoint(signer.name, size, tree.root_at(size, head))
    return SignedHead(cp, sign_checkpoint(cp, signer))


def checkpoint(session: Session, signer: SignerKey) -> SignedHead:
    """The latest tree head, signed now (Ed25519 is deterministic: every server process signs
    the same tree to the same bytes)."""
    return _sign(StoredTree(session), signer)


def published_keys(session: Session) -> list[LogKey]:
    return list(session.scalars(select(LogKey).order_by(LogKey.id)).all())


def latest_cosignatures(session: Session) -> list[AuditCosignature]:
    """Each witness's cosignature of the largest tree it cosigned."""
    largest = (
        select(AuditCosignature.witness, func.max(AuditCosignature.tree_size).label("size"))
        .group_by(AuditCosignature.witness)
        .subquery()
    )
    return list(
        session.scalars(
            select(AuditCosignature)
            .join(
                largest,
                (largest.c.witness == AuditCosignature.witness)
                & (largest.c.size == AuditCosignature.tree_size),
            )
            .order_by(AuditCosignature.tree_size.desc(), AuditCosignature.id)
            .limit(_MAX_WITNESSES)
        ).all()
    )


def consistency(session: Session, first: int, second: int) -> tuple[bytes, ...]:
    return StoredTree(session).consistency(first, second)


@dataclass(frozen=True)
class Inclusion:
    event: AuditEvent
    leaf_index: int
    tree_size: int
    proof: tuple[bytes, ...]
    checkpoint: bytes
    result_id: int | None = None


def _prove(
    session: Session, signer: SignerKey, event: AuditEvent, tree_size: int | None
) -> Inclusion:
    tree = StoredTree(session)
    head = tree.head()
    signed = _sign(tree, signer, tree_size, head)
    size = signed.checkpoint.size
    proof = tree.inclusion(event.seq - 1, size, head)
    return Inclusion(event, event.seq - 1, size, proof, signed.note)


def inclusion(
    session: Session, actor: Principal, signer: SignerKey, seq: int, tree_size: int | None
) -> Inclusion:
    """Event ``seq`` and its inclusion proof in the tree of ``tree_size`` (default: now)."""
    event = session.get(AuditEvent, seq)
    if event is None:
        raise NotFoundError("audit event", seq)
    if not actor.is_admin and event.actor_id != actor.user_id:
        raise PermissionDeniedError(
            "an audit event with its proof is readable by admins and by the event's actor"
        )
    return _prove(session, signer, event, tree_size)


def receipt(
    session: Session, actor: Principal, signer: SignerKey, result_id: int
) -> Inclusion:
    """The receipt of a result: its ``result.submit`` event, proven in the current tree."""
    results.get(session, actor, result_id)  # the result's own read rule
    event = session.scalars(
        select(AuditEvent).where(
            AuditEvent.entity_type == "result",
            AuditEvent.entity_id == str(result_id),
            AuditEvent.action == "result.submit",
        )
    ).first()
    if event is None:
        raise NotFoundError("audit event of result", result_id)
    proven = _prove(session, signer, event, None)
    return Inclusion(proven.event, proven.leaf_index, proven.tree_size, proven.proof,
                     proven.checkpoint, result_id)


_EVENT_COLUMNS = (
    AuditEvent.seq, AuditEvent.actor_id, AuditEvent.action, AuditEvent.entity_type,
    AuditEvent.entity_id, AuditEvent.payload, AuditEvent.occurred_at, AuditEvent.prev_hash,
    AuditEvent.hash,
)


def event_range(
    session: Session, actor: Principal, start: int, end: int
) -> tuple[int, list[dict[str, object]]]:
    """The tree size and the events that are leaves ``[start, end)`` (admins only), as plain
    column mappings: a whole-log download is read without building ORM objects."""
    _require_admin(actor)
    size = StoredTree(session).head().size
    rows = session.execute(
        select(*_EVENT_COLUMNS)
        .where(AuditEvent.seq > start, AuditEvent.seq <= min(end, size))
        .order_by(AuditEvent.seq)
    ).all()
    return size, [dict(row._mapping) for row in rows]


def add_cosignature(
    session: Session,
    actor: Principal,
    signer: SignerKey,
    *,
    witness: str,
    tree_size: int,
    signature: str,
    now: datetime,
) -> tuple[AuditCosignature, bool]:
    """Verify a witness's cosignature over this log's checkpoint of ``tree_size`` and store it;
    returns the stored row and whether it is new (a repeat of a stored one is not an error)."""
    try:
        key = VerifierKey.from_string(witness)
        line = NoteSignature.from_line(signature.rstrip("\n"))
    except CryptoError as exc:
        raise InvalidRequestError(f"not a cosignature: {exc}") from exc
    if key.alg != ALG_COSIGNATURE:
        raise InvalidRequestError(
            f"{key.label} is a note signing key; a witness cosigns with a type 0x04 key"
        )
    tree = StoredTree(session)
    cp = Checkpoint(signer.name, tree_size, tree.root_at(tree_size))
    try:
        stamp = verify_cosignature(cp, line, key)
    except CryptoError as exc:
        raise InvalidRequestError(
            f"the cosignature does not verify over this log's checkpoint of size {tree_size}: "
            f"{exc}"
        ) from exc
    if stamp > now.timestamp() + CLOCK_SKEW_S:
        raise InvalidRequestError(
            f"the cosignature is dated {stamp}, later than the registry's clock allows"
        )
    stored = session.scalars(
        select(AuditCosignature).where(
            AuditCosignature.witness == key.to_string(), AuditCosignature.tree_size == tree_size
        )
    ).first()
    if stored is not None:
        return stored, False
    row = AuditCosignature(
        witness=key.to_string(),
        tree_size=tree_size,
        root=cp.root_hash,
        timestamp=stamp,
        signature=line.line().rstrip("\n"),
        submitted_by_id=actor.user_id,
        received_at=now,
    )
    session.add(row)
    commit(session, "cosignature")
    return row, True


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
