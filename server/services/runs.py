"""Run status: a data owner's client reports each run of its datasets (``report``); readers see
the runs that touch them (``list_page``) and the benchmark's progress matrix (``progress``).

Who may do what:

- report: only the dataset's owner; a new run only for an approved benchmark whose dataset and
  model are approved in it. A run keeps its (benchmark, dataset, model); its state moves forward
  (planned → launching → running → succeeded | failed | interrupted) and a terminal state is
  final, except that a succeeded run may then link the result it produced (submitted by the
  same owner for the same pair).
- read: the benchmark's owner (the authority) sees every run of its benchmarks, a data owner
  the runs of its datasets, a model owner the runs of its models; nobody else sees any.

Reports are numbered per run (``seq``): a report whose number is not higher than the stored one
changes nothing, so retried, duplicated or reordered reports converge to the latest. Each change
of state (and each result link) appends an audit event.

Attested failures: a failed run's report may carry the enclave's failure record and its token.
The registry verifies the token as it does a result's
(:meth:`~sealbench.server.verification.ResultVerifier.verify_failure`: trusted issuer, JWKS,
the benchmark's image, metrics version and id, the run's dataset and model digests, audience
``sealbench-failure``, the record's nonce) and checks that the record is of this run; then the
run's ``reason`` is the record's error class (:data:`ERROR_CLASSES`) and ``failure_attested`` is
set. A token that does not verify never blocks the report: the failure is stored as the
hospital's claim and the refusal logged. Once attested, a run's failure cannot be re-claimed.

Nothing beside the release (issue 40): a run keeps no step timings (the report refuses them;
the column holds ``{}``), and its ``created_at``/``updated_at`` are stored to the day
(:func:`~sealbench.server.schemas.runs.day_of`), so that neither the readers of a run nor the
database's operator learn from the registry how long a model took on the cases; the audit
events of a run are kept to the day too (:mod:`sealbench.server.audit`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Final

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.orm import Session

from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    InvalidRequestError,
    InvalidStateError,
    PermissionDeniedError,
    RegistryError,
)
from sealbench.server.models import Benchmark, Dataset, Model, Result, Run
from sealbench.server.schemas import AssetKind
from sealbench.server.schemas.runs import (
    TERMINAL_STATES,
    BenchmarkProgress,
    FailureClass,
    ProgressCell,
    ProgressStatus,
    RunReport,
    RunReportBatch,
    day_of,
)
from sealbench.server.services._common import PageOf, commit, flush, get_or_404, paged
from sealbench.server.services.associations import approved_pairs_subquery, is_approved
from sealbench.server.verification import ResultVerifier, VerifiedResult

__all__ = ["ERROR_CLASSES", "list_page", "progress", "report", "report_many"]

_log = logging.getLogger("sealbench.server")

#: The failure class of each enclave error a failure record names (``sealbench.contract.errors``;
#: the exit codes the client maps); any other name is the enclave's generic ``enclave``.
ERROR_CLASSES: Final[Mapping[str, FailureClass]] = {
    "EnclaveError": "enclave",
    "SpecError": "spec",
    "AttestationUnavailable": "attestation_unavailable",
    "DestinationError": "destination",
    "KeyReleaseDenied": "key_release_denied",
    "AssetIntegrityError": "integrity",
    "AssetRejected": "asset_rejected",
    "StorageFailure": "storage",
    "ResultUploadError": "result_upload",
}

_RANK = {"planned": 0, "launching": 1, "running": 2, "succeeded": 3, "failed": 3,
         "interrupted": 3}
_STATUS: dict[str, ProgressStatus] = {
    "planned": "planned", "launching": "running", "running": "running", "succeeded": "done",
    "failed": "failed", "interrupted": "interrupted",
}


def report(
    session: Session, actor: Principal, run_key: str, body: RunReport, now: datetime,
    verifier: ResultVerifier | None = None,
) -> Run:
    """Create or advance the caller's run ``run_key`` to ``body``. ``verifier`` checks a failure
    token the report carries (None: every failure is a claim)."""
    row = _apply(session, actor, run_key, body, now, verifier)
    commit(session, "run")
    return row


def report_many(
    session: Session, actor: Principal, batch: RunReportBatch, now: datetime,
    verifier: ResultVerifier | None = None,
) -> list[Run]:
    """Apply each report of ``batch`` in order, in one transaction: all or none."""
    keys = [item.run_id for item in batch.reports]
    if len(set(keys)) != len(keys):
        raise InvalidRequestError("a batch names each run once")
    rows = [
        _apply(session, actor, item.run_id, RunReport.model_validate(
            item.model_dump(exclude={"run_id"})), now, verifier)
        for item in batch.reports
    ]
    commit(session, "run")
    return rows


def _attested_failure(
    session: Session, run_key: str, body: RunReport, verifier: ResultVerifier | None
) -> tuple[FailureClass, VerifiedResult] | None:
    """The failure class of the enclave's attested record ``body`` carries, with what verified
    it; None (logged) when there is none or it does not verify: the report is then a claim."""
    record, token = body.failure_record, body.failure_token
    if record is None or token is None or body.state != "failed":
        return None
    if verifier is None:
        _log.warning("run %s: a failure token, but no verifier: stored as a claim", run_key)
        return None
    if record.get("run_id") != run_key:
        _log.warning("run %s: the failure record is of run %.80r: stored as a claim", run_key,
                     record.get("run_id"))
        return None
    benchmark = get_or_404(session, Benchmark, body.benchmark_id, "benchmark")
    dataset = get_or_404(session, Dataset, body.dataset_id, "dataset")
    model = get_or_404(session, Model, body.model_id, "model")
    if body.image_digest != benchmark.image_digest:
        _log.warning("run %s: a failure of another image than the benchmark's: stored as a "
                     "claim", run_key)
        return None
    try:
        verified = verifier.verify_failure(
            token,
            record=record,
            image_digest=benchmark.image_digest,
            benchmark_id=str(benchmark.id),
            metrics_version=benchmark.metrics_version,
            dataset_digest=dataset.digest,
            model_digest=model.digest,
            accept_experimental_gpu=benchmark.accept_experimental,
        )
    except RegistryError as exc:  # a refused token, or no key set: never blocks the report
        _log.warning("run %s: the failure token was not verified, stored as a claim: %s",
                     run_key, exc)
        return None
    error = record.get("error")
    return ERROR_CLASSES.get(error if isinstance(error, str) else "", "enclave"), verified


def _apply(
    session: Session, actor: Principal, run_key: str, body: RunReport, now: datetime,
    verifier: ResultVerifier | None = None,
) -> Run:
    dataset = get_or_404(session, Dataset, body.dataset_id, "dataset")
    if dataset.owner_id != actor.user_id:
        raise PermissionDeniedError("only the dataset's owner reports its runs")
    row = session.scalars(
        select(Run)
        .where(Run.reporter_id == actor.user_id, Run.run_key == run_key)
        .with_for_update()
    ).first()
    if row is None:
        row = _create(session, actor, run_key, body, now)
        attested = _attested_failure(session, run_key, body, verifier)
        if attested is not None:
            row.reason, row.failure_attested = attested[0], True
            flush(session, "run")
        _event(session, actor, row, now, action=f"run.{row.state}", attested=attested)
        if row.result_id is not None:
            _event(session, actor, row, now, action="run.result")
        return row
    if (row.benchmark_id, row.dataset_id, row.model_id) != (
        body.benchmark_id, body.dataset_id, body.model_id
    ):
        raise ConflictError(
            f"run {run_key} is of benchmark {row.benchmark_id}, dataset {row.dataset_id}, "
            f"model {row.model_id}; received another pair"
        )
    if body.seq <= row.seq:
        return row  # a late or repeated report: the stored one is newer
    linked = _check_transition(session, actor, row, body)
    changed = row.state != body.state
    attested = None if row.failure_attested else _attested_failure(
        session, run_key, body, verifier)
    row.state = body.state
    if attested is not None:
        row.reason, row.failure_attested = attested[0], True
        changed = True  # the failure is now the enclave's account: audited
    elif not row.failure_attested:  # an attested failure's reason is not re-claimed
        row.reason = body.reason
    row.attempts = body.attempts
    row.step_seconds = {}  # no timing is kept (a report with one is refused)
    if body.execution_provider is not None:  # a later report without it keeps what was said
        row.execution_provider = body.execution_provider
    row.image_digest = body.image_digest
    row.seq = body.seq
    row.updated_at = day_of(now)
    if linked:
        row.result_id = body.result_id
    flush(session, "run")
    if changed:
        _event(session, actor, row, now, action=f"run.{row.state}", attested=attested)
    if linked:
        _event(session, actor, row, now, action="run.result")
    return row


def _create(
    session: Session, actor: Principal, run_key: str, body: RunReport, now: datetime
) -> Run:
    benchmark = get_or_404(session, Benchmark, body.benchmark_id, "benchmark")
    get_or_404(session, Model, body.model_id, "model")
    if benchmark.state != "approved":
        raise InvalidStateError(f"benchmark {benchmark.id} is {benchmark.state}, not approved")
    pairs: tuple[tuple[AssetKind, int], ...] = (
        ("dataset", body.dataset_id), ("model", body.model_id)
    )
    for kind, asset_id in pairs:
        if not is_approved(session, kind, benchmark.id, asset_id):
            raise InvalidStateError(
                f"{kind} {asset_id} is not approved in benchmark {benchmark.id}"
            )
    row = Run(
        run_key=run_key,
        reporter_id=actor.user_id,
        benchmark_id=body.benchmark_id,
        dataset_id=body.dataset_id,
        model_id=body.model_id,
        state=body.state,
        reason=body.reason,
        image_digest=body.image_digest,
        tee=body.tee,
        attempts=body.attempts,
        step_seconds={},
        execution_provider=body.execution_provider,
        result_id=None,
        seq=body.seq,
        created_at=day_of(now),
        updated_at=day_of(now),
    )
    if body.result_id is not None:
        _check_result(session, actor, row, body.result_id)
        row.result_id = body.result_id
    session.add(row)
    flush(session, "run")
    return row


def _check_result(session: Session, actor: Principal, row: Run, result_id: int) -> None:
    result = get_or_404(session, Result, result_id, "result")
    if result.submitted_by_id != actor.user_id or (
        result.benchmark_id, result.dataset_id, result.model_id
    ) != (row.benchmark_id, row.dataset_id, row.model_id):
        raise InvalidRequestError(
            f"result {result.id} is not a result you submitted for this run's benchmark, "
            "dataset and model"
        )


def _check_transition(session: Session, actor: Principal, row: Run, body: RunReport) -> bool:
    """Refuse a backward or post-terminal change; True when ``body`` links a new result."""
    if row.state in TERMINAL_STATES and body.state != row.state:
        raise InvalidStateError(f"run {row.run_key} is {row.state}; it cannot become {body.state}")
    if _RANK[body.state] < _RANK[row.state]:
        raise InvalidStateError(f"run {row.run_key} is {row.state}; it cannot go back to "
                                f"{body.state}")
    if body.result_id is None or body.result_id == row.result_id:
        if row.result_id is not None and body.result_id is None:
            raise InvalidStateError(f"run {row.run_key} is linked to result {row.result_id}")
        return False
    if row.result_id is not None:
        raise InvalidStateError(f"run {row.run_key} is linked to result {row.result_id}")
    _check_result(session, actor, row, body.result_id)
    return True


def _event(
    session: Session, actor: Principal, row: Run, now: datetime, *, action: str,
    attested: tuple[FailureClass, VerifiedResult] | None = None,
) -> None:
    extra = {} if attested is None else {
        "failure_attested": True, "failure_nonce": attested[1].nonce,
        "issuer": attested[1].issuer,
    }
    append_event(
        session,
        actor_id=actor.user_id,
        action=action,
        entity_type="run",
        entity_id=row.id,
        payload={
            "run_id": row.run_key,
            "benchmark_id": row.benchmark_id,
            "dataset_id": row.dataset_id,
            "model_id": row.model_id,
            "state": row.state,
            "reason": row.reason,
            "image_digest": row.image_digest,
            "result_id": row.result_id,
            **extra,
        },
        now=now,
    )


def _visible_to(user_id: int) -> ColumnElement[bool]:
    return or_(
        Run.dataset_id.in_(select(Dataset.id).where(Dataset.owner_id == user_id)),
        Run.model_id.in_(select(Model.id).where(Model.owner_id == user_id)),
        Run.benchmark_id.in_(select(Benchmark.id).where(Benchmark.owner_id == user_id)),
    )


def list_page(
    session: Session,
    actor: Principal,
    *,
    benchmark_id: int | None,
    state: str | None,
    limit: int,
    offset: int,
) -> PageOf[Run]:
    stmt: Select[Run] = select(Run).where(_visible_to(actor.user_id)).order_by(Run.id)
    if benchmark_id is not None:
        stmt = stmt.where(Run.benchmark_id == benchmark_id)
    if state is not None:
        stmt = stmt.where(Run.state == state)
    return paged(session, stmt, limit=limit, offset=offset)


def progress(session: Session, actor: Principal, benchmark_id: int) -> BenchmarkProgress:
    """Every approved (model, dataset) pair the caller may see, with its status for the
    benchmark's current image: done (a verified result of that image: attested) with the run
    that produced it (a later refused or failed attempt never stands for it), else its latest
    run's state as its data owner reported it (a claim, except a failure the enclave attested),
    else pending."""
    benchmark = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    authority = benchmark.owner_id == actor.user_id
    datasets_q = approved_pairs_subquery("dataset")
    models_q = approved_pairs_subquery("model")
    pairs = session.execute(
        select(Model.id, Model.name, Model.owner_id, Dataset.id, Dataset.name, Dataset.owner_id)
        .join(models_q, models_q.c.asset_id == Model.id)
        .where(models_q.c.benchmark_id == benchmark_id)
        .join(datasets_q, datasets_q.c.benchmark_id == benchmark_id)
        .join(Dataset, Dataset.id == datasets_q.c.asset_id)
        .order_by(Model.id, Dataset.id)
    ).all()
    visible = [
        p for p in pairs if authority or actor.user_id in (p[2], p[5])
    ]
    if not authority and not visible:
        raise PermissionDeniedError(
            "a benchmark's progress is visible to its owner and to the owners of its approved "
            "datasets and models"
        )
    image = benchmark.image_digest
    latest = _latest_runs(session, benchmark_id, image)
    done = _results_of_image(session, benchmark_id, image)
    producers = _producing_runs(session, benchmark_id, image, done)
    cells = []
    for model_id, model_name, _, dataset_id, dataset_name, _ in visible:
        key = (model_id, dataset_id)
        run = latest.get(key)
        result_id = done.get(key)
        if result_id is not None:
            status: ProgressStatus = "done"
            # the run behind the accepted result, never a later attempt (a refused or failed
            # run after it is not what made the pair done)
            run = producers.get(key)
        elif run is not None:
            status = _STATUS[run.state]
        else:
            status = "pending"
        cells.append(ProgressCell(
            model_id=model_id, model_name=model_name, dataset_id=dataset_id,
            dataset_name=dataset_name, status=status,
            run_id=None if run is None else run.run_key,
            reason=None if run is None or status == "done" else run.reason,
            execution_provider=None if run is None else run.execution_provider,
            result_id=result_id if result_id is not None else (run.result_id if run else None),
            updated_at=None if run is None else day_of(run.updated_at),
            attested=status == "done" or (
                status == "failed" and run is not None and run.failure_attested),
            reported_by_id=None if run is None else run.reporter_id,
        ))
    counts: dict[str, int] = {}
    for cell in cells:
        counts[cell.status] = counts.get(cell.status, 0) + 1
    return BenchmarkProgress(
        benchmark_id=benchmark_id, image_digest=image, cells=tuple(cells), counts=counts
    )


def _latest_runs(session: Session, benchmark_id: int, image: str) -> dict[tuple[int, int], Run]:
    newest = (
        select(func.max(Run.id).label("id"))
        .where(Run.benchmark_id == benchmark_id, Run.image_digest == image)
        .group_by(Run.model_id, Run.dataset_id)
        .subquery()
    )
    rows: Iterable[Run] = session.scalars(select(Run).join(newest, newest.c.id == Run.id))
    return {(r.model_id, r.dataset_id): r for r in rows}


def _producing_runs(
    session: Session, benchmark_id: int, image: str, done: Mapping[tuple[int, int], int]
) -> dict[tuple[int, int], Run]:
    """The run that produced each pair's accepted result (``done``: pair -> result id): the run
    linked to that result, else the pair's latest succeeded run linked to no result (a client
    that submitted but has not linked yet); a pair with neither has no run to show."""
    if not done:
        return {}
    out: dict[tuple[int, int], Run] = {}
    linked = session.scalars(select(Run).where(Run.result_id.in_(list(done.values()))))
    for run in linked:
        out[(run.model_id, run.dataset_id)] = run
    unlinked: Iterable[Run] = session.scalars(
        select(Run)
        .where(Run.benchmark_id == benchmark_id, Run.image_digest == image,
               Run.state == "succeeded", Run.result_id.is_(None))
        .order_by(Run.id)
    )
    for run in unlinked:
        key = (run.model_id, run.dataset_id)
        if key in done and (key not in out or out[key].result_id is None):
            out[key] = run
    return out


def _results_of_image(
    session: Session, benchmark_id: int, image: str
) -> dict[tuple[int, int], int]:
    rows = session.execute(
        select(Result.model_id, Result.dataset_id, func.max(Result.id))
        .where(Result.benchmark_id == benchmark_id, Result.image_digest == image)
        .group_by(Result.model_id, Result.dataset_id)
    ).all()
    return {(m, d): rid for m, d, rid in rows}
