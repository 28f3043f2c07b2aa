"""Pool authorizations (issue 40, "Every draw on the ledger"): the registry chooses what a pool
covers, debits it on the log, and signs it, before any aggregator may draw.

**Authorize** (:func:`authorize`, the benchmark's authority, naming only a model): the registry's
own candidates (:func:`choose`): each dataset approved in the benchmark now (its latest
association), with coordinates, whose latest accepted result of the model carries a
sealed-statistics commitment and says where its run left its objects; one dataset of any that
share cases (:func:`~sealbench.server.services.fingerprints.shares_cases`); datasets whose
ledger cannot pay the release left out with the reason. The model must be approved; at least
:data:`~sealbench.contract.pool.MIN_POOL_SITES` sites (or the plug-in's ``min_pool_sites``) must
remain, or nothing is written. A pool over exactly the runs of the model's previous
authorization is refused (nothing new: relaunch that one, which yields its very release).

**Adding a site never shrinks the figure** (issue 41): the board shows a model's latest pooled
release, so a new pool must cover every site its current release covers that is still approved
in the benchmark (:func:`shrinks`). Before #40 the client pooled only the results not pooled
yet, so a third hospital's first pool was that hospital alone (the board then showed 1 site / 3
cases instead of 3 / 13); since #40 the registry picks every current site, and what could still
drop a site of the current figure is a site left out now (its budget cannot pay another pooled
release, its owner withdrew consent to exact releases, its coordinates are gone): such a pool is
refused, naming each site and why, and nothing is debited; the board keeps the current release
and lists the new results as waiting (:mod:`.leaderboard`). A site withdrawn from the benchmark
is no longer current: a pool without it is not a shrink.
Then, in one transaction: every ledger locked and checked, one ``privacy.debit`` per ledger (a
budget group pays once for all its datasets in the pool), the
:class:`~sealbench.contract.pool.PoolInputs` document naming the debits' log sequence numbers,
the log key's signed note over it, and the ``pool.authorize`` event with its digest, last.

**Evidence** (:func:`evidence`): the authorization as the aggregator reads it
(:class:`~sealbench.contract.pool_authorization.PoolAuthorization`): the document and its
signature, a checkpoint covering its events (with the cosignatures of a tree the benchmark's
witnesses cosigned, when it names any: refused until a quorum has) and each event's inclusion
proof. Asked again, it answers the same authorization (with a newer checkpoint): relaunching
costs nothing and draws nothing new.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.pooling import pooled_release_spec
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.benchmarks.release import ReleaseSpec
from sealbench.contract.pool import MIN_POOL_SITES, PoolAnchor, PoolDebit, PoolInputs
from sealbench.contract.pool_authorization import (
    LoggedEvent,
    PoolAuthorization,
    authorization_note_text,
)
from sealbench.crypto.note import (
    Checkpoint,
    Note,
    NoteSignature,
    SignerKey,
    sign_checkpoint,
    sign_note,
)
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidStateError,
    NotFoundError,
    PermissionDeniedError,
)
from sealbench.server.logtree import StoredTree
from sealbench.server.models import (
    AuditCosignature,
    AuditEvent,
    Benchmark,
    Dataset,
    DatasetCoordinates,
    Model,
    PooledInput,
    PooledRelease,
    Result,
)
from sealbench.server.models import PoolAuthorization as AuthorizationRow
from sealbench.server.services._common import commit, flush, get_or_404
from sealbench.server.services.associations import exact_release_consented, is_approved
from sealbench.server.services.benchmark_plugins import PluginLookup, plugin_of
from sealbench.server.services.budgets import (
    LockedLedger,
    charge_authorization,
    ledger_key,
    ledger_of,
    lock_ledger,
)
from sealbench.server.services.fingerprints import shares_cases

__all__ = [
    "Choice",
    "LeftOut",
    "anchor_of",
    "authorize",
    "choose",
    "commitment_of",
    "covered_now",
    "debit_releases",
    "evidence",
    "get_row",
    "run_id_of",
    "shrinks",
]


@dataclass(frozen=True)
class LeftOut:
    result_id: int
    dataset_id: int
    run_id: str | None
    reason: str


@dataclass(frozen=True)
class Picked:
    result: Result
    dataset: Dataset
    coordinates: DatasetCoordinates
    run_id: str
    commitment: str


@dataclass(frozen=True)
class Choice:
    """What the registry would pool for a model now, and what it leaves out (and why)."""

    picked: tuple[Picked, ...]
    left_out: tuple[LeftOut, ...]
    release: ReleaseSpec | None
    min_sites: int


def run_id_of(result: Result) -> str | None:
    run = result.summary.get("run_id") if isinstance(result.summary, dict) else None
    return run if isinstance(run, str) else None


def commitment_of(result: Result) -> str | None:
    found = result.summary.get("pool_statistics") if isinstance(result.summary, dict) else None
    return found if isinstance(found, str) else None


def anchor_of(bench: Benchmark) -> PoolAnchor:
    """The benchmark's pool anchor; :class:`InvalidStateError` for one without (no aggregator,
    or created before pool authorizations: it pools under a new version)."""
    anchor = PoolAnchor.of(bench)
    if anchor is None:
        raise InvalidStateError(
            f"benchmark {bench.id} names no complete pool anchor (an aggregator image, the "
            "registry's pool-release key and its log key): it cannot pool in the TEE; a "
            "benchmark created before pool authorizations pools under a new version")
    return anchor


def authority_benchmark(session: Session, actor: Principal, benchmark_id: int) -> Benchmark:
    bench = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    if bench.owner_id != actor.user_id:
        raise PermissionDeniedError("only the benchmark's authority pools its results")
    if bench.state != "approved":
        raise InvalidStateError(f"benchmark {bench.id} is {bench.state}, not approved")
    if bench.aggregator_image_digest is None:
        raise InvalidStateError(
            f"benchmark {bench.id} does not pool in the TEE (it names no aggregator image)")
    return bench


def _latest_results(session: Session, bench: Benchmark, model: Model) -> dict[int, Result]:
    """Each dataset's latest accepted result of ``model`` that a pool can read."""
    latest: dict[int, Result] = {}
    for result in session.scalars(
            select(Result).where(Result.benchmark_id == bench.id, Result.model_id == model.id)
            .order_by(Result.id)).all():
        if commitment_of(result) is not None and result.result_uri is not None \
                and run_id_of(result) is not None:
            latest[result.dataset_id] = result
    return latest


