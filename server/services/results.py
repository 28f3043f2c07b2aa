"""Results: submitted only by the dataset's owner, for approved dataset and model associations,
stored only after the attestation token verifies and, when the summary is a release, only when
the release is the one the benchmark's plug-in declares and fits the dataset's privacy budget
(charged in the same transaction, :mod:`.budgets`), with what the pooled leaderboard reads of it
(:mod:`.result_statistics`, also in that transaction); readable by the dataset's owner and the
benchmark's owner, nobody else. A result stays when its dataset's or model's association is
withdrawn later; :func:`withdrawn_sides` says which side withdrew, so readers can mark it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.pooling import summary_loss
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.server.audit import append_event
from sealbench.server.audit_format import result_digests
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidStateError,
    PermissionDeniedError,
    ResultRejectedError,
)
from sealbench.server.models import Benchmark, Dataset, Model, Result
from sealbench.server.schemas import AssetKind, ResultCreate
from sealbench.server.schemas.runs import day_of
from sealbench.server.services._common import PageOf, commit, flush, get_or_404, paged
from sealbench.server.services.associations import (
    exact_release_consented,
    is_approved,
    withdrawn_pairs,
)
from sealbench.server.services.benchmark_plugins import (
    PluginLookup,
    plugin_of,
    validate_summary,
)
from sealbench.server.services.budgets import charge, checked_release, lock_ledger
from sealbench.server.services.result_statistics import record as record_statistics
from sealbench.server.verification import ResultVerifier

__all__ = ["get", "leaderboard", "list_page", "submit", "withdrawn_sides"]


def submit(
    session: Session,
    actor: Principal,
    body: ResultCreate,
    verifier: ResultVerifier,
    now: datetime,
    *,
    plugins: PluginLookup = load_plugin,
) -> Result:
    benchmark = get_or_404(session, Benchmark, body.benchmark_id, "benchmark")
    dataset = get_or_404(session, Dataset, body.dataset_id, "dataset")
    model = get_or_404(session, Model, body.model_id, "model")
    if dataset.owner_id != actor.user_id:
        raise PermissionDeniedError("only the dataset's owner submits its results")
    if benchmark.state != "approved":
        raise InvalidStateError(f"benchmark {benchmark.id} is {benchmark.state}, not approved")
    if not is_approved(session, "dataset", benchmark.id, dataset.id):
        raise InvalidStateError(f"dataset {dataset.id} is not approved in benchmark {benchmark.id}")
    if not is_approved(session, "model", benchmark.id, model.id):
        raise InvalidStateError(f"model {model.id} is not approved in benchmark {benchmark.id}")
    parsed = validate_summary(benchmark.metrics_version, body.summary, plugins)
    plugin = plugin_of(benchmark.metrics_version, plugins)
    release = checked_release(plugin, parsed)
    if release is not None and release.exact and not exact_release_consented(
            session, benchmark.id, dataset.id):
        raise ResultRejectedError(
            f"an exact (non-private) release of dataset {dataset.id}, whose owner has not "
            f"consented to exact releases in benchmark {benchmark.id}")
    taken = select(Result.id).where(Result.sealed_result_digest == body.sealed_result_digest)
    if session.scalars(taken).first() is not None:
        raise ConflictError("a result with this sealed-result digest was already submitted")
    verified = verifier.verify(
        body.attestation_token,
        image_digest=benchmark.image_digest,
        benchmark_id=str(benchmark.id),
        metrics_version=benchmark.metrics_version,
        dataset_digest=dataset.digest,
        model_digest=model.digest,
        summary=body.summary,
        sealed_result_digest=body.sealed_result_digest,
        accept_experimental_gpu=benchmark.accept_experimental,
    )
    ledger = None
    if release is not None:
        # Lock the dataset's privacy ledger before reading its spend, so that two submissions
        # cannot both fit in what is left; an overspend is refused before anything is written,
        # and the charge is written in this same transaction.
        ledger = lock_ledger(session, dataset)
        ledger.after(release)
    row = Result(
        benchmark_id=benchmark.id,
        dataset_id=dataset.id,
        model_id=model.id,
        submitted_by_id=actor.user_id,
        summary=dict(body.summary),
        sealed_result_digest=body.sealed_result_digest,
        attestation_token=body.attestation_token,
        token_issuer=verified.issuer,
        image_digest=verified.image_digest,
        nonce=verified.nonce,
        # the day only (issue 40): a result arrives when its run ends, and a time of day on
        # the leaderboard dated how long the model took on the cases
        created_at=day_of(now),
        result_uri=body.result_uri,
    )
    session.add(row)
    flush(session, "result")
    append_event(
        session,
        actor_id=actor.user_id,
        action="result.submit",
        entity_type="result",
        entity_id=row.id,
        payload={
            "benchmark_id": benchmark.id,
            "dataset_id": dataset.id,
            "model_id": model.id,
            "sealed_result_digest": row.sealed_result_digest,
            "nonce": row.nonce,
            "issuer": row.token_issuer,
            # so that whoever holds the result can check that exactly it was logged
            **result_digests(body.summary, body.attestation_token),
        },
        now=now,
    )
    if ledger is not None and release is not None:
        charge(session, actor, ledger, row, release, now,
               loss=None if parsed is None else summary_loss(parsed))
    # what the pooled leaderboard reads of it, stored with it (one transaction)
    record_statistics(session, plugin, row)
    commit(session, "result")
    return row


def _readable_by(user_id: int) -> ColumnElement[bool]:
    return or_(
        Result.dataset_id.in_(select(Dataset.id).where(Dataset.owner_id == user_id)),
        Result.benchmark_id.in_(select(Benchmark.id).where(Benchmark.owner_id == user_id)),
    )


def get(session: Session, actor: Principal, result_id: int) -> Result:
    row = get_or_404(session, Result, result_id, "result")
    readable = session.scalar(
        select(func.count()).where(Result.id == row.id, _readable_by(actor.user_id))
    )
    if not readable:
        raise PermissionDeniedError(
            "results are readable only by the dataset's owner and the benchmark's owner"
        )
    return row


def list_page(
    session: Session, actor: Principal, *, benchmark_id: int | None, limit: int, offset: int
) -> PageOf[Result]:
    stmt: Select[Result] = select(Result).where(_readable_by(actor.user_id)).order_by(Result.id)
    if benchmark_id is not None:
        stmt = stmt.where(Result.benchmark_id == benchmark_id)
    return paged(session, stmt, limit=limit, offset=offset)


def leaderboard(
    session: Session, actor: Principal, benchmark_id: int
) -> list[tuple[Result, Model, Dataset]]:
    """The latest result per (model, dataset) in the benchmark that the caller may read, every
    one of them (no silent cap: the pooled leaderboard, :mod:`.leaderboard`, is the compact
    answer for large benchmarks)."""
    get_or_404(session, Benchmark, benchmark_id, "benchmark")
    latest = (
        select(func.max(Result.id).label("id"))
        .where(Result.benchmark_id == benchmark_id, _readable_by(actor.user_id))
        .group_by(Result.model_id, Result.dataset_id)
        .subquery()
    )
    rows = session.execute(
        select(Result, Model, Dataset)
        .join(latest, latest.c.id == Result.id)
        .join(Model, Model.id == Result.model_id)
        .join(Dataset, Dataset.id == Result.dataset_id)
        .order_by(Model.id, Dataset.id)
    ).all()
    return [(row[0], row[1], row[2]) for row in rows]


def withdrawn_sides(
    session: Session, rows: Iterable[Result]
) -> dict[int, tuple[AssetKind, ...]]:
    """For each result id: the sides (``dataset``, ``model``) whose association with the
    result's benchmark is currently withdrawn; results of intact pairs are absent."""
    rows = list(rows)
    benchmarks = {r.benchmark_id for r in rows}
    datasets = withdrawn_pairs(session, "dataset", benchmarks)
    models = withdrawn_pairs(session, "model", benchmarks)
    marked: dict[int, tuple[AssetKind, ...]] = {}
    for r in rows:
        sides: list[AssetKind] = []
        if (r.benchmark_id, r.dataset_id) in datasets:
            sides.append("dataset")
        if (r.benchmark_id, r.model_id) in models:
            sides.append("model")
        if sides:
            marked[r.id] = tuple(sides)
    return marked
