"""The audit trail page (admins): the latest signed checkpoint, the witnesses that cosigned the
log and whether the log is still consistent with what each of them saw, the latest full
recomputation, and a page of events, each rehashed against its chain link and its leaf.

Nothing here recomputes the whole log per view: the checkpoint and each witness cost ``O(log
n)`` reads, the page ``O(page)``, so the page stays fast at any size; the full recomputation is
``sealbench-server audit verify`` or ``GET /api/v1/audit/verify`` (recorded, shown here), and the
check that matters against the operator is the clients' (``sealbench audit verify``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Query, Request
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.responses import Response

from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import (
    Checkpoint,
    NoteSignature,
    SignerKey,
    VerifierKey,
    open_checkpoint,
    verify_cosignature,
)
from sealbench.crypto.tlog import verify_consistency
from sealbench.server.audit_format import event_hash, event_leaf_hash
from sealbench.server.auth import Principal
from sealbench.server.logtree import StoredTree
from sealbench.server.models import AuditCosignature, AuditEvent, AuditNode
from sealbench.server.services import audit
from sealbench.server.services.audit import b64
from sealbench.server.web._state import DashboardState, registry_of, render_page

__all__ = ["AUDIT_PAGE", "AuditStatus", "WitnessView", "audit_page"]

AUDIT_PAGE = 50


@dataclass(frozen=True)
class AuditStatus:
    """The verdict shown at the top of the page."""

    ok: bool
    verified: int
    first_broken_seq: int | None
    reason: str | None


@dataclass(frozen=True)
class WitnessView:
    label: str
    tree_size: int
    cosigned_at: datetime
    consistent: bool
    problem: str | None


def _witness(
    row: AuditCosignature, origin: str, head_size: int, head_root: bytes, tree: StoredTree
) -> WitnessView:
    try:
        key = VerifierKey.from_string(row.witness)
        cp = Checkpoint(origin, row.tree_size, bytes(row.root))
        verify_cosignature(cp, NoteSignature.from_line(row.signature), key)
        label = key.label
    except CryptoError as exc:
        return WitnessView(row.witness[:40], row.tree_size, datetime.fromtimestamp(
            row.timestamp, UTC), False, f"its stored cosignature does not verify: {exc}")
    try:
        verify_consistency(row.tree_size, head_size, bytes(row.root), head_root,
                           tree.consistency(row.tree_size, head_size))
    except CryptoError:
        return WitnessView(label, row.tree_size, datetime.fromtimestamp(row.timestamp, UTC),
                           False, "the log no longer extends the checkpoint this witness "
                           "cosigned: history before it was rewritten")
    return WitnessView(label, row.tree_size, datetime.fromtimestamp(row.timestamp, UTC),
                       True, None)


def _rehash(session: Session, rows: tuple[AuditEvent, ...]) -> tuple[int, str] | None:
    """The first event on the page whose stored content no longer matches its chain hash or
    its leaf in the tree, with the reason."""
    if not rows:
        return None
    leaves = {
        r.idx: bytes(r.hash)
        for r in session.execute(
            select(AuditNode.idx, AuditNode.hash).where(
                AuditNode.level == 0,
                AuditNode.idx >= rows[0].seq - 1,
                AuditNode.idx <= rows[-1].seq - 1,
            )
        )
    }
    for row in rows:
        recomputed = event_hash(
            seq=row.seq, actor_id=row.actor_id, action=row.action,
            entity_type=row.entity_type, entity_id=row.entity_id, payload=row.payload,
            occurred_at=row.occurred_at, prev_hash=row.prev_hash,
        )
        if recomputed != row.hash:
            return row.seq, "content does not match its hash"
        if leaves.get(row.seq - 1) != event_leaf_hash(row):
            return row.seq, "content does not match its leaf hash"
    return None


def _build(
    session: Session, viewer: Principal, signer_key: SignerKey, offset: int
) -> tuple[str, dict[str, Any]]:
    page = audit.list_page(session, viewer, limit=AUDIT_PAGE, offset=offset)  # admins only
    tree = StoredTree(session)
    signed = audit.checkpoint(session, signer_key)
    keys = audit.published_keys(session)
    published = [VerifierKey.from_string(k.verifier) for k in keys]
    signature_problem = None
    try:
        opened = open_checkpoint(signed.note, published, origin=signer_key.name)
        signed_by = ", ".join(k.label for k in opened.signed_by)
    except CryptoError as exc:
        signed_by, signature_problem = "", str(exc)
    cp = signed.checkpoint
    witnesses = [
        _witness(row, cp.origin, cp.size, cp.root_hash, tree)
        for row in audit.latest_cosignatures(session)
    ]
    check = audit.latest_check(session)
    on_page = _rehash(session, page.items)
    broken: tuple[int, str] | None = on_page
    if broken is None and check is not None and not check.ok and check.first_broken_seq:
        broken = (check.first_broken_seq, check.reason or "broken")
    status = AuditStatus(
        ok=broken is None and signature_problem is None and all(w.consistent for w in witnesses),
        verified=cp.size if broken is None else broken[0] - 1,
        first_broken_seq=None if broken is None else broken[0],
        reason=None if broken is None else broken[1],
    )
    broken_offset, broken_event = None, None
    if status.first_broken_seq is not None:
        broken_offset = (status.first_broken_seq - 1) // AUDIT_PAGE * AUDIT_PAGE
        broken_event = session.get(AuditEvent, status.first_broken_seq)
    return "audit.html", {
        "status": status,
        "page": page,
        "checkpoint": cp,
        "checkpoint_root": b64(cp.root_hash),
        "checkpoint_note": signed.note.decode("utf-8"),
        "signed_by": signed_by,
        "signature_problem": signature_problem,
        "keys": keys,
        "witnesses": witnesses,
        "check": check,
        "broken_offset": broken_offset,
        "broken_event": broken_event,
        "audit_page": AUDIT_PAGE,
        "nav": "audit",
    }


def audit_page(state: DashboardState) -> APIRouter:
    router = APIRouter()

    @router.get("/audit")
    async def audit_trail(
        request: Request, offset: int = Query(0, ge=0, le=1_000_000_000)
    ) -> Response:
        signer_key = registry_of(request).log_signer
        return await render_page(
            state, request, lambda session, viewer: _build(session, viewer, signer_key, offset)
        )

    return router