def choose(session: Session, bench: Benchmark, model: Model, *,
           plugins: PluginLookup = load_plugin) -> Choice:
    """The registry's own candidates for pooling ``model`` now (module docstring)."""
    plugin = plugin_of(bench.metrics_version, plugins)
    release = pooled_release_spec(plugin)
    cost = None if release is None or release.exact else release.loss
    min_sites = max(MIN_POOL_SITES, int(getattr(plugin, "min_pool_sites", 0) or 0))
    picked: list[Picked] = []
    left_out: list[LeftOut] = []
    ledgers: set[str] = set()
    for dataset_id, result in sorted(_latest_results(session, bench, model).items()):
        run_id, commitment = run_id_of(result), commitment_of(result)
        assert run_id is not None and commitment is not None  # _latest_results kept only these

        def leave(reason: str, result: Result = result, run_id: str = run_id) -> None:
            left_out.append(LeftOut(result.id, result.dataset_id, run_id, reason))

        dataset = session.get(Dataset, dataset_id)
        if dataset is None or not is_approved(session, "dataset", bench.id, dataset_id):
            leave(f"dataset {dataset_id} is not approved in the benchmark (withdrawn, "
                  "rejected or pending)")
            continue
        coords = session.scalars(select(DatasetCoordinates).where(
            DatasetCoordinates.asset_id == dataset_id)).first()
        if coords is None:
            leave(f"dataset {dataset_id} has no registered coordinates (sealed copy and key)")
            continue
        if release is not None and release.exact \
                and not exact_release_consented(session, bench.id, dataset_id):
            leave(f"dataset {dataset_id}'s owner has not consented to exact releases")
            continue
        overlap = next((p.dataset.id for p in picked
                        if shares_cases(session, p.dataset.id, dataset_id)), None)
        if overlap is not None:
            leave(f"dataset {dataset_id} shares cases with dataset {overlap}, which is pooled "
                  "instead (a patient counts once in a release)")
            continue
        ledger = ledger_of(session, dataset)
        key = ledger_key(ledger)
        if cost is not None and key not in ledgers and not ledger.ledger.fits(cost):
            leave(f"dataset {dataset_id}'s remaining privacy budget cannot pay this "
                  "benchmark's pooled release")
            continue
        ledgers.add(key)
        picked.append(Picked(result, dataset, coords, run_id, commitment))
    return Choice(tuple(picked), tuple(left_out), release, min_sites)


