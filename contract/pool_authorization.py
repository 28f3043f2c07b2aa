"""Pool authorizations (issue 40, "Every draw on the ledger"): what the aggregator must hold before
it draws a pooled release's noise, and the pure check of it.

The registry alone chooses what a pool covers. Asked by the benchmark's authority to pool a model
(``POST /benchmarks/{id}/pool-authorizations``), it lists its own candidates (every current,
approved site's latest accepted result of that model), debits every pooled ledger the release's
privacy loss and appends, in one transaction, one ``privacy.debit`` event per ledger (naming the
authorization and the datasets it covers) and then one ``pool.authorize`` event naming the
inputs document's digest. Only then does it answer with a :class:`PoolAuthorization`:

    inputs            the :class:`~sealbench.contract.pool.PoolInputs` document (version 2): the
                      inputs, the release's rho and the log sequence numbers of the debits
    signature         a signed note (C2SP) by the transparency log's key over
                      :func:`authorization_note_text`: the registry signed exactly this document
    checkpoint        a signed checkpoint of the log at a size that covers every event below,
                      with the cosignatures of the benchmark's witnesses when it names any
    authorize_event   the ``pool.authorize`` event, with its inclusion proof in that checkpoint
    debit_events      each ``privacy.debit`` event the document names, with its proof

:func:`verify_authorization` is what the attested aggregator runs before it reads any site's
statistics: every signature against the **pool anchor** (:class:`PoolAnchor`: the registry's
pool-release key, its log key, the witnesses and their quorum), whose digest is the recipient
field of the aggregator's workload uid, so the sites' grants release their keys only to an
aggregator that checks this log; each event's leaf recomputed
(:func:`~sealbench.contract.ledger.event_leaf_hash`) and proven included; each debit naming this
authorization, the release's privacy loss (:class:`~sealbench.contract.privacy_loss.
PrivacyLoss`: its Gaussian rho and Laplace epsilons), a spend within its ledger's budget (ε, δ)
by the same accountant as the registry's, and together covering
every input's dataset exactly once. Any failure raises :class:`AuthorizationError` and the
aggregator draws nothing.

Why this makes every draw a debit: the noise of a pooled release is derived from a secret only
the attested aggregator obtains (the sites' released keys) and the authorization's digest, and is
sampled exactly (:mod:`sealbench.benchmarks.seeded_noise`), so running the aggregator again on
the same authorization yields the very same release, and a different release needs another
authorization, whose debits are on the log before it can be used. docs/privacy.md ("Every draw
on the ledger") states what each party can still do.

Byte formats: the authorization note's text is three lines, ``sealbench/pool-authorization
v1``, the pool id and the inputs document's ``sha256:`` digest, each ending in a newline; the
anchor's digest is SHA-256 over the canonical JSON of :meth:`PoolAnchor.document`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from sealbench.contract.ledger import event_leaf_hash
from sealbench.contract.pool import MIN_POOL_SITES, PoolAnchor, PoolInputs
from sealbench.contract.privacy_loss import PrivacyLoss, PrivacyLossError
from sealbench.contract.result import _Document
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import (
    Checkpoint,
    Note,
    open_checkpoint,
    verify_cosignature,
)
from sealbench.crypto.tlog import verify_inclusion

__all__ = [
    "AUTHORIZE_ACTION",
    "DEBIT_ACTION",
    "AuthorizationError",
    "LoggedEvent",
    "PoolAuthorization",
    "VerifiedAuthorization",
    "authorization_note_text",
    "verify_authorization",
]

AUTHORIZE_ACTION: Final = "pool.authorize"
DEBIT_ACTION: Final = "privacy.debit"
_NOTE_HEADER: Final = "sealbench/pool-authorization v1"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class AuthorizationError(ValueError):
    """A pool authorization that does not hold: forged, for another pool, not logged, not
    witnessed, or spending what its ledgers do not have. The message names what failed."""


class LoggedEvent(BaseModel):
    """One event of the transparency log as its leaf records it, and its inclusion proof (hex
    hashes, leaf to root) in the authorization's checkpoint."""

    model_config = _FROZEN
    seq: int = Field(ge=1)
    actor_id: int | None
    action: str = Field(max_length=64)
    entity_type: str = Field(max_length=64)
    entity_id: str = Field(max_length=128)
    payload: str = Field(max_length=262_144)
    occurred_at: str = Field(max_length=64)
    proof: tuple[str, ...] = Field(max_length=64)

    def payload_object(self) -> dict[str, object]:
        try:
            value = json.loads(self.payload)
        except ValueError:
            raise AuthorizationError(f"log event {self.seq}'s payload is not JSON") from None
        if not isinstance(value, dict):
            raise AuthorizationError(f"log event {self.seq}'s payload is not an object")
        return value


