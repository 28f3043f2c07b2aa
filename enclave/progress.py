"""The one place the enclave reports its progress: each progress point is a typed event line
(:mod:`sealbench.contract.events`, which the client parses) next to the human prose line the
logs have always shown (the operator reads those; the client no longer does).

Event lines go to standard output, the stream the logs go to (``python -m sealbench.enclave``
logs there), written whole and flushed, so that each one starts its own line whatever the
log format: the serial port, a container's or a process's output carries them as they are.
What an event may say is the contract's rule: counts, indices, whole seconds, step and
execution provider names; never a case id, a metric, a key or a token.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from typing import cast

from pydantic import BaseModel, ValidationError

from sealbench.contract.events import (
    CaseDone,
    CasesCounted,
    GrantWaiting,
    ModelLoaded,
    RunDone,
    RunEvent,
    StepStarted,
)

__all__ = [
    "STEPS",
    "case_done",
    "cases_counted",
    "emit",
    "grant_waiting",
    "model_loaded",
    "run_done",
    "step_started",
]

_log = logging.getLogger("sealbench.enclave")
_lock = threading.Lock()

#: The steps of a run after step 0 (reading the specification).
STEPS = 7


def emit(event: RunEvent) -> None:
    """Write ``event``'s line on standard output (looked up at each call, so a test's capture
    sees it), whole and flushed. Progress never fails a run: a stream that cannot be written
    is logged."""
    try:
        with _lock:
            sys.stdout.write(event.to_line() + "\n")
            sys.stdout.flush()
    except (OSError, ValueError) as exc:
        _log.warning("a progress event could not be written (%s)", type(exc).__name__)


def _emit(kind: type[BaseModel], **fields: object) -> None:
    """Build and write a ``kind`` event; one its bounds refuse is logged, never raised."""
    try:
        event = kind.model_validate(fields)
    except ValidationError:
        _log.warning("a progress event out of its bounds was not written (%s)", kind.__name__)
        return
    emit(cast("RunEvent", event))


def step_started(index: int, name: str, prose: str | None = None) -> None:
    """Step ``index`` of :data:`STEPS` started: the log line ``step i/7: <prose or name>`` and
    its event."""
    _log.info("step %d/%d: %s", index, STEPS, prose or name)
    _emit(StepStarted, index=index, total=STEPS, name=name)


def cases_counted(total: int) -> None:
    """The dataset's manifest is verified and holds ``total`` cases."""
    _log.info("step 4/%d: dataset manifest verified (%d cases)", STEPS, total)
    _emit(CasesCounted, total=total)


def case_done(index: int, total: int) -> None:
    """Case ``index`` of ``total`` is evaluated (or recorded as failed)."""
    _log.info("step 5/%d: case %d/%d done", STEPS, index, total)
    _emit(CaseDone, index=index, total=total)


def grant_waiting(mark: str, owner: str, service: str, delay_s: float, waited_s: float,
                  window_s: float) -> None:
    """A grant IAM has not applied yet: the log line that starts with ``mark`` and its event
    (whole seconds, as the line shows them)."""
    _log.info("%s: the %s owner's %s refused this workload; next try in %.0f s "
              "(%.0f of %.0f s waited)", mark, owner, service, delay_s, waited_s, window_s)
    _emit(GrantWaiting, owner=owner, service=service, next_try_s=round(delay_s),
          waited_s=round(waited_s), window_s=round(window_s))


def model_loaded(provider: str) -> None:
    """The model runs on ONNX Runtime's ``provider`` (said as soon as it is loaded: on
    Confidential Space the run's last lines may never be read)."""
    _log.info("the model runs on ONNX Runtime's %s", provider)
    _emit(ModelLoaded, provider=provider)


def run_done(timings: Mapping[str, float], provider: str | None, line: str) -> None:
    """The run ended: its last log line ``line`` and the event with the seconds per step and
    the execution provider."""
    _log.info("%s", line)
    _emit(RunDone, timings=dict(timings), provider=provider)
