"""The runner (:mod:`sealbench.client.runs.batch`) with a scripted launcher: what it retries (a
quota or capacity refusal at launch, with backoff) and never retries (a workload that ran and
failed: refused key release, integrity), its bounded concurrency, its stage timeouts, how an
interrupt tears down and records, resume, stale-record repair, and what the registry is told.
The end-to-end path with the real mock launcher is in tests/e2e/test_cli_flow.py."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs.batch import (
    RetryPolicy,
    Runner,
    RunnerEvent,
    StageTimeouts,
    plan_runs,
)
from sealbench.client.runs.launchers import (
    EnclaveRunFailed,
    LaunchError,
    LaunchResult,
    OutputFn,
    TransientLaunchError,
)
from sealbench.client.runs.records import RunRecord, RunStore, process_identity, report_of
from sealbench.contract.events import RunDone, StepStarted
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.spec import RunSpec
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate

IMAGE = sha256_digest(b"evaluation image")
_ids = itertools.count(1)


class ScriptedWorkload:
    """Runs for ``seconds`` (or until killed), then ends as ``outcome`` says."""

    def __init__(self, launcher: ScriptedLauncher, outcome: Any, seconds: float,
                 on_output: OutputFn | None) -> None:
        self._launcher = launcher
        self._outcome = outcome
        self._seconds = seconds
        self.killed = threading.Event()
        self._on_output = on_output

    @property
    def pid(self) -> int | None:
        return None

    def kill(self) -> None:
        self._launcher.kills += 1
        self.killed.set()

    def wait(self, timeout: float | None = None) -> LaunchResult:
        try:
            if self._on_output is not None:
                self._on_output(StepStarted(index=5, total=7, name="score").to_line())
                self._on_output(RunDone(timings={"infer": 1.5, "Bad-Name": 2.0}).to_line())
            if self.killed.wait(self._seconds):
                raise EnclaveRunFailed(-9, "killed by signal 9", None)
            if isinstance(self._outcome, Exception):
                raise self._outcome
            return LaunchResult(IMAGE, self._seconds, 1024)
        finally:
            with self._launcher.lock:
                self._launcher.running -= 1


@dataclass
class ScriptedLauncher:
    """A :class:`~sealbench.client.runs.launchers.Launcher` whose n-th start of a model follows
    ``script[model_id][n]``: an exception raised at start, or the workload's outcome (None:
    success, an exception: how it fails); ``seconds`` is how long each workload runs."""

    script: dict[int, list[Any]] = field(default_factory=dict)
    seconds: float = 0.01
    start_delay: float = 0.0
    starts: dict[int, int] = field(default_factory=dict)
    running: int = 0
    peak: int = 0
    kills: int = 0
    workloads: list[ScriptedWorkload] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def image_digest(self) -> str:
        return IMAGE

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> ScriptedWorkload:
        model = int(spec.model.asset_id)
        with self.lock:
            n = self.starts.get(model, 0)
            self.starts[model] = n + 1
        steps = self.script.get(model, [None])
        step = steps[min(n, len(steps) - 1)]
        time.sleep(self.start_delay)
        if isinstance(step, LaunchError):
            raise step
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            workload = ScriptedWorkload(self, step, self.seconds, on_output)
            self.workloads.append(workload)
        return workload

    def launch(self, spec: RunSpec, *, on_output: OutputFn | None = None,
               timeout: float | None = None) -> LaunchResult:
        return self.start(spec, on_output=on_output).wait(timeout)


def _spec(dataset_id: int, model_id: int, run_id: str) -> RunSpec:
    """Only what the runner and the scripted launcher read (no real enclave runs here)."""
    from sealbench.contract.spec import AssetLocation

    def asset(asset_id: int) -> AssetLocation:
        return AssetLocation.model_construct(asset_id=str(asset_id))

    return RunSpec.model_construct(run_id=run_id, dataset=asset(dataset_id),
                                   model=asset(model_id), result_uri="file:///nowhere/result")


def _runner(launcher: ScriptedLauncher, store: RunStore, events: list[RunnerEvent],
            **options: Any) -> Runner:
    options.setdefault("retry", RetryPolicy(attempts=3, first_delay_s=0.02))
    options.setdefault("client", None)
    return Runner(launcher, store, _spec, tee="mock", on_event=events.append,
                  rand=lambda: 0.0, new_run_id=lambda now: f"run-test-{next(_ids)}",
                  **options)


def _plan(store: RunStore, models: tuple[int, ...], *, benchmark: int = 1, dataset: int = 10,
          force: bool = False) -> Any:
    return plan_runs(store, benchmark_id=benchmark, pairs=[(dataset, m) for m in models],
                     image_digest=IMAGE, metrics_version=BenchmarkPin.parse("brats-2023-gli/1"),
                     force=force)


def _kinds(events: list[RunnerEvent], model: int) -> list[str]:
    return [e.kind for e in events if e.model_id == model and e.kind != "progress"]


def test_quota_refusal_retried_with_backoff_then_succeeds(tmp_path: Path) -> None:
    quota = TransientLaunchError("403 QUOTA_EXCEEDED: CPUS")
    quota_cls = type("QuotaExceeded", (TransientLaunchError,), {"failure_class": "quota"})
    launcher = ScriptedLauncher({1: [quota_cls("quota"), quota, None]})
    events: list[RunnerEvent] = []
    store = RunStore(tmp_path)
    outcome = _runner(launcher, store, events).run(_plan(store, (1,)))
    assert _kinds(events, 1) == ["planned", "launching", "retry", "launching", "retry",
                                 "launching", "running", "succeeded"]
    retries = [e for e in events if e.kind == "retry"]
    assert [e.delay_s for e in retries] == [0.01, 0.02]  # 0.02 * 2**(n-1), jitter 0.5 (rand 0)
    assert [e.reason for e in retries] == ["quota", "launch"]
    (record,) = outcome.records
    assert (record.status, record.attempts, launcher.starts[1]) == ("succeeded", 3, 3)
    assert record.step_seconds is not None and record.step_seconds["infer"] == 1.5


def test_retries_exhausted_record_the_last_failure_class(tmp_path: Path) -> None:
    capacity = type("CapacityUnavailable", (TransientLaunchError,),
                    {"failure_class": "capacity"})("ZONE_RESOURCE_POOL_EXHAUSTED")
    launcher = ScriptedLauncher({1: [capacity]})
    store = RunStore(tmp_path)
    outcome = _runner(launcher, store, []).run(_plan(store, (1,)))
    (record,) = outcome.records
    assert (record.status, record.reason, launcher.starts[1]) == ("failed", "capacity", 3)


@pytest.mark.parametrize(
    ("code", "reason"),
    [(13, "key_release_denied"), (14, "integrity"), (11, "attestation_unavailable")],
)
def test_attestation_or_integrity_failure_never_retried(
    tmp_path: Path, code: int, reason: str
) -> None:
    launcher = ScriptedLauncher({1: [EnclaveRunFailed(code, "refused", None)]})
    events: list[RunnerEvent] = []
    store = RunStore(tmp_path)
    runner = _runner(launcher, store, events)
    outcome = runner.run(_plan(store, (1,)))
    (record,) = outcome.records
    assert (record.status, record.reason, launcher.starts[1]) == ("failed", reason, 1)
    assert "retry" not in _kinds(events, 1)
    assert isinstance(runner.errors[0], EnclaveRunFailed)


def test_permission_refusal_at_launch_not_retried(tmp_path: Path) -> None:
    denied = type("ComputePermissionDenied", (LaunchError,), {"failure_class": "permission"})
    launcher = ScriptedLauncher({1: [denied("403 PERMISSION_DENIED")]})
    store = RunStore(tmp_path)
    outcome = _runner(launcher, store, []).run(_plan(store, (1,)))
    assert (outcome.records[0].reason, launcher.starts[1]) == ("permission", 1)


def test_unbuildable_spec_fails_that_run_with_its_error_and_the_others_go_on(
    tmp_path: Path,
) -> None:
    from sealbench.client.errors import ConfigError

    def make_spec(dataset_id: int, model_id: int, run_id: str) -> RunSpec:
        if model_id == 1:
            raise ConfigError("model 1 has no sealed copy yet", hint="run it once sealed")
        return _spec(dataset_id, model_id, run_id)

    store = RunStore(tmp_path)
    runner = Runner(ScriptedLauncher(), store, make_spec, client=None, tee="mock",
                    new_run_id=lambda now: f"run-spec-{next(_ids)}")
    outcome = runner.run(_plan(store, (1, 2)))
    assert [(r.model_id, r.status) for r in outcome.records] == [(1, "failed"), (2, "succeeded")]
    assert isinstance(runner.errors[0], ConfigError)
    assert "no sealed copy" in (outcome.records[0].error or "")


def test_parallel_runs_are_bounded(tmp_path: Path) -> None:
    launcher = ScriptedLauncher(seconds=0.2)
    store = RunStore(tmp_path)
    outcome = _runner(launcher, store, [], parallel=3).run(_plan(store, tuple(range(1, 9))))
    assert [r.status for r in outcome.records] == ["succeeded"] * 8
    assert launcher.peak == 3


def test_start_timeout_fails_the_run_and_tears_down_a_late_workload(tmp_path: Path) -> None:
    launcher = ScriptedLauncher(start_delay=0.6, seconds=30)
    store = RunStore(tmp_path)
    runner = _runner(launcher, store, [], timeouts=StageTimeouts(start_s=0.2, workload_s=60))
    outcome = runner.run(_plan(store, (1,)))
    assert (outcome.records[0].status, outcome.records[0].reason) == ("failed", "timeout")
    deadline = time.monotonic() + 5
    while not launcher.workloads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert launcher.workloads[0].killed.wait(5)  # started too late: killed at once


def test_workload_timeout_is_a_timeout_failure(tmp_path: Path) -> None:
    from sealbench.client.runs.launchers import LaunchTimeoutError

    launcher = ScriptedLauncher({1: [LaunchTimeoutError("did not finish within 1 s")]})
    store = RunStore(tmp_path)
    outcome = _runner(launcher, store, []).run(_plan(store, (1,)))
    assert (outcome.records[0].status, outcome.records[0].reason) == ("failed", "timeout")


def _interrupt_when_running(runner: Runner, events: list[RunnerEvent], count: int) -> Callable[
        [RunnerEvent], None]:
    def on_event(event: RunnerEvent) -> None:
        events.append(event)
        if sum(e.kind == "running" for e in events) == count:
            runner.interrupt()
    return on_event


def test_interrupt_tears_down_records_interrupted_and_resume_finishes(tmp_path: Path) -> None:
    launcher = ScriptedLauncher(seconds=60)
    store = RunStore(tmp_path)
    events: list[RunnerEvent] = []
    runner = _runner(launcher, store, [], parallel=2)
    runner._on_event = _interrupt_when_running(runner, events, 2)
    started = time.monotonic()
    outcome = runner.run(_plan(store, (1, 2, 3)))
    assert time.monotonic() - started < 20
    assert outcome.interrupted
    assert [(r.status, r.reason) for r in outcome.records] == [("interrupted", "stopped")] * 3
    assert launcher.kills == 2 and all(w.killed.is_set() for w in launcher.workloads)
    assert 3 not in launcher.starts  # the third was never launched
    # the same plan again: nothing succeeded, so everything is left, and finishes
    again = ScriptedLauncher()
    resumed = _runner(again, store, []).run(_plan(store, (1, 2, 3)))
    assert [r.status for r in resumed.records] == ["succeeded"] * 3
    assert _plan(store, (1, 2, 3)).todo == ()


def test_interrupt_with_keep_leaves_workloads_running(tmp_path: Path) -> None:
    launcher = ScriptedLauncher(seconds=60)
    store = RunStore(tmp_path)
    events: list[RunnerEvent] = []
    runner = _runner(launcher, store, [], keep_on_interrupt=True)
    runner._on_event = _interrupt_when_running(runner, events, 1)
    outcome = runner.run(_plan(store, (1,)))
    assert outcome.records[0].status == "interrupted"
    assert launcher.kills == 0 and not launcher.workloads[0].killed.is_set()
    launcher.workloads[0].killed.set()  # let the test's thread end


def test_plan_skips_pairs_evaluated_with_this_image_only(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    _runner(ScriptedLauncher(), store, []).run(_plan(store, (1,)))
    plan = _plan(store, (1, 2))
    assert [p.model_id for p in plan.todo] == [2]
    assert [r.model_id for r in plan.done] == [1]
    other_image = plan_runs(store, benchmark_id=1, pairs=[(10, 1)],
                            image_digest=sha256_digest(b"new image"),
                            metrics_version=BenchmarkPin.parse("brats-2023-gli/1"))
    assert [p.model_id for p in other_image.todo] == [1]
    assert [p.model_id for p in _plan(store, (1,), force=True).todo] == [1]


def _record(run_id: str, status: str, pid: int | None, started: int | None = None) -> RunRecord:
    return RunRecord(run_id=run_id, benchmark_id=1, dataset_id=10, model_id=1, tee="mock",
                     image_digest=IMAGE, result_uri="file:///x", status=status,  # type: ignore[arg-type]
                     started_at=datetime(2026, 1, 1, tzinfo=UTC), owner_pid=pid,
                     owner_started=started)


def test_record_of_a_dead_owner_becomes_interrupted(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me, my_start = process_identity()
    store = RunStore(tmp_path)
    store.save(_record("run-dead", "running", dead.pid))
    store.save(_record("run-reused-pid", "launching", me, (my_start or 0) + 12345))
    store.save(_record("run-alive", "running", me, my_start))
    store.save(_record("run-v1", "running", None))
    store.save(_record("run-done", "succeeded", dead.pid))
    repaired = store.repair_stale(datetime(2026, 1, 2, tzinfo=UTC))
    assert sorted(r.run_id for r in repaired) == ["run-dead", "run-reused-pid", "run-v1"]
    assert {store.get(r.run_id).status for r in repaired} == {"interrupted"}
    assert {store.get(r.run_id).reason for r in repaired} == {"owner_died"}
    assert store.get("run-alive").status == "running"
    assert store.get("run-done").status == "succeeded"


def test_report_carries_no_free_text() -> None:
    record = _record("run-x", "failed", 1).model_copy(update={
        "reason": "integrity", "error": "case BraTS-GLI-00001: tampered",
        "step_seconds": {"infer": 1.0, "BraTS-GLI-00001": 2.0},
    })
    report = report_of(record)
    # no timing reaches the registry: it varies with the cases (issue 40)
    assert report.reason == "integrity" and report.step_seconds == {}
    assert "BraTS" not in report.model_dump_json()


# -- with the real registry ------------------------------------------------------------------


def _approved_pairs(api: dict[str, RegistryClient], body: Callable[..., BenchmarkCreate],
                    models: int) -> tuple[int, int, list[int]]:
    b = api["authority"].create_benchmark(body()).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(DatasetCreate(
        name="d", digest=sha256_digest(b"data"), case_count=1)).id
    api["hospital"].request_association("dataset", b, d)
    api["authority"].decide_association("dataset", b, d, approve=True)
    ms = []
    for i in range(models):
        m = api["modelco"].register_model(
            ModelCreate(name=f"m{i}", version="1", digest=sha256_digest(b"w%d" % i))).id
        api["modelco"].request_association("model", b, m)
        api["authority"].decide_association("model", b, m, approve=True)
        ms.append(m)
    return b, d, ms


def test_runner_reports_every_state_and_the_authority_sees_progress(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate],
    tmp_path: Path,
) -> None:
    b, d, (ok_model, denied_model, stopped_model) = _approved_pairs(api, benchmark_body, 3)
    launcher = ScriptedLauncher({denied_model: [EnclaveRunFailed(13, "denied: dbgstat", None)]})
    store = RunStore(tmp_path)
    outcome = _runner(launcher, store, [], client=api["hospital"]).run(
        _plan(store, (ok_model, denied_model), benchmark=b, dataset=d))
    assert {r.status for r in outcome.records} == {"succeeded", "failed"}
    # an interrupted one, and a stale one repaired by the next run
    launcher = ScriptedLauncher(seconds=60)
    events: list[RunnerEvent] = []
    runner = _runner(launcher, store, [], client=api["hospital"])
    runner._on_event = _interrupt_when_running(runner, events, 1)
    runner.run(_plan(store, (stopped_model,), benchmark=b, dataset=d))
    board = api["authority"].benchmark_progress(b)
    cells = {c.model_id: (c.status, c.reason) for c in board.cells}
    assert cells == {ok_model: ("done", None), denied_model: ("failed", "key_release_denied"),
                     stopped_model: ("interrupted", "stopped")}
    rows = api["authority"].list_runs(b)
    assert {r.state for r in rows} == {"succeeded", "failed", "interrupted"}
    assert all("dbgstat" not in r.model_dump_json() for r in rows)  # local text stays local
    assert api["modelco"].benchmark_progress(b).counts == board.counts


def test_pair_running_in_another_live_process_is_not_launched_twice(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid, started = process_identity(other.pid)
        store = RunStore(tmp_path)
        store.save(_record("run-elsewhere", "running", pid, started))
        plan = _plan(store, (1, 2))
        assert [p.model_id for p in plan.todo] == [2]
        assert [r.run_id for r in plan.busy] == ["run-elsewhere"]
        outcome = _runner(ScriptedLauncher(), store, []).run(plan)
        assert store.get("run-elsewhere").status == "running"  # its owner lives: not repaired
        assert [r.model_id for r in outcome.records] == [2]
    finally:
        other.kill()
        other.wait()
    store.repair_stale(datetime(2026, 1, 2, tzinfo=UTC))
    assert store.get("run-elsewhere").status == "interrupted"


@pytest.mark.parametrize(
    ("error", "retryable", "failure_class"),
    [
        ("ServiceUnavailable", True, "launch"),
        ("InternalServerError", True, "launch"),
        ("TooManyRequests", True, "quota"),
        ("Forbidden", False, "permission"),
        ("NotFound", False, "not_found"),
        ("DeadlineExceeded", False, "timeout"),
    ],
)
def test_google_api_errors_say_whether_a_new_launch_may_succeed(
    error: str, retryable: bool, failure_class: str
) -> None:
    """What the runner retries on Confidential Space: the Compute API's own failures and rate
    or quota refusals, not a refusal that a new try cannot change."""
    from google.api_core import exceptions as gexc

    from sealbench.gcp._cs_resources import VmSettings, translate_api_error

    settings = VmSettings(project="p", zone="us-central1-a",
                          service_account="runner@p.iam.gserviceaccount.com",
                          image_reference="registry.test/eval@sha256:" + "a" * 64)
    translated = translate_api_error(getattr(gexc, error)("refused"), "create the VM", settings)
    assert (translated.retryable, translated.failure_class) == (retryable, failure_class)


def test_started_vm_is_named_in_the_record_and_in_its_repair(tmp_path: Path) -> None:
    class VmLauncher(ScriptedLauncher):
        def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> ScriptedWorkload:
            workload = super().start(spec, on_output=on_output)
            workload.instance_name = f"sealbench-eval-{spec.run_id}"  # type: ignore[attr-defined]
            return workload

    store = RunStore(tmp_path)
    (record,) = _runner(VmLauncher(), store, []).run(_plan(store, (1,))).records
    assert record.workload == f"sealbench-eval-{record.run_id}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.save(record.model_copy(update={"run_id": "run-orphan", "status": "running",
                                         "owner_pid": dead.pid}))
    (fixed,) = store.repair_stale(datetime(2026, 1, 2, tzinfo=UTC))
    assert fixed.status == "interrupted"
    assert f"sealbench-eval-{record.run_id}" in (fixed.error or "")


def test_enclaves_signed_failure_record_is_reported_with_its_token(tmp_path: Path) -> None:
    """A failed run whose result folder holds the enclave's failure record and its token
    reports both (the registry verifies them); a folder with a record but no token (a failure
    before attestation) reports a claim only."""
    from sealbench.contract.result import FAILURE_OBJECT, FAILURE_TOKEN_OBJECT, FailureRecord

    record = FailureRecord(run_id="r", step="download, verify and load the model",
                           error="AssetIntegrityError", reason="tampered", exit_code=14)
    results = tmp_path / "results"

    def spec(dataset_id: int, model_id: int, run_id: str) -> RunSpec:
        folder = results / str(model_id)
        folder.mkdir(parents=True)
        (folder / FAILURE_OBJECT).write_bytes(record.to_bytes())
        if model_id == 1:
            (folder / FAILURE_TOKEN_OBJECT).write_text("header.payload.signature")
        return _spec(dataset_id, model_id, run_id).model_copy(
            update={"result_uri": f"file://{folder}"})

    class FailingInTheTee(ScriptedLauncher):
        """Every workload starts, then ends as the enclave's failure (exit 14)."""

        def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> ScriptedWorkload:
            with self.lock:
                self.running += 1
            return ScriptedWorkload(self, EnclaveRunFailed(14, "tampered", None), 0.01, None)

    launcher = FailingInTheTee()
    store = RunStore(tmp_path / "runs")
    runner = Runner(launcher, store, spec, client=None, tee="mock",
                    new_run_id=lambda now: f"run-test-{next(_ids)}")
    outcome = runner.run(_plan(store, (1, 2)))
    by_model = {r.model_id: report_of(r) for r in outcome.records}
    assert by_model[1].failure_record == json.loads(record.to_bytes())
    assert by_model[1].failure_token == "header.payload.signature"
    assert by_model[2].failure_record is None and by_model[2].failure_token is None
    assert (by_model[2].state, by_model[2].reason) == ("failed", "integrity")