def _previous(session: Session, bench: Benchmark, model: Model) -> AuthorizationRow | None:
    return session.scalars(select(AuthorizationRow).where(
        AuthorizationRow.benchmark_id == bench.id, AuthorizationRow.model_id == model.id)
        .order_by(AuthorizationRow.id.desc()).limit(1)).first()


def _document(bench: Benchmark, model: Model, pool_id: str, picked: Sequence[Picked],
              release: ReleaseSpec, debits: Sequence[PoolDebit]) -> PoolInputs:
    return PoolInputs.model_validate({
        "pool_id": pool_id,
        "benchmark_id": str(bench.id),
        "metrics_version": str(bench.metrics_version),
        "model_id": str(model.id),
        "model_digest": model.digest,
        "inputs": [{
            "run_id": p.run_id,
            "dataset": {"asset_id": str(p.dataset.id), "uri": p.coordinates.storage_uri,
                        "kms_key": p.coordinates.kms_key_name,
                        "pool_provider": p.coordinates.wip_provider},
            "data_digest": p.dataset.digest,
            "statistics_uri": p.result.result_uri,
            "commitment": p.commitment,
        } for p in picked],
        "rho": release.rho,
        **({"laplace": list(release.loss.laplace)} if release.loss.laplace else {}),
        "debits": [d.model_dump() for d in debits],
    })


def covered_now(session: Session, bench: Benchmark, model: Model) -> tuple[int, set[int]] | None:
    """The model's latest pooled release (the board's figure) and the datasets it covers
    (None: no release yet)."""
    latest = session.scalars(select(PooledRelease).where(
        PooledRelease.benchmark_id == bench.id, PooledRelease.model_id == model.id)
        .order_by(PooledRelease.id.desc()).limit(1)).first()
    if latest is None:
        return None
    datasets = set(session.scalars(
        select(Result.dataset_id).join(PooledInput, PooledInput.result_id == Result.id)
        .where(PooledInput.pooled_release_id == latest.id)).all())
    return latest.id, datasets


def shrinks(session: Session, bench: Benchmark, model: Model, choice: Choice) -> str | None:
    """Why a pool of ``choice`` would cover fewer sites than the model's current pooled release
    (module docstring), naming each site of that release, still approved, that it leaves out;
    None when it covers them all."""
    current = covered_now(session, bench, model)
    if current is None:
        return None
    release_id, covered = current
    picked = {p.dataset.id for p in choice.picked}
    reasons = {lo.dataset_id: lo.reason for lo in choice.left_out}
    dropped = sorted(d for d in covered - picked if is_approved(session, "dataset", bench.id, d))
    if not dropped:
        return None
    why = "; ".join(f"dataset {d}: {reasons.get(d, 'no accepted result that can be pooled')}"
                    for d in dropped)
    return (f"a pool of model {model.id} now would leave out {len(dropped)} of the "
            f"{len(covered)} sites its current pooled release {release_id} covers ({why}), so "
            "the board's figure would shrink: it keeps release "
            f"{release_id} and the new results wait; nothing was authorized or debited")


def debit_releases(session: Session, authorization_ids: Sequence[int]
                   ) -> dict[int, tuple[str, int | None]]:
    """Each authorization's pool id and the pooled release it produced (None: none yet), by
    authorization row id: what a budget's pooled debits name (issue 41)."""
    wanted = sorted(set(authorization_ids))
    if not wanted:
        return {}
    released: dict[int | None, int] = {auth: rid for auth, rid in session.execute(
        select(PooledRelease.authorization_id, PooledRelease.id)
        .where(PooledRelease.authorization_id.in_(wanted)))}
    return {row_id: (pool_id, released.get(row_id)) for row_id, pool_id in session.execute(
        select(AuthorizationRow.id, AuthorizationRow.pool_id)
        .where(AuthorizationRow.id.in_(wanted)))}


