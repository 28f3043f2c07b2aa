"""``sealbench run``'s progress lines: a step is shown 1/7 to 7/7 (never -1/7), a run that
failed or was stopped keeps its bar at the step it reached and says so (never a full 7/7), a
succeeded one is 7/7, and a plan with nothing to run shows no empty 0/0 bar."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import Progress

from sealbench.client.cli.progress import RunDisplay
from sealbench.client.runs.batch import RunnerEvent


def _event(kind: str, run: str, **fields: Any) -> RunnerEvent:
    return RunnerEvent(kind=kind, benchmark_id=1, dataset_id=2, model_id=int(run[-1]), run_id=run,
                    at=datetime(2026, 12, 4, tzinfo=UTC), **fields)


def _tasks(bar: Progress) -> dict[str, tuple[float, float | None, bool]]:
    return {t.description: (t.completed, t.total, t.visible) for t in bar.tasks}


def test_steps_failures_and_successes_as_the_bars_show_them() -> None:
    bar = Progress(console=Console(file=None, record=True, width=100))
    display = RunDisplay(bar, total=3)
    for event in (_event("launching", "run-1"), _event("progress", "run-1", step=0),
                  _event("launching", "run-2"), _event("progress", "run-2", step=3),
                  _event("failed", "run-2", reason="integrity"),
                  _event("launching", "run-3"), _event("interrupted", "run-3"),
                  _event("progress", "run-1", step=7), _event("succeeded", "run-1")):
        display(event)
    shown = _tasks(bar)
    assert shown["model 1 x dataset 2: finished"][:2] == (7, 7)
    assert shown["model 2 x dataset 2: failed at step 3/7"][:2] == (2, 7)
    assert shown["model 3 x dataset 2: stopped before its first step"][:2] == (0, 7)
    assert shown["runs"] == (3, 3, True)


def test_step_zero_is_the_first_step_not_minus_one() -> None:
    bar = Progress(console=Console(file=None, width=100))
    display = RunDisplay(bar, total=1)
    display(_event("progress", "run-1", step=0))
    assert _tasks(bar)["model 1 x dataset 2: step 1/7"][:2] == (0, 7)


def test_nothing_to_run_shows_no_empty_bar() -> None:
    bar = Progress(console=Console(file=None, width=100))
    RunDisplay(bar, total=0)
    assert _tasks(bar) == {"runs": (0, 0, False)}
