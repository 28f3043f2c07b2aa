"""A result's receipt: the proof, kept by the hospital, that the registry logged its accepted
result, checkable by anyone who trusts the registry's log key.

Format ``sealbench/audit-receipt`` version 1 (JSON, one file per result, ``receipts/
result-<id>.json`` in the profile's data directory, mode 0600)::

    {"format": "sealbench/audit-receipt", "version": 1, "registry": <URL>, "origin": <log>,
     "result_id": int, "event": <the result.submit audit event, as served>,
     "leaf_index": int, "tree_size": int, "proof": [<base64 hash>, ...],
     "checkpoint": <the signed checkpoint of tree_size, C2SP note text>,
     "expected": {"sealed_result_digest": ..., "summary_digest": ...,
                  "attestation_token_digest": ...} | null}

:func:`verify_receipt` checks, in order: the checkpoint is signed by a trusted key for the
receipt's log; the event is leaf ``leaf_index`` of that tree (RFC 9162 inclusion); the event
is the ``result.submit`` of ``result_id``; and its logged digests are those in ``expected``
(the digests of the result this hospital holds). Each failure raises; nothing returns a bool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.client.errors import ConfigError, LogProofError
from sealbench.client.registry.logstate import write_private
from sealbench.client.registry.transparency import LogMonitor, b64decode_hash, open_signed
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import VerifiedCheckpoint, VerifierKey
from sealbench.crypto.tlog import verify_inclusion
from sealbench.server.audit_format import event_leaf_hash, result_digests
from sealbench.server.schemas.audit import AuditEventPublic, InclusionProofPublic

__all__ = [
    "Receipt",
    "ReceiptStore",
    "expected_digests",
    "fetch_receipt",
    "prove_receipt",
    "verify_receipt",
]

_MAX_RECEIPT: Final = 1 << 20


class Receipt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["sealbench/audit-receipt"] = "sealbench/audit-receipt"
    version: Literal[1] = 1
    registry: str
    origin: str
    result_id: int
    event: AuditEventPublic
    leaf_index: int
    tree_size: int
    proof: tuple[str, ...]
    checkpoint: str
    expected: dict[str, str] | None = None


def expected_digests(
    sealed_result_digest: str, summary: Mapping[str, object], attestation_token: str
) -> dict[str, str]:
    """The digests a result's ``result.submit`` event must record."""
    return {"sealed_result_digest": sealed_result_digest,
            **result_digests(summary, attestation_token)}


def verify_receipt(receipt: Receipt, keys: Sequence[VerifierKey]) -> VerifiedCheckpoint:
    """The receipt's checkpoint, once every check in the module docstring has passed."""
    signed = open_signed(receipt.checkpoint.encode("utf-8"), keys, receipt.origin)
    cp = signed.checkpoint
    event = receipt.event
    if receipt.tree_size != cp.size or receipt.leaf_index != event.seq - 1:
        raise LogProofError(
            f"the receipt says leaf {receipt.leaf_index} of a tree of {receipt.tree_size}, but "
            f"its event is {event.seq} and its checkpoint has {cp.size} events"
        )
    try:
        verify_inclusion(event_leaf_hash(event), receipt.leaf_index, cp.size,
                         [b64decode_hash(p, "a proof hash") for p in receipt.proof],
                         cp.root_hash)
    except CryptoError as exc:
        raise LogProofError(
            f"event {event.seq} is not proven to be in the registry's log of {cp.size} events: "
            f"{exc}"
        ) from exc
    if (event.action, event.entity_type, event.entity_id) != (
        "result.submit", "result", str(receipt.result_id)
    ):
        raise LogProofError(
            f"the proof is for event {event.seq} ({event.action} {event.entity_type} "
            f"{event.entity_id}), not for the submission of result {receipt.result_id}: that "
            "result was not shown to be logged"
        )
    if receipt.expected is not None:
        try:
            logged = json.loads(event.payload)
        except ValueError as exc:
            raise LogProofError(f"event {event.seq}'s payload is not JSON") from exc
        for name, value in receipt.expected.items():
            if logged.get(name) != value:
                raise LogProofError(
                    f"the registry logged {name} {str(logged.get(name))[:80]} for result "
                    f"{receipt.result_id}, but the result you hold has {value}"
                )
    return signed


def fetch_receipt(
    monitor: LogMonitor,
    client_proof: InclusionProofPublic,
    *,
    registry: str,
    expected: dict[str, str] | None,
) -> Receipt:
    """A receipt from the registry's answer, verified (:func:`prove_receipt`)."""
    if client_proof.result_id is None:
        raise LogProofError("the registry's answer names no result")
    origin = monitor.refresh().checkpoint.origin
    receipt = Receipt(
        registry=registry,
        origin=origin,
        result_id=client_proof.result_id,
        event=client_proof.event,
        leaf_index=client_proof.leaf_index,
        tree_size=client_proof.tree_size,
        proof=client_proof.proof,
        checkpoint=client_proof.checkpoint,
        expected=expected,
    )
    prove_receipt(monitor, receipt)
    return receipt


def prove_receipt(monitor: LogMonitor, receipt: Receipt) -> VerifiedCheckpoint:
    """Verify ``receipt`` with the monitor's trusted keys and check that its checkpoint is
    part of the log this client holds (consistency, either way)."""
    latest = monitor.refresh()
    if receipt.origin != latest.checkpoint.origin:
        raise LogProofError(
            f"the receipt is for log {receipt.origin!r}, not this registry's "
            f"{latest.checkpoint.origin!r}"
        )
    verify_receipt(receipt, monitor.trusted)
    return monitor.accept(receipt.checkpoint.encode("utf-8"))


class ReceiptStore:
    """Receipts kept by one profile (``<data dir>/receipts``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, result_id: int) -> Path:
        return self.root / f"result-{int(result_id)}.json"

    def save(self, receipt: Receipt) -> Path:
        path = self.path(receipt.result_id)
        write_private(path, receipt.model_dump_json(indent=2).encode() + b"\n")
        return path

    def get(self, result_id: int) -> Receipt | None:
        path = self.path(result_id)
        return load_receipt(path) if path.exists() else None


def load_receipt(path: Path) -> Receipt:
    try:
        raw = path.read_bytes()[:_MAX_RECEIPT]
    except OSError as exc:
        raise ConfigError(f"cannot read receipt {path}: {exc.strerror}") from exc
    try:
        return Receipt.model_validate_json(raw)
    except ValidationError as exc:
        raise ConfigError(
            f"{path} is not a sealbench audit receipt ({exc.error_count()} errors)"
        ) from exc