def released_by(session: Session, row: AuthorizationRow) -> int | None:
    """The pooled release ``row`` produced (None: none yet)."""
    return session.scalars(select(PooledRelease.id).where(
        PooledRelease.authorization_id == row.id)).first()


def authorize(session: Session, actor: Principal, benchmark_id: int, model_id: int,
              signer: SignerKey, now: datetime, *, plugins: PluginLookup = load_plugin
              ) -> tuple[AuthorizationRow, Choice, bool]:
    """Authorize a pool of ``model`` (module docstring); the stored authorization, what was
    chosen and left out, and whether it is the model's previous authorization, which covers
    exactly these results and never produced a release (reused: nothing debited). Nothing is
    written when it is refused."""
    bench = authority_benchmark(session, actor, benchmark_id)
    anchor_of(bench)
    model = get_or_404(session, Model, model_id, "model")
    if not is_approved(session, "model", bench.id, model.id):
        raise InvalidStateError(
            f"model {model.id} is not approved in benchmark {bench.id} (withdrawn, rejected or "
            "pending): nothing was authorized")
    choice = choose(session, bench, model, plugins=plugins)
    release = choice.release
    if release is None:
        raise InvalidStateError(
            f"benchmark {bench.id}'s plug-in declares no pooled release: nothing to authorize")
    if len(choice.picked) < choice.min_sites:
        reasons = "; ".join(f"dataset {lo.dataset_id}: {lo.reason}" for lo in choice.left_out)
        raise InvalidStateError(
            f"a pooled release covers at least {choice.min_sites} sites (one site's pool is "
            f"that site's own release); model {model.id} has {len(choice.picked)} that can be "
            f"pooled now{': ' + reasons if reasons else ''}; nothing was authorized")
    shrink = shrinks(session, bench, model, choice)
    if shrink is not None:
        raise InvalidStateError(shrink)
    previous = _previous(session, bench, model)
    if previous is not None:
        before = PoolInputs.from_bytes(previous.inputs)
        if sorted(i.run_id for i in before.inputs) == sorted(p.run_id for p in choice.picked):
            if released_by(session, previous) is None:
                # its aggregator failed or never ran: the same pool again is that one, already
                # paid for (it yields its very release), never a second debit
                return previous, choice, True
            raise ConflictError(
                f"nothing new to pool for model {model.id}: authorization {previous.pool_id} "
                "covers exactly these results and produced its release; nothing was debited")
    pool_id = f"pool-{bench.id}-{model.id}-{secrets.token_hex(8)}"
    row = AuthorizationRow(
        pool_id=pool_id, benchmark_id=bench.id, model_id=model.id,
        authorized_by_id=actor.user_id, inputs=b"", inputs_digest="sha256:" + "0" * 64,
        signature="", audit_seq=0, created_at=now)
    session.add(row)
    flush(session, "pool authorization")
    by_ledger: dict[str, tuple[LockedLedger, list[int]]] = {}
    for p in choice.picked:
        locked = lock_ledger(session, p.dataset)
        by_ledger.setdefault(ledger_key(locked), (locked, []))[1].append(p.dataset.id)
    debits: list[PoolDebit] = []
    for key, (locked, datasets) in sorted(by_ledger.items()):
        _, seq = charge_authorization(
            session, actor, locked, authorization_id=row.id, pool_id=pool_id,
            benchmark_id=bench.id, datasets=datasets, release=release, now=now)
        debits.append(PoolDebit(ledger=key, datasets=tuple(str(d) for d in datasets), seq=seq))
    document = _document(bench, model, pool_id, choice.picked, release, debits)
    digest = document.digest()
    signature = sign_note(authorization_note_text(pool_id, digest), [signer])
    event = append_event(
        session, actor_id=actor.user_id, action="pool.authorize",
        entity_type="pool_authorization", entity_id=pool_id,
        payload={"pool_id": pool_id, "inputs_digest": digest, "benchmark_id": bench.id,
                 "model_id": model.id, "datasets": [p.dataset.id for p in choice.picked],
                 "result_ids": [p.result.id for p in choice.picked],
                 "debits": [d.seq for d in debits],
                 "rho": release.rho,
                 **({"laplace": list(release.loss.laplace)} if release.loss.laplace else {})},
        now=now)
    row.inputs = document.to_bytes()
    row.inputs_digest = digest
    row.signature = signature.to_bytes().decode("utf-8")
    row.audit_seq = event.seq
    commit(session, "pool authorization")
    return row, choice, False


