"""Many confidential runs as one library call: plan the (dataset, model) pairs of a benchmark
not yet evaluated with the current image, launch them on a TEE backend with bounded
concurrency, retry launches that may succeed on a new try, stop cleanly on interrupt, and
report every state to the registry. ``sealbench run``, the demo and the tests call it; they
only render its :class:`RunnerEvent` stream.

Each pair becomes a run with its own id, record (:class:`~sealbench.client.runs.records.RunStore`)
and registry status (``planned`` → ``launching`` → ``running`` → ``succeeded`` | ``failed`` |
``interrupted``). A launch that fails in a way the backend says may pass (quota, capacity, a
transient API error: ``LaunchError.retryable``) is tried again after an exponential backoff
with jitter, up to :attr:`RetryPolicy.attempts`; a workload that ran and failed is never
retried (a refused key release, an integrity failure, any enclave error). Each stage has its
timeout (:class:`StageTimeouts`): the start of the workload (VM creation, process start) and
the workload itself.

:meth:`Runner.interrupt` (the CLI calls it on Ctrl-C / SIGTERM) stops launching, tears down the
workloads it started (processes killed, containers removed, VMs deleted; with
``keep_on_interrupt`` they are left running and only the watch stops) and records each
unfinished run ``interrupted`` (reason ``stopped``). Running the same plan again resumes with
what is left; a record left unfinished by a process that died is repaired first
(:meth:`RunStore.repair_stale <sealbench.client.runs.records.RunStore.repair_stale>`).

The workload's progress comes from the enclave's typed event lines
(:mod:`sealbench.contract.events`; its prose lines are for people and are not parsed): ``progress``
events (its step, its cases), its step timings and execution provider. A workload that waits for
IAM to apply a grant (a key or storage refusal right after an owner's ``policy sync``,
:mod:`sealbench.enclave.grant_wait`) reports it as ``waiting`` events; the window it may wait is
set in its run spec by the caller (``sealbench run``).

Status reports never stop a run: a report the registry does not take is logged, and the next
report of that run carries its whole state again (reports are numbered, so late ones are
ignored by the registry).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal, cast

from pydantic import BaseModel, ConfigDict, JsonValue

from sealbench.client.errors import ClientError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs.outcome import (
    attested_failure,
    provider_of,
    recorded_failure,
    timings_of,
)
from sealbench.client.runs.records import (
    RunRecord,
    RunStore,
    owner_alive,
    process_identity,
    report_of,
)
from sealbench.client.runs.records import new_run_id as default_run_id
from sealbench.contract.events import (
    CaseDone,
    CasesCounted,
    GrantWaiting,
    RunDone,
    StepStarted,
    parse_event,
)
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.spec import MAX_IAM_WAIT_S, RunSpec
from sealbench.platforms.launcher import (
    Launcher,
    LaunchError,
    LaunchTimeoutError,
    RunningWorkload,
)
from sealbench.server.schemas.runs import MAX_BATCH, ExecutionProvider, RunReportItem

__all__ = [
    "DEFAULT_IAM_WAIT_S",
    "EventKind",
    "PlannedPair",
    "RetryPolicy",
    "RunOutcome",
    "RunPlan",
    "Runner",
    "RunnerEvent",
    "StageTimeouts",
    "iam_wait_window",
    "owners_synced_at",
    "plan_runs",
    "repair_stale_runs",
    "with_run_options",
]

_log = logging.getLogger("sealbench.client")

EventKind = Literal[
    "planned", "skipped", "repaired", "launching", "retry", "running", "progress", "waiting",
    "succeeded", "failed", "interrupted", "report_failed",
]
#: The steps of an enclave run (its ``step`` events state it; this stands for a ``done`` event
#: that comes without one).
_STEPS: Final = 7
#: Seconds a stopping runner waits for its killed workloads to end before it returns anyway.
STOP_GRACE_S: Final = 30.0
#: Seconds between two looks at the stop flag while a stage runs.
_TICK_S: Final = 0.2


class RunnerEvent(BaseModel):
    """One thing that happened to one run (``sealbench run --json`` prints one per line); not
    the enclave's own progress events (:data:`sealbench.contract.events.RunEvent`), which the
    runner turns into ``progress`` and ``waiting`` ones.
    ``message`` is for the local operator only (it may quote the enclave's error); the
    registry is told only the typed fields of :func:`~sealbench.client.runs.records.report_of`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EventKind
    benchmark_id: int
    dataset_id: int
    model_id: int
    run_id: str | None = None
    attempt: int = 0
    delay_s: float | None = None
    step: int | None = None
    steps: int | None = None
    cases_done: int | None = None
    cases_total: int | None = None
    reason: str | None = None
    wall_seconds: float | None = None
    message: str | None = None
    at: datetime


@dataclass(frozen=True)
class PlannedPair:
    dataset_id: int
    model_id: int


@dataclass(frozen=True)
class RunPlan:
    """What :meth:`Runner.run` will launch (``todo``), what is already evaluated with this
    image and metrics version (``done``, the succeeded records), and what another live
    process of this profile is running now (``busy``: not launched twice)."""

    benchmark_id: int
    image_digest: str
    metrics_version: BenchmarkPin
    todo: tuple[PlannedPair, ...]
    done: tuple[RunRecord, ...]
    busy: tuple[RunRecord, ...] = ()


#: How long after an owner's ``policy sync`` a run waits for IAM to apply the grant when the
#: sync's time is not known (Google: "typically 2 minutes, potentially 7 minutes or longer").
DEFAULT_IAM_WAIT_S: Final = 600


def iam_wait_window(
    synced_at: Sequence[datetime | None] | None, now: datetime, *,
    propagation_s: int = DEFAULT_IAM_WAIT_S,
) -> int:
    """Seconds a run started at ``now`` may wait for IAM to apply its owners' grants: what is
    left of ``propagation_s`` after the most recent of their syncs (``synced_at``, one per
    owner), or all of it when any sync's time is unknown (None); nothing when ``synced_at`` is
    None (an owner's grants lag: :func:`owners_synced_at`). A grant written long ago has
    nothing left to propagate: a refusal then fails at once. The enclave clamps it again
    (:data:`~sealbench.contract.spec.MAX_IAM_WAIT_S`)."""
    if synced_at is None:
        return 0
    if not synced_at or any(t is None for t in synced_at):
        return propagation_s
    latest = max(t if t.tzinfo else t.replace(tzinfo=UTC) for t in synced_at if t is not None)
    left = propagation_s - (now - latest).total_seconds()
    return max(0, min(propagation_s, int(left + 0.999)))


def owners_synced_at(
    client: RegistryClient, dataset_id: int, model_id: int
) -> list[datetime | None] | None:
    """When each owner's last ``policy sync`` wrote the pair's grants, as the registry has it
    (``GET /{datasets,models}/N/grants``); None where the registry does not say (never
    reported, no access, an older registry). None in place of the list when an owner's grants
    lag the approvals (the registry says so): the grant this run needs was never written, so
    there is nothing to wait for and the run's refusal names that owner at once."""
    times: list[datetime | None] = []
    for kind, asset_id in (("dataset", dataset_id), ("model", model_id)):
        try:
            status = client.get_grants(kind, asset_id)  # type: ignore[arg-type]
        except ClientError as exc:
            _log.info("no grant report for %s %d (%s)", kind, asset_id, type(exc).__name__)
            times.append(None)
            continue
        if status.lagging:
            _log.info("%s %d: its owner's grants lag the approvals; no IAM wait", kind, asset_id)
            return None
        times.append(status.synced_at)
    return times


def with_run_options(spec: RunSpec, *, iam_wait_s: int, allow_cpu_fallback: bool) -> RunSpec:
    """``spec`` with the run's inert options: how long the enclave may wait for IAM to apply a
    grant, and whether a GPU run may fall back to the CPU (absent when not allowed)."""
    changes = {"iam_wait_s": str(min(iam_wait_s, MAX_IAM_WAIT_S)) if iam_wait_s > 0 else None,
               "allow_cpu_fallback": "true" if allow_cpu_fallback else None}
    return RunSpec.model_validate({**spec.model_dump(), **changes})


def plan_runs(
    store: RunStore,
    *,
    benchmark_id: int,
    pairs: Sequence[tuple[int, int]],
    image_digest: str,
    metrics_version: BenchmarkPin,
    force: bool = False,
) -> RunPlan:
    """The plan for ``pairs`` (approved (dataset, model) pairs, see
    :func:`~sealbench.client.runs.spec.approved_models`): each pair without a succeeded run of
    ``image_digest`` and ``metrics_version`` is to do; with ``force`` every pair is."""
    todo: list[PlannedPair] = []
    done: list[RunRecord] = []
    busy: list[RunRecord] = []
    live = {
        (r.dataset_id, r.model_id): r for r in store.all()
        if r.benchmark_id == benchmark_id and r.active and r.owner_pid is not None
        and r.owner_pid != os.getpid() and owner_alive(r.owner_pid, r.owner_started)
    }
    for dataset_id, model_id in pairs:
        if (dataset_id, model_id) in live:
            busy.append(live[(dataset_id, model_id)])
            continue
        previous = None if force else store.succeeded(
            benchmark_id, dataset_id, model_id,
            image_digest=image_digest, metrics_version=str(metrics_version),
        )
        if previous is None:
            todo.append(PlannedPair(dataset_id, model_id))
        else:
            done.append(previous)
    return RunPlan(benchmark_id, image_digest, metrics_version, tuple(todo), tuple(done),
                   tuple(busy))


def repair_stale_runs(
    store: RunStore, client: RegistryClient | None, now: datetime
) -> list[RunRecord]:
    """Record ``interrupted`` every unfinished run whose owner process is gone
    (:meth:`RunStore.repair_stale`) and tell the registry (a report it refuses is logged)."""
    repaired = store.repair_stale(now)
    for record in repaired:
        if client is None:
            continue
        try:
            client.report_run(record.run_id, report_of(record))
        except ClientError as exc:
            _log.warning("run %s: the registry did not take its repair (%s)", record.run_id, exc)
    return repaired


@dataclass(frozen=True)
class RetryPolicy:
    """Launch attempts per run (the first included) and the backoff between them: the n-th
    retry waits ``min(max_delay_s, first_delay_s * 2**(n-1))`` times a jitter in [0.5, 1)."""

    attempts: int = 4
    first_delay_s: float = 5.0
    max_delay_s: float = 120.0

    def delay(self, retry: int, rand: Callable[[], float]) -> float:
        base = min(self.max_delay_s, self.first_delay_s * 2 ** (retry - 1))
        return float(base * (0.5 + rand() / 2))


@dataclass(frozen=True)
class StageTimeouts:
    """Seconds each stage may take: ``start`` (the launcher's start: process start, container
    creation, VM creation) and ``workload`` (from start to exit)."""

    start_s: float = 1800.0
    workload_s: float = 6 * 3600.0


@dataclass(frozen=True)
class RunOutcome:
    """How :meth:`Runner.run` ended: the records of this call's runs (in plan order) and of
    the pairs it skipped, and whether it was interrupted."""

    records: tuple[RunRecord, ...]
    skipped: tuple[RunRecord, ...]
    interrupted: bool

    @property
    def failed(self) -> tuple[RunRecord, ...]:
        return tuple(r for r in self.records if r.status == "failed")

    @property
    def succeeded(self) -> tuple[RunRecord, ...]:
        return tuple(r for r in self.records if r.status == "succeeded")


class _Stopped(Exception):  # noqa: N818 - control flow inside the runner only
    """The runner was interrupted while this run waited."""


@dataclass
class _Slot:
    """One run in flight: its latest record, and its workload once started."""

    record: RunRecord
    workload: RunningWorkload | None = None
    final: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Runner:
    """Runs a :class:`RunPlan` on ``launcher``; ``make_spec(dataset_id, model_id, run_id)``
    builds each run's specification. ``client`` (None: no registry reports) receives each
    run's status. ``clock``, ``rand`` and ``new_run_id`` are injectable for tests."""

    def __init__(
        self,
        launcher: Launcher,
        store: RunStore,
        make_spec: Callable[[int, int, str], RunSpec],
        *,
        client: RegistryClient | None,
        tee: str,
        parallel: int = 1,
        retry: RetryPolicy | None = None,
        timeouts: StageTimeouts | None = None,
        keep_on_interrupt: bool = False,
        on_event: Callable[[RunnerEvent], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rand: Callable[[], float] = random.random,
        new_run_id: Callable[[datetime], str] | None = None,
    ) -> None:
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, received {parallel}")
        self._launcher = launcher
        self._store = store
        self._make_spec = make_spec
        self._client = client
        self._tee = tee
        self._parallel = parallel
        self._retry = retry or RetryPolicy()
        self._timeouts = timeouts or StageTimeouts()
        self._keep = keep_on_interrupt
        self._on_event = on_event
        self._clock = clock
        self._rand = rand
        self._new_run_id = new_run_id or default_run_id
        self._stop = threading.Event()
        self._slots: dict[str, _Slot] = {}
        self._slots_lock = threading.Lock()
        self._emit_lock = threading.Lock()
        self._errors: list[Exception] = []
        self._owner = process_identity()

    # -- control -------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop: no new launch, and :meth:`run` tears down what runs and returns. Safe to call
        from a signal handler (it only sets a flag)."""
        self._stop.set()

    @property
    def interrupted(self) -> bool:
        return self._stop.is_set()

    @property
    def errors(self) -> tuple[Exception, ...]:
        """The failures of this runner's failed runs, in the order they ended."""
        with self._emit_lock:
            return tuple(self._errors)

    def run(self, plan: RunPlan) -> RunOutcome:
        """Repair stale records, record and report every planned run, launch them
        ``parallel`` at a time, and return when all ended or the runner was interrupted."""
        for fixed in repair_stale_runs(self._store, self._client, self._clock()):
            self._emit("repaired", fixed, reason=fixed.reason, message=fixed.error)
        for record in plan.done:
            self._emit("skipped", record, message=f"already evaluated in {record.run_id}")
        for record in plan.busy:
            self._emit("skipped", record, message=f"running in process {record.owner_pid} "
                       f"as {record.run_id}")
        slots = [self._plan_one(plan, pair) for pair in plan.todo]
        self._report_planned([slot.record for slot in slots])
        work: queue.SimpleQueue[_Slot] = queue.SimpleQueue()
        for slot in slots:
            work.put(slot)
        workers = [
            threading.Thread(target=self._worker, args=(work,), daemon=True,
                             name=f"sealbench-run-{i}")
            for i in range(min(self._parallel, len(slots)))
        ]
        for worker in workers:
            worker.start()
        while any(w.is_alive() for w in workers):
            if self._stop.wait(_TICK_S):
                self._tear_down(workers)
                break
        for slot in slots:  # whatever never started, or did not end in the grace period
            self._finish(slot, "interrupted", reason="stopped",
                         error="interrupted before it finished")
        records = tuple(self._store.get(slot.record.run_id) for slot in slots)
        return RunOutcome(records, plan.done, self._stop.is_set())

    # -- one run -------------------------------------------------------------------------------

    def _plan_one(self, plan: RunPlan, pair: PlannedPair) -> _Slot:
        now = self._clock()
        run_id = self._new_run_id(now)
        spec_uri = ""  # filled in when the spec is built, just before launch
        record = RunRecord(
            run_id=run_id, benchmark_id=plan.benchmark_id, dataset_id=pair.dataset_id,
            model_id=pair.model_id, tee=self._tee, image_digest=plan.image_digest,
            result_uri=spec_uri, status="planned", started_at=now, owner_pid=self._owner[0],
            owner_started=self._owner[1], metrics_version=str(plan.metrics_version), seq=1,
        )
        slot = _Slot(record)
        with self._slots_lock:
            self._slots[run_id] = slot
        self._store.save(record)
        self._emit("planned", record)
        return slot

    def _report_planned(self, records: list[RunRecord]) -> None:
        """The whole plan in as few requests as a batch allows (a refused batch is logged; each
        run's next report carries its whole state anyway)."""
        if self._client is None:
            return
        for start in range(0, len(records), MAX_BATCH):
            chunk = records[start : start + MAX_BATCH]
            items = tuple(
                RunReportItem(run_id=r.run_id, **report_of(r).model_dump()) for r in chunk
            )
            try:
                self._client.report_runs(items)
            except ClientError as exc:
                _log.warning("the registry did not take %d planned runs (%s)", len(chunk), exc)
                for record in chunk:
                    self._emit("report_failed", record, message=str(exc))

    def _worker(self, work: queue.SimpleQueue[_Slot]) -> None:
        while not self._stop.is_set():
            try:
                slot = work.get_nowait()
            except queue.Empty:
                return
            try:
                self._run_one(slot)
            except _Stopped:
                self._finish(slot, "interrupted", reason="stopped",
                             error="interrupted before it finished")
            except ClientError as exc:  # its specification could not be built (asset unsealed…)
                with self._emit_lock:
                    self._errors.append(exc)
                self._finish(slot, "failed", reason="launch", error=str(exc)[:2000], exc=exc)
            except Exception as exc:  # noqa: BLE001 - one run's bug must not end the others
                _log.exception("run %s ended unexpectedly", slot.record.run_id)
                self._finish(slot, "failed", reason="launch", error=f"internal error: {exc}")

    def _run_one(self, slot: _Slot) -> None:
        record = slot.record
        spec = self._make_spec(record.dataset_id, record.model_id, record.run_id)
        self._update(slot, result_uri=spec.result_uri)
        timings: dict[str, float] = {}
        progress = _ProgressParser(self, slot, timings)
        attempt = 0
        while True:
            attempt += 1
            if self._stop.is_set():
                raise _Stopped
            self._update(slot, status="launching", attempts=attempt, bump=True)
            self._emit("launching", slot.record, attempt=attempt)
            started = time.monotonic()
            try:
                workload = self._start(spec, progress)
            except LaunchError as exc:
                if exc.retryable and attempt < self._retry.attempts:
                    delay = self._retry.delay(attempt, self._rand)
                    self._emit("retry", slot.record, attempt=attempt, delay_s=round(delay, 2),
                               reason=exc.failure_class, message=str(exc))
                    if self._stop.wait(delay):
                        raise _Stopped from exc
                    continue
                self._fail(slot, exc, timings, progress.provider)
                return
            timings["launch"] = round(time.monotonic() - started, 2)
            break
        with slot.lock:
            slot.workload = workload
        name = _workload_name(workload)
        if name is not None:
            self._update(slot, workload=name)
        if self._stop.is_set():  # the teardown may have looked before the workload existed
            _tear_down_one(workload, keep=self._keep, reap=True)
            raise _Stopped
        self._update(slot, status="running", step_seconds=dict(timings), bump=True)
        self._emit("running", slot.record, attempt=attempt)
        try:
            result = workload.wait(timeout=self._timeouts.workload_s)
        except LaunchError as exc:
            if self._stop.is_set():
                raise _Stopped from exc
            # the enclave's own signed failure record, when it attested one (local folders, or
            # the launcher's result store): the registry verifies it
            evidence = attested_failure(spec.result_uri, getattr(self._launcher, "result_store",
                                                                 None))
            self._fail(slot, recorded_failure(exc, spec.result_uri), timings, progress.provider,
                       evidence)
            return
        self._finish(
            slot, "succeeded", wall_seconds=result.wall_seconds,
            peak_rss_bytes=result.peak_rss_bytes, step_seconds=dict(timings) or None,
            execution_provider=progress.provider,
        )

    def _start(self, spec: RunSpec, progress: _ProgressParser) -> RunningWorkload:
        """``launcher.start`` bounded by the start timeout and the stop flag: the call runs in
        its own thread, and a workload that starts after the runner gave up on it is torn
        down as soon as it exists."""
        lock = threading.Lock()
        started = threading.Event()
        state: dict[str, object] = {"abandoned": False}

        def go() -> None:
            try:
                workload: RunningWorkload | None = self._launcher.start(spec, on_output=progress)
                error: BaseException | None = None
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                workload, error = None, exc
            with lock:
                state["workload"], state["error"] = workload, error
                abandoned = state["abandoned"]
                started.set()
            if abandoned and workload is not None:
                _tear_down_one(workload, keep=self._keep, reap=True)

        threading.Thread(target=go, daemon=True, name=f"start-{spec.run_id}").start()
        deadline = time.monotonic() + self._timeouts.start_s
        while not started.wait(_TICK_S):
            stop, late = self._stop.is_set(), time.monotonic() > deadline
            if not (stop or late):
                continue
            with lock:
                if started.is_set():
                    break
                state["abandoned"] = True
            if stop:
                raise _Stopped
            raise LaunchTimeoutError(
                f"the workload did not start within {self._timeouts.start_s:.0f} s"
            )
        error = state["error"]
        if isinstance(error, BaseException):
            raise error
        return cast("RunningWorkload", state["workload"])

    def _fail(self, slot: _Slot, exc: Exception, timings: dict[str, float],
              provider: ExecutionProvider | None = None,
              evidence: tuple[dict[str, JsonValue], str] | None = None) -> None:
        cls = exc.failure_class if isinstance(exc, LaunchError) else "launch"
        with self._emit_lock:
            self._errors.append(exc)
        self._finish(
            slot, "failed", reason=cls, error=str(exc)[:2000], step_seconds=dict(timings) or None,
            peak_rss_bytes=getattr(exc, "peak_rss_bytes", None), execution_provider=provider,
            failure_record=None if evidence is None else evidence[0],
            failure_token=None if evidence is None else evidence[1], exc=exc,
        )

    # -- stopping ------------------------------------------------------------------------------

    def _tear_down(self, workers: list[threading.Thread]) -> None:
        with self._slots_lock:
            slots = list(self._slots.values())
        for slot in slots:
            with slot.lock:
                workload = None if slot.final else slot.workload
            if workload is not None:
                _tear_down_one(workload, keep=self._keep)
        deadline = time.monotonic() + (0 if self._keep else STOP_GRACE_S)
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- records, reports, events ----------------------------------------------------------------

    def _update(self, slot: _Slot, *, bump: bool = False, **changes: object) -> None:
        with slot.lock:
            if slot.final:
                return
            if bump:
                changes["seq"] = slot.record.seq + 1
            slot.record = slot.record.model_copy(update=changes)
            record = slot.record
        self._store.save(record)
        if bump:
            self._report(record)

    def _finish(
        self, slot: _Slot, status: str, *, exc: Exception | None = None, **changes: object
    ) -> None:
        """Record the run's end once: the first end wins (a run that succeeded as the stop
        came stays succeeded)."""
        with slot.lock:
            if slot.final:
                return
            slot.final = True
            slot.record = slot.record.model_copy(update={
                **changes, "status": status, "finished_at": self._clock(),
                "seq": slot.record.seq + 1,
            })
            record = slot.record
        self._store.save(record)
        self._report(record)
        message = record.error
        if exc is not None:
            message = str(exc)
        self._emit(status, record, reason=record.reason,  # type: ignore[arg-type]
                   wall_seconds=record.wall_seconds, message=message, attempt=record.attempts)

    def _report(self, record: RunRecord) -> None:
        if self._client is None:
            return
        try:
            self._client.report_run(record.run_id, report_of(record))
        except ClientError as exc:
            _log.warning("run %s: the registry did not take its status (%s)", record.run_id, exc)
            self._emit("report_failed", record, message=str(exc))

    def _emit(self, kind: EventKind, record: RunRecord, **fields: object) -> None:
        if self._on_event is None:
            return
        event = RunnerEvent.model_validate({
            "kind": kind, "benchmark_id": record.benchmark_id, "dataset_id": record.dataset_id,
            "model_id": record.model_id, "run_id": record.run_id, "at": self._clock(),
            **{k: v for k, v in fields.items() if v is not None},
        })
        with self._emit_lock:
            self._on_event(event)


def _workload_name(workload: RunningWorkload) -> str | None:
    """The backend's name of a started workload: a Confidential Space VM's instance name or a
    container's id (a mock process has neither: its pid dies with its owner)."""
    for attribute in ("instance_name", "container_id"):
        value = getattr(workload, attribute, None)
        if isinstance(value, str) and value:
            return value[:200]
    return None


def _tear_down_one(workload: RunningWorkload, *, keep: bool, reap: bool = False) -> None:
    """Kill a workload (its process, container or VM) unless it is to be kept; with ``reap``,
    also wait for its end, which removes what it leaves (socket, container, VM)."""
    if keep:
        return
    try:
        workload.kill()
        if reap:
            with contextlib.suppress(LaunchError):
                workload.wait(timeout=STOP_GRACE_S)
    except Exception as exc:  # noqa: BLE001 - teardown goes on with the other runs
        _log.warning("could not stop a workload: %s", exc)


class _ProgressParser:
    """Turns the enclave's event lines (:func:`~sealbench.contract.events.parse_event`; any
    other line is ignored) into ``progress`` events, step timings and the execution provider
    the model ran on (one of the known names, or None), and its waits for IAM to apply a grant
    into ``waiting`` events (the message built from the event's typed fields: nothing else of
    the line travels on)."""

    def __init__(self, runner: Runner, slot: _Slot, timings: dict[str, float]) -> None:
        self._runner = runner
        self._slot = slot
        self._timings = timings
        self.provider: ExecutionProvider | None = None
        #: The step the enclave last said it started (its cases are counted and done in one).
        self._step: tuple[int, int] | None = None

    def __call__(self, line: str) -> None:
        event = parse_event(line)
        if event is None:
            return
        self._timings.update(timings_of(event))
        # named as soon as the model is loaded, so a run that fails later (a GPU run on the
        # CPU) still records the provider it had
        self.provider = provider_of(event) or self.provider
        step: dict[str, object] = {}
        if self._step is not None:
            step = {"step": self._step[0], "steps": self._step[1]}
        if isinstance(event, StepStarted):
            self._step = (event.index, event.total)
            self._progress(step=event.index, steps=event.total)
        elif isinstance(event, CasesCounted):
            self._progress(**step, cases_total=event.total)
        elif isinstance(event, CaseDone):
            self._progress(**step, cases_done=event.index, cases_total=event.total)
        elif isinstance(event, RunDone):
            # the result is attested and uploaded: the last step is complete
            total = self._step[1] if self._step is not None else _STEPS
            self._progress(step=total, steps=total)
        elif isinstance(event, GrantWaiting):
            self._runner._emit(
                "waiting", self._slot.record, delay_s=float(event.next_try_s),
                message=f"waiting for IAM to apply the grant: the {event.owner} owner's "
                f"{event.service} refused this workload ({event.waited_s} of {event.window_s} "
                "s waited)",
            )

    def _progress(self, **fields: object) -> None:
        self._runner._emit("progress", self._slot.record, **fields)
