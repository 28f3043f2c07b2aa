"""``/api/v1/audit``: the audit log and its transparency log. Pages, ranges and the server-side
recomputation are for admins (payloads name every actor and change); the signed checkpoint,
consistency proofs and cosignatures for anyone signed in; an event's inclusion proof for admins
and the event's actor; a result's receipt for the result's readers (rules in
:mod:`sealbench.server.services.audit`)."""

from __future__ import annotations

import contextlib
import json
from typing import Annotated

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from sealbench.server.deps import CurrentUser, Limit, NowDep, Offset, RegistryDep, SessionDep
from sealbench.server.errors import AuditChainBrokenError, InvalidRequestError
from sealbench.server.models import AuditCosignature, AuditEvent, LogKey
from sealbench.server.routers._common import ERRORS, IdPath, in_thread, to_page
from sealbench.server.schemas import Page
from sealbench.server.schemas.audit import (
    MAX_EVENT_RANGE,
    AuditEventPublic,
    AuditEventRange,
    AuditVerification,
    CheckpointPublic,
    ConsistencyProofPublic,
    CosignatureCreate,
    CosignaturePublic,
    InclusionProofPublic,
    LogKeyPublic,
)
from sealbench.server.services import audit
from sealbench.server.services.audit import b64

__all__ = ["router"]

router = APIRouter(prefix="/audit", tags=["audit"], responses=ERRORS)

TreeSize = Annotated[int, Query(ge=0, le=2**48, description="a tree size (number of events)")]
OptionalTreeSize = Annotated[
    int | None, Query(ge=1, le=2**48, description="the tree to prove in (default: the latest)")
]


def _public(row: AuditEvent) -> AuditEventPublic:
    return AuditEventPublic.model_validate(row, from_attributes=True)


def _key(row: LogKey) -> LogKeyPublic:
    return LogKeyPublic(verifier=row.verifier, created_at=row.created_at,
                        retired_at=row.retired_at, endorsement=row.endorsement)


def _cosignature(row: AuditCosignature) -> CosignaturePublic:
    return CosignaturePublic(
        witness=row.witness, tree_size=row.tree_size, root=b64(bytes(row.root)),
        timestamp=row.timestamp, signature=row.signature, received_at=row.received_at,
    )


def _inclusion(proven: audit.Inclusion) -> InclusionProofPublic:
    return InclusionProofPublic(
        event=_public(proven.event),
        leaf_index=proven.leaf_index,
        tree_size=proven.tree_size,
        proof=tuple(b64(h) for h in proven.proof),
        checkpoint=proven.checkpoint.decode("utf-8"),
        result_id=proven.result_id,
    )


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
async def verify(
    session: SessionDep, user: CurrentUser, registry: RegistryDep, now: NowDep
) -> AuditVerification:
    """Recompute the whole log on the server (admins); the outcome is recorded for the
    dashboard. Clients verify on their side with ``sealbench audit verify``."""

    def run() -> tuple[int, AuditChainBrokenError | None]:
        try:
            return audit.verify(session, user), None
        except AuditChainBrokenError as exc:
            return exc.seq - 1, exc

    count, error = await in_thread(session, run)

    def record() -> None:
        with registry.db.writer() as writer:
            audit.record_check(writer, actor_id=user.user_id, size=count, error=error, now=now)

    async with contextlib.AsyncExitStack() as stack:
        if registry.write_gate is not None:
            await stack.enter_async_context(registry.write_gate)
        await run_in_threadpool(record)
    if error is not None:
        return AuditVerification(
            ok=False, events_verified=count, first_broken_seq=error.seq, reason=error.reason
        )
    return AuditVerification(ok=True, events_verified=count)