def get_row(session: Session, actor: Principal, benchmark_id: int, pool_id: str
            ) -> tuple[Benchmark, AuthorizationRow]:
    bench = authority_benchmark(session, actor, benchmark_id)
    row = session.scalars(select(AuthorizationRow).where(
        AuthorizationRow.benchmark_id == bench.id, AuthorizationRow.pool_id == pool_id)).first()
    if row is None:
        raise NotFoundError("pool authorization", pool_id)
    return bench, row


def _witnessed_size(session: Session, anchor: PoolAnchor, first: int) -> int | None:
    """The largest tree of at least ``first`` leaves that a quorum of the anchor's witnesses
    cosigned (None: none yet)."""
    counted = (select(AuditCosignature.tree_size)
               .where(AuditCosignature.witness.in_(anchor.witnesses),
                      AuditCosignature.tree_size >= first)
               .group_by(AuditCosignature.tree_size)
               .having(func.count(func.distinct(AuditCosignature.witness)) >= anchor.quorum)
               .order_by(AuditCosignature.tree_size.desc()).limit(1))
    return session.scalars(counted).first()


def _logged(session: Session, tree: StoredTree, seq: int, size: int) -> LoggedEvent:
    event = session.get(AuditEvent, seq)
    if event is None:
        raise NotFoundError("audit event", seq)
    return LoggedEvent(
        seq=event.seq, actor_id=event.actor_id, action=event.action,
        entity_type=event.entity_type, entity_id=event.entity_id, payload=event.payload,
        occurred_at=event.occurred_at,
        proof=tuple(h.hex() for h in tree.inclusion(seq - 1, size)))


def evidence(session: Session, actor: Principal, benchmark_id: int, pool_id: str,
             signer: SignerKey) -> PoolAuthorization:
    """The authorization with its evidence on the log (module docstring); 409 while the
    benchmark's witnesses have not cosigned a tree that holds it."""
    bench, row = get_row(session, actor, benchmark_id, pool_id)
    anchor = anchor_of(bench)
    inputs = PoolInputs.from_bytes(row.inputs)
    tree = StoredTree(session)
    size = tree.head().size
    cosignatures: list[AuditCosignature] = []
    if anchor.quorum:
        witnessed = _witnessed_size(session, anchor, row.audit_seq)
        if witnessed is None:
            raise ConflictError(
                f"no checkpoint holding authorization {pool_id} (log event {row.audit_seq}) "
                f"is cosigned yet by {anchor.quorum} of benchmark {bench.id}'s witnesses: the "
                "aggregator would refuse it; ask them to witness the log ('sealbench audit "
                "witness') and pool again (nothing more is debited)")
        size = witnessed
        cosignatures = list(session.scalars(select(AuditCosignature).where(
            AuditCosignature.tree_size == size,
            AuditCosignature.witness.in_(anchor.witnesses))).all())
    note = Note.parse(sign_checkpoint(Checkpoint(signer.name, size, tree.root_at(size)), signer))
    for cosignature in cosignatures:
        note = note.with_signature(NoteSignature.from_line(cosignature.signature))
    return PoolAuthorization(
        inputs=inputs, signature=row.signature,
        checkpoint=note.to_bytes().decode("utf-8"),
        authorize_event=_logged(session, tree, row.audit_seq, size),
        debit_events=tuple(_logged(session, tree, d.seq, size) for d in inputs.debits))
