"""Audit-log wire types: events, the chain's verification, and the transparency log's signed
checkpoint, proofs, event ranges, witness cosignatures and result receipts. Hashes travel as
standard base64 of their 32 bytes; checkpoints as the signed note's exact text."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

from pydantic import Field, StringConstraints

from sealbench.server.schemas.common import WireModel

__all__ = [
    "MAX_EVENT_RANGE",
    "AuditCheckPublic",
    "AuditEventPublic",
    "AuditEventRange",
    "AuditVerification",
    "CheckpointPublic",
    "ConsistencyProofPublic",
    "CosignatureCreate",
    "CosignaturePublic",
    "InclusionProofPublic",
    "LogKeyPublic",
]

#: Events per ``GET /audit/events`` call.
MAX_EVENT_RANGE: Final = 1000
HashB64 = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]{43}=$")]
SignedNote = Annotated[str, StringConstraints(min_length=1, max_length=65_536)]


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


class LogKeyPublic(WireModel):
    """A key that signs (or signed) the log's checkpoints, as a C2SP verifier key; a
    rotated-in key carries the endorsement its predecessor and it signed."""

    verifier: str
    created_at: datetime
    retired_at: datetime | None = None
    endorsement: str | None = None


class CosignaturePublic(WireModel):
    """A witness's ``cosignature/v1`` line over this log's checkpoint of ``tree_size``."""

    witness: str = Field(description="the witness's verifier key (type 0x04)")
    tree_size: int
    root: HashB64
    timestamp: int
    signature: str = Field(description="the note signature line, without its newline")
    received_at: datetime


class CheckpointPublic(WireModel):
    """The latest signed checkpoint, the log's keys and each witness's latest cosignature."""

    checkpoint: SignedNote = Field(description="C2SP tlog-checkpoint signed note")
    origin: str
    tree_size: int
    root: HashB64
    keys: tuple[LogKeyPublic, ...]
    cosignatures: tuple[CosignaturePublic, ...] = ()


class ConsistencyProofPublic(WireModel):
    first: int
    second: int
    proof: tuple[HashB64, ...]


class InclusionProofPublic(WireModel):
    """An event, the proof that it is leaf ``leaf_index`` of the tree of ``tree_size`` leaves,
    and the signed checkpoint of that tree. For a result it is the hospital's receipt."""

    event: AuditEventPublic
    leaf_index: int
    tree_size: int
    proof: tuple[HashB64, ...]
    checkpoint: SignedNote
    result_id: int | None = None


class AuditEventRange(WireModel):
    """Events ``start + 1`` … ``end`` (leaves ``[start, end)``) of a log of ``tree_size``."""

    start: int
    end: int
    tree_size: int
    items: tuple[AuditEventPublic, ...]


class CosignatureCreate(WireModel):
    witness: Annotated[str, StringConstraints(min_length=1, max_length=400)]
    tree_size: int = Field(ge=0, le=2**48)
    signature: Annotated[str, StringConstraints(min_length=1, max_length=400)]


class AuditCheckPublic(WireModel):
    """The latest full recomputation of the log on the server."""

    checked_at: datetime
    tree_size: int
    ok: bool
    first_broken_seq: int | None = None
    reason: str | None = None