class PoolAuthorization(_Document):
    """What the authority hands the aggregator (``pool-authorization.json``, named by the
    spec's inputs location and digest): the registry's signed authorization with its evidence
    on the log (module docstring)."""

    format: Literal["sealbench/pool-authorization"] = "sealbench/pool-authorization"
    version: Literal[1] = 1
    inputs: PoolInputs
    signature: str = Field(min_length=1, max_length=8192)
    checkpoint: str = Field(min_length=1, max_length=65_536)
    authorize_event: LoggedEvent
    debit_events: tuple[LoggedEvent, ...] = Field(min_length=1, max_length=1000)


def authorization_note_text(pool_id: str, inputs_digest: str) -> str:
    """The text the log key signs for an authorization (module docstring)."""
    return f"{_NOTE_HEADER}\n{pool_id}\n{inputs_digest}\n"


@dataclass(frozen=True)
class VerifiedAuthorization:
    """An authorization that held: its inputs document, its digest (what the noise is derived
    from) and the checkpoint its events are in."""

    inputs: PoolInputs
    digest: Sha256Digest
    checkpoint: Checkpoint


def _checkpoint(auth: PoolAuthorization, anchor: PoolAnchor) -> Checkpoint:
    try:
        verified = open_checkpoint(auth.checkpoint.encode("utf-8"), [anchor.log_verifier()])
    except CryptoError as exc:
        raise AuthorizationError(
            f"the checkpoint is not signed by the benchmark's log key: {exc}") from None
    checkpoint = verified.checkpoint
    if anchor.quorum:
        witnesses = {(w.name, w.key_id): w for w in anchor.witness_verifiers()}
        cosigned: set[tuple[str, int]] = set()
        for line in verified.note.signatures:
            key = witnesses.get((line.name, line.key_id))
            if key is None or (line.name, line.key_id) in cosigned:
                continue
            try:
                verify_cosignature(checkpoint, line, key)
            except CryptoError as exc:
                raise AuthorizationError(
                    f"witness {key.label}'s cosignature does not verify: {exc}") from None
            cosigned.add((line.name, line.key_id))
        if len(cosigned) < anchor.quorum:
            raise AuthorizationError(
                f"the checkpoint of size {checkpoint.size} carries {len(cosigned)} of the "
                f"{anchor.quorum} witness cosignatures the benchmark requires")
    return checkpoint


def _included(event: LoggedEvent, checkpoint: Checkpoint, what: str) -> None:
    try:
        proof = tuple(bytes.fromhex(h) for h in event.proof)
    except ValueError:
        raise AuthorizationError(f"the {what}'s inclusion proof is not hex") from None
    try:
        verify_inclusion(event_leaf_hash(event), event.seq - 1, checkpoint.size, proof,
                         checkpoint.root_hash)
    except CryptoError as exc:
        raise AuthorizationError(
            f"the {what} (log event {event.seq}) is not in the checkpoint's log: {exc}") from None


def _number(payload: dict[str, object], key: str, seq: int) -> float:
    value = payload.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) \
            or not math.isfinite(value):
        raise AuthorizationError(f"debit event {seq} states no {key}")
    return float(value)


def _laplace_list(payload: dict[str, object], seq: int) -> tuple[float, ...]:
    """A debit's Laplace epsilons (``laplace``: a list; absent for none, issue 41)."""
    value = payload.get("laplace", [])
    if not isinstance(value, list) or len(value) > 16:
        raise AuthorizationError(f"debit event {seq} states a malformed laplace")
    return tuple(_number({"laplace": v}, "laplace", seq) for v in value)


def _spent_laplace(payload: dict[str, object], seq: int) -> tuple[float, ...]:
    """A ledger's spent Laplace epsilons after a debit (``spent_laplace``: [[epsilon, count],
    ...]; absent for none)."""
    value = payload.get("spent_laplace", [])
    out: list[float] = []
    if not isinstance(value, list) or len(value) > 1024:
        raise AuthorizationError(f"debit event {seq} states a malformed spent_laplace")
    for pair in value:
        if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], int)
                or isinstance(pair[1], bool) or not 0 < pair[1] <= 1_000_000):
            raise AuthorizationError(f"debit event {seq} states a malformed spent_laplace")
        out.extend([_number({"e": pair[0]}, "e", seq)] * pair[1])
    return tuple(out)


