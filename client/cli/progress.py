"""How ``sealbench run`` shows the runner's events
(:class:`~sealbench.client.runs.batch.RunnerEvent`): one rich progress line per run and an overall
bar on a terminal, or one JSON event per line (``--json``) for scripts. Rendering only: what
happens is decided by :mod:`sealbench.client.runs.batch`, which builds its ``progress`` events
from the enclave's typed event lines (:mod:`sealbench.contract.events`)."""

from __future__ import annotations

import threading

import typer
from rich.progress import Progress, TaskID

from sealbench.client.runs.batch import RunnerEvent

__all__ = ["JsonEvents", "RunDisplay"]

_STEPS = 7


class JsonEvents:
    """Prints each event as one line of JSON on stdout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, event: RunnerEvent) -> None:
        with self._lock:
            typer.echo(event.model_dump_json())


class RunDisplay:
    """A progress line per run (its step out of 7, then its cases) under an overall bar of
    finished runs; the end of each run is printed above the bars."""

    def __init__(self, bar: Progress, total: int) -> None:
        self._bar = bar
        # nothing to run (every pair skipped): no empty 0/0 bar
        self._overall: TaskID = bar.add_task("runs", total=total, visible=total > 0)
        self._tasks: dict[str, TaskID] = {}
        #: The step each run last reported (a failed or stopped run's bar stays there).
        self._steps: dict[str, int] = {}
        self._lock = threading.Lock()

    def _label(self, event: RunnerEvent) -> str:
        return f"model {event.model_id} x dataset {event.dataset_id}"

    def _task(self, event: RunnerEvent) -> TaskID:
        run_id = event.run_id or ""
        if run_id not in self._tasks:
            self._tasks[run_id] = self._bar.add_task(
                f"{self._label(event)}: planned", total=_STEPS
            )
        return self._tasks[run_id]

    def __call__(self, event: RunnerEvent) -> None:
        with self._lock:
            self._show(event)

    def _show(self, event: RunnerEvent) -> None:
        label = self._label(event)
        say = self._bar.console.print
        if event.kind == "skipped":
            if event.message and event.message.startswith("running"):
                say(f"model {event.model_id}: {event.message}", highlight=False)
            else:
                say(f"model {event.model_id}: already evaluated in {event.run_id} "
                    "(use --force to run again)", highlight=False)
            return
        if event.kind == "repaired":
            say(f"run {event.run_id} ({label}) was left unfinished by a process that ended: "
                "recorded interrupted", highlight=False)
            return
        if event.kind == "report_failed":
            return  # logged as a warning; the run goes on
        task = self._task(event)
        if event.kind == "launching":
            attempt = "" if event.attempt <= 1 else f" (attempt {event.attempt})"
            self._bar.update(task, description=f"{label}: launching{attempt}")
        elif event.kind == "retry":
            say(f"model {event.model_id}: launch refused ({event.reason}); retrying in "
                f"{event.delay_s:.0f} s: {event.message}", highlight=False, markup=False)
        elif event.kind == "running":
            self._bar.update(task, description=f"{label}: running")
        elif event.kind == "waiting":
            self._bar.update(task, description=f"{label}: waiting for IAM to apply the grant")
        elif event.kind == "progress":
            if event.step is not None:
                step = min(max(event.step, 1), _STEPS)  # never -1/7 or 8/7
                self._steps[event.run_id or ""] = step
                self._bar.update(task, completed=step - 1 if step < _STEPS else _STEPS,
                                 description=f"{label}: step {step}/{_STEPS}")
            if event.cases_done is not None and event.cases_total:
                self._bar.update(task, description=f"{label}: case {event.cases_done}/"
                                 f"{event.cases_total}")
        elif event.kind == "succeeded":
            self._bar.update(task, completed=_STEPS, description=f"{label}: finished")
            self._bar.advance(self._overall)
        elif event.kind in ("failed", "interrupted"):
            # the bar stays at the step the run reached: a failed run is not shown 7/7 done
            word = "failed" if event.kind == "failed" else "stopped"
            reached = self._steps.get(event.run_id or "")
            at = (f" at step {reached}/{_STEPS}" if reached is not None
                  else " before its first step")
            self._bar.update(task, description=f"{label}: {word}{at}")
            self._bar.advance(self._overall)