@router.get("/checkpoint")
async def checkpoint(
    session: SessionDep, user: CurrentUser, registry: RegistryDep
) -> CheckpointPublic:
    """The latest signed checkpoint (C2SP tlog-checkpoint), the log's keys and the witnesses'
    latest cosignatures."""

    def run() -> CheckpointPublic:
        signed = audit.checkpoint(session, registry.log_signer)
        return CheckpointPublic(
            checkpoint=signed.note.decode("utf-8"),
            origin=signed.checkpoint.origin,
            tree_size=signed.checkpoint.size,
            root=b64(signed.checkpoint.root_hash),
            keys=tuple(_key(k) for k in audit.published_keys(session)),
            cosignatures=tuple(_cosignature(c) for c in audit.latest_cosignatures(session)),
        )

    return await in_thread(session, run)


@router.get("/consistency")
async def consistency(
    session: SessionDep, user: CurrentUser, first: TreeSize, second: TreeSize
) -> ConsistencyProofPublic:
    """The proof that the tree of ``second`` events extends the tree of ``first`` events."""

    def run() -> ConsistencyProofPublic:
        proof = audit.consistency(session, first, second)
        return ConsistencyProofPublic(first=first, second=second,
                                      proof=tuple(b64(h) for h in proof))

    return await in_thread(session, run)


@router.get("/inclusion")
async def inclusion(
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    seq: Annotated[int, Query(ge=1, le=2**48, description="the event's sequence number")],
    tree_size: OptionalTreeSize = None,
) -> InclusionProofPublic:
    """Event ``seq`` (leaf ``seq - 1``), its inclusion proof and the signed checkpoint of the
    tree it is proven in (admins and the event's actor)."""
    return await in_thread(
        session,
        lambda: _inclusion(audit.inclusion(session, user, registry.log_signer, seq, tree_size)),
    )


@router.get("/receipts/{result_id}")
async def receipt(
    result_id: IdPath, session: SessionDep, user: CurrentUser, registry: RegistryDep
) -> InclusionProofPublic:
    """A result's receipt: its ``result.submit`` event proven in the latest checkpoint (the
    result's readers: the dataset's owner and the benchmark's owner)."""
    return await in_thread(
        session,
        lambda: _inclusion(audit.receipt(session, user, registry.log_signer, result_id)),
    )


@router.get("/events", response_model=AuditEventRange)
async def events(
    session: SessionDep,
    user: CurrentUser,
    start: Annotated[int, Query(ge=0, le=2**48, description="first leaf index")],
    end: Annotated[int, Query(ge=1, le=2**48, description="leaf index after the last")],
) -> Response:
    """Events by leaf index ``[start, end)``, at most 1000 (admins). The body is serialised in
    the worker thread, so that a client verifying the whole log keeps the event loop free for
    everyone else's requests."""
    if not 0 < end - start <= MAX_EVENT_RANGE:
        raise InvalidRequestError(
            f"a range holds 1 to {MAX_EVENT_RANGE} events, received [{start}, {end})"
        )

    def run() -> Response:
        size, rows = audit.event_range(session, user, start, end)
        # the rows are the schema's fields exactly (AuditEventRange, as documented above)
        body = {"start": start, "end": min(end, max(size, start)), "tree_size": size,
                "items": rows}
        return Response(json.dumps(body, separators=(",", ":"), ensure_ascii=False),
                        media_type="application/json")

    return await in_thread(session, run)


@router.post("/cosignatures", status_code=201)
async def cosign(
    body: CosignatureCreate,
    session: SessionDep,
    user: CurrentUser,
    registry: RegistryDep,
    now: NowDep,
    response: Response,
) -> CosignaturePublic:
    """Store a witness's ``cosignature/v1`` over this log's checkpoint of ``tree_size``
    (anyone signed in; verified first). 201 when new, 200 when already stored."""

    def run() -> CosignaturePublic:
        row, created = audit.add_cosignature(
            session, user, registry.log_signer, witness=body.witness,
            tree_size=body.tree_size, signature=body.signature, now=now,
        )
        if not created:
            response.status_code = 200
        return _cosignature(row)

    return await in_thread(session, run)
