"""The byte formats of an audit event: its link in the hash chain and its leaf in the
transparency log. Pure (only :mod:`sealbench.crypto`), so clients recompute both from the events
the registry serves.

Chain link (version 1): event ``n`` hashes, as ``"sha256:" + hex``, the canonical JSON of::

    {"v": 1, "seq": n, "actor_id": int|null, "action": str, "entity_type": str,
     "entity_id": str, "payload": <the stored canonical-JSON text>, "occurred_at": <ISO 8601 UTC>,
     "prev_hash": <hash of event n-1, or GENESIS_HASH for n = 1>}

Leaf (``sealbench/audit-leaf`` version 1): event ``n`` is leaf ``n - 1`` of the log, and its
leaf data is the canonical JSON (UTF-8, sorted keys, no white space) of::

    {"format": "sealbench/audit-leaf", "v": 1, "seq": n, "actor_id": int|null, "action": str,
     "entity_type": str, "entity_id": str, "payload": <the stored canonical-JSON text>,
     "occurred_at": <ISO 8601 UTC>}

so its leaf hash is ``SHA-256(0x00 || leaf data)`` (RFC 9162). The chain's ``prev_hash`` is not
part of the leaf: the tree orders the events itself.

A result's ``result.submit`` event carries, in its payload, ``attestation_token_digest``
(SHA-256 of the token's UTF-8 bytes; a JWT is ASCII) and ``summary_digest`` (SHA-256 of the
summary's canonical JSON) beside ``sealed_result_digest``, so whoever holds the result can check
that exactly it was logged (:func:`result_digests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sealbench.contract.ledger import LEAF_FORMAT, AuditRecord, event_leaf_hash, leaf_data
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, sha256_digest

__all__ = [
    "AUDIT_FORMAT_VERSION",
    "GENESIS_HASH",
    "LEAF_FORMAT",
    "AuditRecord",
    "event_hash",
    "event_leaf_hash",
    "leaf_data",
    "result_digests",
]

AUDIT_FORMAT_VERSION: Final = 1
GENESIS_HASH: Final = "sha256:" + "0" * 64


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
    """The chain hash of one event, as described in the module docstring."""
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


def result_digests(
    summary: Mapping[str, object], attestation_token: str
) -> dict[str, Sha256Digest]:
    """The digests a ``result.submit`` event records of the summary and the token."""
    return {
        "summary_digest": sha256_digest(canonical_json(dict(summary))),
        "attestation_token_digest": sha256_digest(attestation_token.encode("utf-8")),
    }