def _check_cost(inputs: PoolInputs, payload: dict[str, object], seq: int) -> None:
    """The debit costs exactly the release's :class:`PrivacyLoss` and the ledger's spend after it
    stays within the ledger's budget (ε, δ), composed by the same accountant as the registry's
    (:mod:`sealbench.contract.privacy_loss`)."""
    rho = payload.get("rho")
    if inputs.rho is None:
        if rho is not None:
            raise AuthorizationError(f"debit event {seq} debits a rho the release does not cost")
    else:
        stated = _number(payload, "rho", seq)
        if not math.isclose(stated, inputs.rho, rel_tol=1e-12):
            raise AuthorizationError(
                f"debit event {seq} debits rho {stated:g}, the release costs {inputs.rho:g}")
    laplace = sorted(_laplace_list(payload, seq))
    if len(laplace) != len(inputs.laplace) or not all(
            math.isclose(a, b, rel_tol=1e-12) for a, b in zip(laplace, sorted(inputs.laplace),
                                                              strict=True)):
        raise AuthorizationError(
            f"debit event {seq} debits Laplace epsilons {laplace}, the release costs "
            f"{sorted(inputs.laplace)}")
    try:
        spent = PrivacyLoss(rho=_number(payload, "spent_rho", seq),
                            laplace=_spent_laplace(payload, seq))
        budget_epsilon = _number(payload, "budget_epsilon", seq)
        budget_delta = _number(payload, "budget_delta", seq)
        fits = spent.fits(budget_epsilon, budget_delta)
    except PrivacyLossError as exc:
        raise AuthorizationError(f"debit event {seq} states a meaningless spend: {exc}") from None
    if not fits:
        raise AuthorizationError(
            f"debit event {seq} overspends its ledger ({spent.text()} is more than epsilon "
            f"{budget_epsilon:g} at delta {budget_delta:g})")


def _check_debits(inputs: PoolInputs, events: Sequence[LoggedEvent]) -> None:
    if [e.seq for e in events] != [d.seq for d in inputs.debits]:
        raise AuthorizationError("the debit events are not the ones the authorization names")
    covered: list[str] = []
    for event, debit in zip(events, inputs.debits, strict=True):
        payload = event.payload_object()
        if event.action != DEBIT_ACTION:
            raise AuthorizationError(f"log event {event.seq} is a {event.action!r}, not a debit")
        if payload.get("pool_authorization_id") != inputs.pool_id:
            raise AuthorizationError(f"debit event {event.seq} is of another authorization")
        if str(payload.get("benchmark_id")) != inputs.benchmark_id:
            raise AuthorizationError(f"debit event {event.seq} is of another benchmark")
        datasets = payload.get("datasets")
        if not isinstance(datasets, list) or sorted(str(d) for d in datasets) \
                != sorted(debit.datasets):
            raise AuthorizationError(
                f"debit event {event.seq} covers other datasets than the authorization says")
        if inputs.exact:
            if payload.get("exact") is not True:
                raise AuthorizationError(f"debit event {event.seq} is not an exact release's")
        else:
            _check_cost(inputs, payload, event.seq)
        covered.extend(debit.datasets)
    wanted = sorted(i.dataset.asset_id for i in inputs.inputs)
    if sorted(covered) != wanted:
        raise AuthorizationError(
            "the debits do not cover every pooled dataset exactly once")


def verify_authorization(auth: PoolAuthorization, anchor: PoolAnchor, *,
                         min_sites: int = MIN_POOL_SITES) -> VerifiedAuthorization:
    """Check ``auth`` against ``anchor`` (module docstring); :class:`AuthorizationError`
    naming the first thing that fails. Pure: no I/O, no clock."""
    inputs = auth.inputs
    digest = inputs.digest()
    if len(inputs.inputs) < max(min_sites, MIN_POOL_SITES):
        raise AuthorizationError(
            f"a pooled release covers at least {max(min_sites, MIN_POOL_SITES)} sites; this "
            f"authorization names {len(inputs.inputs)}")
    try:
        note = Note.parse(auth.signature.encode("utf-8"))
        note.verify([anchor.log_verifier()])
    except CryptoError as exc:
        raise AuthorizationError(
            f"the authorization is not signed by the benchmark's log key: {exc}") from None
    if note.text != authorization_note_text(inputs.pool_id, digest):
        raise AuthorizationError(
            "the signed authorization is of another pool or inputs document")
    checkpoint = _checkpoint(auth, anchor)
    event = auth.authorize_event
    _included(event, checkpoint, "authorization event")
    payload = event.payload_object()
    if event.action != AUTHORIZE_ACTION or payload.get("pool_id") != inputs.pool_id \
            or payload.get("inputs_digest") != digest:
        raise AuthorizationError(
            "the logged authorization event is not this authorization's")
    for debit in auth.debit_events:
        _included(debit, checkpoint, "debit event")
        if debit.seq >= event.seq:
            raise AuthorizationError(
                f"debit event {debit.seq} is logged after the authorization it pays for")
    _check_debits(inputs, auth.debit_events)
    return VerifiedAuthorization(inputs, digest, checkpoint)
