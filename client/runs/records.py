"""The data owner's local record of every run it launched: one ``runs/<run id>.json`` per run in
the profile's data directory (:class:`RunStore`), and the registry's view of one
(:func:`report_of`).

Run records (version 2; version 1 records, without the fields marked below, are read as they
are) say which benchmark, dataset and model a run evaluated, where its result lies and how it
ended; a pair with a succeeded run of the current image is not run again unless asked
(``--force``). The record holds no secret and no per-case value. Version 2 adds ``owner_pid``
and ``owner_started`` (the process that drives the run, and its start time in clock ticks since
boot, so a reused pid is not taken for the owner), ``reason`` (the failure class or interrupt
reason the registry is told), ``attempts``, ``seq`` (the number of the latest status report),
``metrics_version`` and ``workload`` (the VM instance or container the backend started);
``execution_provider`` (the ONNX Runtime provider the enclave said ran the model, one of a known
set) is optional, and so are ``failure_record`` and ``failure_token`` (the enclave's failure
record of a failed run and the token it attested it with, read from the result location; they
hold nothing secret and no case data, and go to the registry, which verifies the token). A
record left ``planned``, ``launching`` or ``running`` by a process that is gone is stale:
:meth:`RunStore.repair_stale` marks it ``interrupted`` (reason ``owner_died``).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from sealbench.client.errors import ConfigError
from sealbench.client.processes import owner_alive, process_identity
from sealbench.server.schemas.runs import (
    EXECUTION_PROVIDERS,
    MAX_FAILURE_RECORD_BYTES,
    MAX_FAILURE_TOKEN_CHARS,
    ExecutionProvider,
    RunReport,
)

__all__ = [
    "RunRecord",
    "RunStatus",
    "RunStore",
    "new_run_id",
    "owner_alive",
    "process_identity",
    "report_of",
]

log = logging.getLogger("sealbench.client")


_MAX_RECORD: Final = 1 << 20


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class RunRecord(BaseModel):
    """One run as this data owner launched it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["sealbench/run-record"] = "sealbench/run-record"
    version: Literal[1, 2] = 2
    run_id: str
    benchmark_id: int
    dataset_id: int
    model_id: int
    tee: str
    image_digest: str
    result_uri: str
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None = None
    wall_seconds: float | None = None
    peak_rss_bytes: int | None = None
    error: str | None = None
    result_id: int | None = None
    step_seconds: dict[str, float] | None = None
    owner_pid: int | None = None
    owner_started: int | None = None
    reason: str | None = None
    attempts: int = 0
    seq: int = 0
    metrics_version: str | None = None
    #: The backend's name of the started workload (a VM instance, a container), so that a
    #: repaired record says what may still be running.
    workload: str | None = None
    #: The ONNX Runtime execution provider the enclave ran the model on (absent: not said).
    execution_provider: ExecutionProvider | None = None
    #: A failed run's ``failure.json`` as the enclave wrote it, and its ``failure.token`` (both
    #: or neither; absent: the enclave attested no failure, or none could be read).
    failure_record: dict[str, JsonValue] | None = None
    failure_token: str | None = None
    #: The run spec's result location when ``result_uri`` now names a local copy of the
    #: objects (``result fetch``): where the run left them, and where a benchmark's aggregator
    #: reads the site's sealed statistics (issue 27). None: ``result_uri`` is that location.
    spec_result_uri: str | None = None

    @property
    def active(self) -> bool:
        """Not finished: planned, launching or running."""
        return self.status in _ACTIVE


RunStatus = Literal["planned", "launching", "running", "succeeded", "failed", "interrupted"]


_ACTIVE: Final = frozenset({"planned", "launching", "running"})


