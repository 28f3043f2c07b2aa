"""The registry's transparency log as a client checks it: every checkpoint it is shown must be
signed by the key it pinned (or a key that key endorsed) and must extend the last checkpoint it
verified; a result's receipt must prove the result's event in such a checkpoint; a full check
recomputes the whole log from its events.

A :class:`LogMonitor` holds one registry's state
(:class:`~sealbench.client.registry.logstate.LogState`) and talks to it through a
:class:`~sealbench.client.registry.api.RegistryClient`. On any failure it keeps the checkpoints
involved as evidence, keeps the checkpoint it held (it is what proves the registry wrong), and
raises a :class:`~sealbench.client.errors.TransparencyLogError` (exit 10) naming the sizes, and the
first event that differs when it can tell: after a full ``sealbench audit verify`` it keeps every
leaf hash, so a later rewrite is located by bisection with ``O(log n)`` consistency proofs.

Who detects what: a rewritten or truncated history, any client holding an earlier checkpoint;
a fork (two views for two clients), a witness that saw the other view, or a client given
another's checkpoint (:meth:`LogMonitor.compare`, gossip).
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sealbench.client.errors import (
    IntegrityError,
    LogInconsistentError,
    LogKeyNotPinnedError,
    LogSignatureError,
    RegistryError,
    TransparencyLogError,
)
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.logstate import LogState, proof_json
from sealbench.crypto.errors import ConsistencyProofError, CryptoError
from sealbench.crypto.note import (
    Checkpoint,
    KeyEndorsement,
    NoteSignature,
    VerifiedCheckpoint,
    VerifierKey,
    open_checkpoint,
    verify_cosignature,
)
from sealbench.crypto.tlog import (
    HASH_SIZE,
    CompactRange,
    root_from_leaf_hashes,
    verify_consistency,
)
from sealbench.server.audit_format import GENESIS_HASH, event_hash, event_leaf_hash
from sealbench.server.schemas.audit import (
    MAX_EVENT_RANGE,
    CosignaturePublic,
    LogKeyPublic,
)

__all__ = [
    "DEFAULT_PACE",
    "LogMonitor",
    "LogReport",
    "b64decode_hash",
    "endorsed_keys",
    "open_signed",
]

log = logging.getLogger("sealbench.client")
_EMPTY_NOTE: Final = b""
#: Seconds a full check waits per second the registry spent serving it a page of events.
DEFAULT_PACE: Final = 1.0


def b64decode_hash(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TransparencyLogError(f"{what} is not base64") from exc
    if len(raw) != HASH_SIZE:
        raise TransparencyLogError(f"{what} is {len(raw)} bytes, expected {HASH_SIZE}")
    return raw


def endorsed_keys(pinned: VerifierKey, published: Sequence[LogKeyPublic]) -> tuple[
    VerifierKey, ...
]:
    """``pinned`` and every published key reached from it through endorsements (each signed
    by an already trusted key and by the new key itself)."""
    trusted = [pinned]
    grew = True
    while grew:
        grew = False
        for row in published:
            if row.endorsement is None:
                continue
            try:
                key = VerifierKey.from_string(row.verifier)
            except CryptoError:
                continue
            if key in trusted:
                continue
            for known in list(trusted):
                try:
                    endorsement = KeyEndorsement.open(row.endorsement.encode("utf-8"), known)
                except CryptoError:
                    continue
                if endorsement.new_key == key and endorsement.origin == pinned.name:
                    trusted.append(key)
                    grew = True
                    break
    return tuple(trusted)


def open_signed(note: bytes, keys: Sequence[VerifierKey], origin: str) -> VerifiedCheckpoint:
    """A checkpoint signed by one of ``keys`` for the log ``origin``, or
    :class:`LogSignatureError`."""
    try:
        return open_checkpoint(note, keys, origin=origin)
    except CryptoError as exc:
        raise LogSignatureError(f"the registry's checkpoint is refused: {exc}") from exc


@dataclass(frozen=True)
class LogReport:
    """What a full check of the log verified."""

    checkpoint: Checkpoint
    previous: Checkpoint | None
    events: int


@dataclass(frozen=True)
class _Proof:
    ok: bool
    evidence: bytes


def _label(cp: Checkpoint) -> str:
    return f"size {cp.size} (root {base64.b64encode(cp.root_hash).decode()[:12]}…)"


class LogMonitor:
    """One registry's log as this client has verified it (module docstring). ``pinned`` is the
    log key the profile pinned (given out of band, or pinned on an earlier first use); with
    None, every check raises :class:`~sealbench.client.errors.LogKeyNotPinnedError` unless
    ``trust_on_first_use`` (the user's recorded choice): the registry's current key is then
    pinned when first asked and reported to ``on_pin``. ``trust_on_first_use`` also says, for a
    key already pinned, that it was pinned that way (:attr:`trusted_on_first_use`).
    ``witnesses`` must each have cosigned a checkpoint that the one shown extends."""

    def __init__(
        self,
        client: RegistryClient,
        state: LogState,
        *,
        pinned: VerifierKey | None,
        trust_on_first_use: bool = False,
        witnesses: Sequence[VerifierKey] = (),
        on_pin: Callable[[VerifierKey], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._state = state
        self._pinned = pinned
        self._tofu = trust_on_first_use
        self._witnesses = tuple(witnesses)
        self._on_pin = on_pin
        self._clock = clock
        self._trusted: tuple[VerifierKey, ...] = () if pinned is None else (pinned,)

    @property
    def state(self) -> LogState:
        return self._state

    @property
    def pinned(self) -> VerifierKey | None:
        return self._pinned

    @property
    def trusted(self) -> tuple[VerifierKey, ...]:
        return self._trusted

    @property
    def trusted_on_first_use(self) -> bool:
        """Whether the pinned key is one the registry itself published when first asked (the
        profile's ``--trust-on-first-use``), not one given out of band."""
        return self._tofu

    # -- keys ----------------------------------------------------------------------------------

    def _learn(self, published: Sequence[LogKeyPublic]) -> None:
        if self._pinned is None:
            self._require_pin()
            current = [k for k in published if k.retired_at is None]
            if len(current) != 1:
                raise LogSignatureError(
                    f"the registry publishes {len(current)} current log keys, expected one"
                )
            try:
                self._pinned = VerifierKey.from_string(current[0].verifier)
            except CryptoError as exc:
                raise LogSignatureError(f"the registry's log key is malformed: {exc}") from exc
            log.warning("pinned the registry's log key %s on first use", self._pinned.label)
            if self._on_pin is not None:
                self._on_pin(self._pinned)
        self._trusted = endorsed_keys(self._pinned, published)

    def _require_pin(self) -> None:
        if self._pinned is None and not self._tofu:
            raise LogKeyNotPinnedError(
                "no transparency-log key is pinned for this registry, so its log cannot be "
                "checked (trusting the key it shows now would accept a rewritten log)"
            )

    def _open(self, note: bytes) -> VerifiedCheckpoint:
        assert self._pinned is not None
        return open_signed(note, self._trusted, self._pinned.name)

    # -- the checkpoint held -------------------------------------------------------------------

    def refresh(self) -> VerifiedCheckpoint:
        """Fetch the latest checkpoint, verify its signature, that it extends the one held (no
        rollback) and the witnesses' cosignatures; hold it."""
        self._require_pin()
        response = self._client.audit_checkpoint()
        self._learn(response.keys)
        latest = self._open(response.checkpoint.encode("utf-8"))
        self._against_held(latest, latest=True)
        self._check_witnesses(response.cosignatures, latest)
        return latest

    def accept(self, note: bytes) -> VerifiedCheckpoint:
        """Verify a checkpoint that came with another answer (a receipt, another client's
        gossip): signed by a trusted key and consistent with the one held, older or newer."""
        if self._pinned is None or len(self._trusted) == 0:
            self.refresh()
        checkpoint = self._open(note)
        self._against_held(checkpoint, latest=False)
        return checkpoint

    def _prove(self, first: Checkpoint, second: Checkpoint) -> _Proof:
        """Whether ``second`` extends ``first``, by the registry's consistency proof (kept for
        evidence); a registry that cannot produce one has not proven it."""
        try:
            proof = self._client.audit_consistency(first.size, second.size).proof
        except RegistryError as exc:
            return _Proof(False, f"no proof from {first.size} to {second.size}: {exc}\n".encode())
        kept = proof_json(first.size, second.size, proof)
        try:
            verify_consistency(first.size, second.size, first.root_hash, second.root_hash,
                               [b64decode_hash(p, "a proof hash") for p in proof])
        except (ConsistencyProofError, TransparencyLogError):
            return _Proof(False, kept)
        return _Proof(True, kept)

    def _against_held(self, new: VerifiedCheckpoint, *, latest: bool) -> None:
        held_note = self._state.held_note()
        held = self._state.held()
        if held is None or held_note is None:
            self._state.hold(new.to_bytes())
            return
        cp = new.checkpoint
        if cp.size < held.size:
            if latest:
                raise self._inconsistent(
                    "rollback", held_note, new.to_bytes(), None,
                    f"the registry now shows {cp.size} events, fewer than the {held.size} you "
                    "verified before: events were removed (truncated or rolled back)",
                    cp,
                )
            back = self._prove(cp, held) if cp.size else _Proof(True, b"")
            if back.ok:
                return
            raise self._inconsistent(
                "inconsistent", held_note, new.to_bytes(), back.evidence,
                f"the checkpoint of {_label(cp)} is not a prefix of the log you verified at "
                f"{_label(held)}", cp,
            )
        if cp.size == held.size and cp.root_hash == held.root_hash:
            return
        proof = _Proof(False, b"") if cp.size == held.size else self._prove(held, cp)
        if not proof.ok:
            raise self._inconsistent(
                "inconsistent", held_note, new.to_bytes(), proof.evidence or None,
                f"the registry's log at {_label(cp)} does not extend the checkpoint at "
                f"{_label(held)} that you verified: history up to size {held.size} was "
                "rewritten (or you are shown a fork)", cp,
            )
        self._state.hold(new.to_bytes())

    def _check_witnesses(
        self, cosignatures: Sequence[CosignaturePublic], latest: VerifiedCheckpoint
    ) -> None:
        for witness in self._witnesses:
            found = [c for c in cosignatures if c.witness == witness.to_string()]
            if not found:
                raise TransparencyLogError(
                    f"the registry shows no cosignature by witness {witness.label}: this view "
                    "of the log may be one the witness never saw",
                    hint="ask the witness's operator whether it runs; if it does, the registry "
                    "may be showing you a fork",
                )
            row = found[0]
            cp = Checkpoint(latest.checkpoint.origin, row.tree_size,
                            b64decode_hash(row.root, "the cosigned root"))
            try:
                verify_cosignature(cp, NoteSignature.from_line(row.signature), witness)
            except CryptoError as exc:
                raise LogSignatureError(
                    f"the cosignature shown for witness {witness.label} does not verify: {exc}"
                ) from exc
            ordered = (cp, latest.checkpoint) if cp.size <= latest.checkpoint.size else (
                latest.checkpoint, cp)
            proof = self._prove(*ordered) if ordered[0].size else _Proof(True, b"")
            if not proof.ok:
                witnessed = (cp.to_text() + "\n" + row.signature + "\n").encode()
                raise self._inconsistent(
                    "witness", witnessed, latest.to_bytes(), proof.evidence,
                    f"witness {witness.label} cosigned the log at {_label(cp)}, which the "
                    f"checkpoint you are shown ({_label(latest.checkpoint)}) does not extend: "
                    "the registry shows different histories to different parties (a fork)",
                    latest.checkpoint,
                )

    def compare(self, other_note: bytes) -> VerifiedCheckpoint:
        """Gossip: check a checkpoint another party verified against this client's view; a
        checkpoint of this log that neither extends nor is extended by ours proves a fork."""
        latest = self.refresh()
        other = self._open(other_note)
        mine, theirs = latest.checkpoint, other.checkpoint
        first, second = (mine, theirs) if mine.size <= theirs.size else (theirs, mine)
        if first.size == second.size or first.size == 0:
            proof = _Proof(first.size == 0 or first.root_hash == second.root_hash, b"")
        else:
            proof = self._prove(first, second)
        if not proof.ok:
            raise self._inconsistent(
                "fork", latest.to_bytes(), other_note, proof.evidence or None,
                f"the checkpoint you were given ({_label(theirs)}) and the one the registry "
                f"shows you ({_label(mine)}) are both signed by the registry but belong to "
                "different histories: the registry shows different views (a fork)",
                theirs,
            )
        return other

    # -- failures ------------------------------------------------------------------------------

    def _first_divergent(self, new: Checkpoint, leaves: Sequence[bytes] | None = None) -> (
        int | None
    ):
        """The first of ``leaves`` (default: those kept by the last full check) that the tree
        of ``new`` does not contain, found by bisection with ``O(log n)`` consistency proofs;
        None without leaves or divergence."""
        if leaves is None:
            kept = self._state.leaves()
            leaves = [kept[i : i + HASH_SIZE] for i in range(0, len(kept), HASH_SIZE)]
        top = min(len(leaves), new.size)
        if top == 0:
            return None

        def agrees(size: int) -> bool:
            prefix = Checkpoint(new.origin, size, root_from_leaf_hashes(leaves[:size]))
            if size == new.size:
                return prefix.root_hash == new.root_hash
            return self._prove(prefix, new).ok

        if agrees(top):
            return None
        lo, hi = 0, top
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if agrees(mid):
                lo = mid
            else:
                hi = mid
        return hi

    def _inconsistent(
        self, what: str, held: bytes, received: bytes, proof: bytes | None, detail: str,
        new: Checkpoint, *, first: int | None = None,
    ) -> LogInconsistentError:
        if first is None:
            first = self._first_divergent(new)
        located = (
            f"; the first divergent size is {first}: event {first} is not the event you "
            "verified" if first is not None else ""
        )
        message = f"the registry's transparency log failed a check: {detail}{located}"
        files = {"held.checkpoint": held, "received.checkpoint": received,
                 "report.txt": (message + "\n").encode()}
        if proof is not None:
            files["proof.json"] = proof
        folder = self._state.keep_evidence(what, files, self._clock())
        return LogInconsistentError(
            f"{message}. Both checkpoints are kept in {folder}",
            evidence=str(folder),
            first_divergent_size=first,
        )

    # -- the whole log -------------------------------------------------------------------------

    def verify_log(
        self,
        progress: Callable[[int, int], None] | None = None,
        *,
        pace: float = DEFAULT_PACE,
        sleep: Callable[[float], None] = time.sleep,
    ) -> LogReport:
        """Fetch every event (admins), recompute the chain, every leaf and the root, and check
        them against the latest checkpoint (verified and consistent with the one held) and the
        leaves kept from the last full check; keep the leaves for the next one. After each page
        it waits ``pace`` times as long as the registry took to serve it, so that a full check
        takes at most ``1 / (1 + pace)`` of the registry's time and others' requests go on."""
        previous = self._state.held()
        latest = self.refresh().checkpoint
        kept = self._state.leaves()
        edge = CompactRange()
        leaves = bytearray()
        prev_hash = GENESIS_HASH
        for start in range(0, latest.size, MAX_EVENT_RANGE):
            end = min(start + MAX_EVENT_RANGE, latest.size)
            asked = time.perf_counter()
            page = self._client.audit_event_range(start, end)
            if pace > 0:
                sleep(pace * (time.perf_counter() - asked))
            if [e.seq for e in page.items] != list(range(start + 1, end + 1)):
                raise LogInconsistentError(
                    f"the registry served events {page.items[0].seq if page.items else '-'}… "
                    f"for leaves [{start}, {end}) of its checkpoint of {latest.size} events"
                )
            for event in page.items:
                recomputed = event_hash(
                    seq=event.seq, actor_id=event.actor_id, action=event.action,
                    entity_type=event.entity_type, entity_id=event.entity_id,
                    payload=event.payload, occurred_at=event.occurred_at, prev_hash=prev_hash,
                )
                if event.prev_hash != prev_hash or recomputed != event.hash:
                    raise IntegrityError(
                        f"the registry's audit chain is broken at event {event.seq}: "
                        "its content does not match its hash",
                        hint="the registry database was modified outside the application: "
                        "stop using it and tell the registry operator",
                    )
                prev_hash = event.hash
                leaf = event_leaf_hash(event)
                at = HASH_SIZE * (event.seq - 1)
                if at + HASH_SIZE <= len(kept) and kept[at : at + HASH_SIZE] != leaf:
                    held_note = self._state.held_note() or _EMPTY_NOTE
                    raise self._inconsistent(
                        "rewritten", held_note, held_note, None,
                        f"event {event.seq} ({event.action} {event.entity_type} "
                        f"{event.entity_id}) is not the event you verified before", latest,
                        first=event.seq,
                    )
                edge.append(leaf)
                leaves += leaf
            if progress is not None:
                progress(end, latest.size)
        if edge.root() != latest.root_hash:
            served = [bytes(leaves[i : i + HASH_SIZE]) for i in range(0, len(leaves), HASH_SIZE)]
            first = self._first_divergent(latest, served)
            held_note = self._state.held_note() or _EMPTY_NOTE
            raise self._inconsistent(
                "served", held_note, held_note, None,
                f"the {latest.size} events the registry serves do not hash to its own signed "
                f"checkpoint ({_label(latest)}): it serves different events than it signed",
                latest, first=first,
            )
        self._state.keep_leaves(bytes(leaves))
        return LogReport(latest, previous, latest.size)
