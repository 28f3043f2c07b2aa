"""An in-memory stand-in for the registry's side of a pool authorization (issue 40), for tests of
the aggregator and of :func:`sealbench.contract.pool_authorization.verify_authorization`: a
transparency log of events (RFC 9162 tree, the registry's leaf format), a log key signing the
authorization note and checkpoints, and optional witnesses cosigning them. It signs and proves
what a real registry would; tests then tamper with the result to play each attack.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from sealbench.benchmarks.release import epsilon_of
from sealbench.contract.ledger import event_leaf_hash
from sealbench.contract.pool import PoolAnchor, PoolDebit, PoolInputs
from sealbench.contract.pool_authorization import (
    LoggedEvent,
    PoolAuthorization,
    authorization_note_text,
)
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.note import (
    ALG_COSIGNATURE,
    Checkpoint,
    Note,
    SignerKey,
    cosign,
    sign_checkpoint,
    sign_note,
)
from sealbench.crypto.tlog import inclusion_proof, root_from_leaf_hashes

__all__ = ["Ledger", "witness_key"]


def witness_key(name: str) -> SignerKey:
    return SignerKey.generate(name, alg=ALG_COSIGNATURE)


class _Reader:
    def __init__(self, leaves: Sequence[bytes]) -> None:
        self._leaves = list(leaves)

    def subtree_hashes(self, keys: Sequence[tuple[int, int]]) -> list[bytes]:
        out = []
        for level, index in keys:
            start = index << level
            out.append(root_from_leaf_hashes(self._leaves[start:start + (1 << level)]))
        return out


@dataclass
class Ledger:
    """A log, its key and witnesses; :meth:`authorize` appends the debits and the authorization
    event and returns the signed :class:`PoolAuthorization` a registry would hand out."""

    recipient_key: str
    log: SignerKey = field(default_factory=lambda: SignerKey.generate("test.example/log"))
    witnesses: tuple[SignerKey, ...] = ()
    quorum: int = 0
    events: list[LoggedEvent] = field(default_factory=list)
    budget_rho: float = 1.0

    @property
    def anchor(self) -> PoolAnchor:
        return PoolAnchor(recipient_key=self.recipient_key,
                          log_key=self.log.verifier().to_string(),
                          witnesses=tuple(w.verifier().to_string() for w in self.witnesses),
                          quorum=self.quorum)

    def append(self, action: str, payload: dict[str, object]) -> LoggedEvent:
        event = LoggedEvent(seq=len(self.events) + 1, actor_id=1, action=action,
                            entity_type="test", entity_id=str(len(self.events) + 1),
                            payload=canonical_json(payload).decode("utf-8"),
                            occurred_at="2026-12-07T00:00:00.000000+00:00", proof=())
        self.events.append(event)
        return event

    def _leaves(self) -> list[bytes]:
        return [event_leaf_hash(e) for e in self.events]

    def proven(self, event: LoggedEvent, size: int | None = None) -> LoggedEvent:
        size = len(self.events) if size is None else size
        proof = inclusion_proof(event.seq - 1, size, _Reader(self._leaves()[:size]))
        return event.model_copy(update={"proof": tuple(h.hex() for h in proof)})

    def checkpoint(self, size: int | None = None, *, cosigners: Sequence[SignerKey] = ()
                   ) -> str:
        size = len(self.events) if size is None else size
        cp = Checkpoint(self.log.name, size, root_from_leaf_hashes(self._leaves()[:size]))
        note = Note.parse(sign_checkpoint(cp, self.log))
        for witness in cosigners:
            note = note.with_signature(cosign(cp, witness, 1_765_000_000))
        return note.to_bytes().decode("utf-8")

    def authorize(self, inputs: PoolInputs, *, rho: float | None,
                  laplace: tuple[float, ...] = (),
                  cosigners: Sequence[SignerKey] | None = None) -> PoolAuthorization:
        """Debit one ledger per dataset of ``inputs`` (``rho`` and the Laplace epsilons
        ``laplace`` each, spent within the budget that holds :attr:`budget_rho` of Gaussian
        rho: epsilon_of(budget_rho, 1e-6) at delta 1e-6), log the authorization, and sign
        it all."""
        debits = []
        for item in inputs.inputs:
            extra: dict[str, object] = {}
            if laplace:
                extra["laplace"] = list(laplace)
                extra["spent_laplace"] = [[e, 1] for e in laplace]
            event = self.append("privacy.debit", {
                "pool_authorization_id": inputs.pool_id, "benchmark_id": inputs.benchmark_id,
                "datasets": [item.dataset.asset_id], "rho": rho,
                "exact": rho is None and not laplace,
                "spent_rho": rho or 0.0, "budget_rho": self.budget_rho,
                "budget_epsilon": epsilon_of(self.budget_rho, 1e-6), "budget_delta": 1e-6,
                **extra})
            debits.append(PoolDebit(ledger=f"dataset:{len(debits) + 1}",
                                    datasets=(item.dataset.asset_id,), seq=event.seq))
        document = inputs.model_copy(update={"rho": rho, "laplace": laplace,
                                             "debits": tuple(debits)})
        document = PoolInputs.from_bytes(document.to_bytes())
        digest = document.digest()
        authorized = self.append("pool.authorize", {"pool_id": document.pool_id,
                                                    "inputs_digest": digest})
        signature = sign_note(authorization_note_text(document.pool_id, digest), [self.log])
        return PoolAuthorization(
            inputs=document, signature=signature.to_bytes().decode("utf-8"),
            checkpoint=self.checkpoint(
                cosigners=self.witnesses if cosigners is None else cosigners),
            authorize_event=self.proven(authorized),
            debit_events=tuple(self.proven(self.events[d.seq - 1]) for d in debits))


def payload(event: LoggedEvent) -> dict[str, object]:
    value = json.loads(event.payload)
    assert isinstance(value, dict)
    return value