class RunStore:
    """The run records of one profile, one JSON file per run."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise ConfigError(f"{run_id[:70]!r} is not a run id")
        return self.root / f"{run_id}.json"

    def save(self, record: RunRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self.path(record.run_id)
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(record.model_dump_json(indent=2))
        tmp.replace(target)

    def get(self, run_id: str) -> RunRecord:
        try:
            raw = self.path(run_id).read_bytes()[:_MAX_RECORD]
        except FileNotFoundError:
            raise ConfigError(
                f"no run {run_id!r} on this machine for this profile",
                hint="list runs with 'sealbench result ls'",
            ) from None
        try:
            return RunRecord.model_validate_json(raw)
        except ValidationError as exc:
            raise ConfigError(
                f"run record {run_id} is damaged ({exc.error_count()} errors)"
            ) from exc

    def all(self) -> list[RunRecord]:
        if not self.root.is_dir():
            return []
        records = [self.get(p.stem) for p in sorted(self.root.glob("*.json"))]
        return sorted(records, key=lambda r: r.started_at)

    def succeeded(
        self,
        benchmark_id: int,
        dataset_id: int,
        model_id: int,
        *,
        image_digest: str | None = None,
        metrics_version: str | None = None,
    ) -> RunRecord | None:
        """The latest succeeded run of this triple, if any; with ``image_digest`` (and
        ``metrics_version``), only a run of that image (and metrics version; a version 1
        record, which does not say, counts as any)."""
        done = [
            r for r in self.all()
            if (r.benchmark_id, r.dataset_id, r.model_id) == (benchmark_id, dataset_id, model_id)
            and r.status == "succeeded"
            and (image_digest is None or r.image_digest == image_digest)
            and (metrics_version is None or r.metrics_version in (None, metrics_version))
        ]
        return done[-1] if done else None

    def repair_stale(
        self,
        now: datetime,
        alive: Callable[[int, int | None], bool] = owner_alive,
    ) -> list[RunRecord]:
        """Mark ``interrupted`` (reason ``owner_died``) every unfinished record whose owner
        process is gone (a version 1 record names no owner: its process is gone too, since
        that version ran one pair at a time in the foreground). Returns the repaired records."""
        repaired = []
        for record in self.all():
            if not record.active:
                continue
            if record.owner_pid is not None and alive(record.owner_pid, record.owner_started):
                continue
            fixed = record.model_copy(update={
                "status": "interrupted", "reason": "owner_died", "finished_at": now,
                "seq": record.seq + 1, "version": 2,
                "error": "the process that ran it ended before it finished" + (
                    "" if record.workload is None
                    else f"; its workload {record.workload} may still exist: check it and "
                    "delete it if so (a VM costs money until deleted)"
                ),
            })
            self.save(fixed)
            repaired.append(fixed)
        return repaired


def new_run_id(now: datetime, token: Callable[[int], str] = secrets.token_hex) -> str:
    """A new run's id: ``run-<UTC day>-<8 random hex digits>``. The day only: the id travels
    to the registry (its reports, the enclave's token and summary), and a start time to the
    second beside the result's arrival would tell everyone how long the model took on the
    cases (issue 40). The record keeps the start to the second (``started_at``), here."""
    return f"run-{now.astimezone(UTC).strftime('%Y%m%d')}-{token(4)}"


def report_of(record: RunRecord) -> RunReport:
    """The registry's view of ``record``: state, failure class, image; no free text (the local
    ``error`` stays here) and no timing: how long the enclave took varies with the cases, so
    the step timings stay in this record, the hospital's own (issue 40)."""
    reason = record.reason
    evidence = _failure_evidence(record)
    if record.status == "failed" and reason is None:
        reason = "launch"  # a version 1 record does not say
    if record.status == "interrupted" and reason is None:
        reason = "owner_died"
    return RunReport(
        benchmark_id=record.benchmark_id,
        dataset_id=record.dataset_id,
        model_id=record.model_id,
        state=record.status,
        seq=record.seq,
        reason=reason if record.status in ("failed", "interrupted") else None,  # type: ignore[arg-type]
        image_digest=record.image_digest,
        tee=record.tee,
        attempts=min(record.attempts, 100),
        execution_provider=(record.execution_provider
                            if record.execution_provider in EXECUTION_PROVIDERS else None),
        result_id=record.result_id if record.status == "succeeded" else None,
        failure_record=evidence[0] if evidence else None,
        failure_token=evidence[1] if evidence else None,
    )


def _failure_evidence(record: RunRecord) -> tuple[dict[str, JsonValue], str] | None:
    """The failure record and token a failed run's report carries, when both fit the report's
    bounds (else none: the failure is reported as a claim rather than not at all)."""
    if record.status != "failed" or record.failure_record is None or record.failure_token is None:
        return None
    from sealbench.crypto.canonical import canonical_json

    try:
        size = len(canonical_json(record.failure_record))
    except (TypeError, ValueError):
        return None
    if size > MAX_FAILURE_RECORD_BYTES or len(record.failure_token) > MAX_FAILURE_TOKEN_CHARS:
        return None
    return record.failure_record, record.failure_token
