"""The runner's ``progress`` and ``waiting`` events come from the enclave's typed event lines
(issue 26), with the fields and the message the prose once gave; prose lines make none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sealbench.client.runs.batch import RetryPolicy, Runner, RunnerEvent, plan_runs
from sealbench.client.runs.launchers import LaunchResult, OutputFn
from sealbench.client.runs.records import RunStore
from sealbench.contract.events import (
    CaseDone,
    CasesCounted,
    GrantWaiting,
    ModelLoaded,
    RunDone,
    StepStarted,
)
from sealbench.contract.spec import RunSpec
from sealbench.crypto.digest import sha256_digest
from tests.unit.client.test_runner import _spec

IMAGE = sha256_digest(b"evaluation image")
#: The plan's benchmark pin (its text; the runner records it as text).
PIN: Any = "brats-2023-gli/1"


class _Workload:
    def __init__(self, lines: tuple[str, ...], on_output: OutputFn | None) -> None:
        self._lines, self._on_output = lines, on_output

    @property
    def pid(self) -> int | None:
        return None

    def kill(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> LaunchResult:
        for line in self._lines:
            if self._on_output is not None:
                self._on_output(line)
        return LaunchResult(IMAGE, 0.1, 1024)


class _Launcher:
    def __init__(self, lines: tuple[str, ...]) -> None:
        self._lines = lines

    @property
    def image_digest(self) -> str:
        return IMAGE

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> _Workload:
        return _Workload(self._lines, on_output)

    def launch(self, spec: RunSpec, *, on_output: OutputFn | None = None,
               timeout: float | None = None) -> LaunchResult:
        return self.start(spec, on_output=on_output).wait(timeout)


def _events(tmp_path: Path, lines: tuple[str, ...]) -> list[RunnerEvent]:
    events: list[RunnerEvent] = []
    store = RunStore(tmp_path)
    runner = Runner(_Launcher(lines), store, _spec, tee="mock", client=None,  # type: ignore[arg-type]
                    retry=RetryPolicy(attempts=1), rand=lambda: 0.0, on_event=events.append)
    plan = plan_runs(store, benchmark_id=1, pairs=[(10, 1)], image_digest=IMAGE,
                     metrics_version=PIN)
    runner.run(plan)
    return events


def _fields(event: RunnerEvent) -> dict[str, Any]:
    return event.model_dump(include={"kind", "step", "steps", "cases_done", "cases_total",
                                     "delay_s", "message"}, exclude_none=True)


def _step(index: int) -> str:
    return StepStarted(index=index, total=7, name=f"step {index}").to_line()


def test_event_lines_become_the_progress_events_the_prose_gave(tmp_path: Path) -> None:
    lines = (
        _step(0), _step(1), _step(2),
        GrantWaiting(owner="model", service="key", next_try_s=4, waited_s=6,
                     window_s=600).to_line(),
        _step(3), ModelLoaded(provider="CPUExecutionProvider").to_line(),
        _step(4), CasesCounted(total=2).to_line(),
        _step(5), CaseDone(index=1, total=2).to_line(), CaseDone(index=2, total=2).to_line(),
        _step(6), _step(7),
        RunDone(timings={"infer": 1.234}, provider="CPUExecutionProvider").to_line(),
    )
    shown = [_fields(e) for e in _events(tmp_path, lines) if e.kind in ("progress", "waiting")]
    assert shown == [
        {"kind": "progress", "step": 0, "steps": 7},
        {"kind": "progress", "step": 1, "steps": 7},
        {"kind": "progress", "step": 2, "steps": 7},
        {"kind": "waiting", "delay_s": 4.0, "message": "waiting for IAM to apply the grant: the "
         "model owner's key refused this workload (6 of 600 s waited)"},
        {"kind": "progress", "step": 3, "steps": 7},
        {"kind": "progress", "step": 4, "steps": 7},
        {"kind": "progress", "step": 4, "steps": 7, "cases_total": 2},
        {"kind": "progress", "step": 5, "steps": 7},
        {"kind": "progress", "step": 5, "steps": 7, "cases_done": 1, "cases_total": 2},
        {"kind": "progress", "step": 5, "steps": 7, "cases_done": 2, "cases_total": 2},
        {"kind": "progress", "step": 6, "steps": 7},
        {"kind": "progress", "step": 7, "steps": 7},
        {"kind": "progress", "step": 7, "steps": 7},  # the result is attested and uploaded
    ]


def test_prose_lines_make_no_event(tmp_path: Path) -> None:
    prose = (
        "step 1/7: check the recipient key and the result destination",
        "step 4/7: dataset manifest verified (2 cases)",
        "step 5/7: case 1/2 done",
        "waiting for IAM to apply the grant: the model owner's key refused this workload; "
        "next try in 4 s (6 of 600 s waited)",
        "step 7/7: result attested and uploaded",
        "sealbench-event: not an event",
    )
    events = _events(tmp_path, prose)
    assert [e.kind for e in events if e.kind in ("progress", "waiting")] == []
    assert events[-1].kind == "succeeded"
