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
import re
import sys
import threading
from collections.abc import Mapping
from typing import cast

from pydantic import BaseModel, ValidationError

from sealbench.contract.errors import EnclaveError, KeyReleaseDenied
from sealbench.contract.events import (
    MAX_EVENT_LINE_CHARS,
    MAX_FAILURE_REASON_CHARS,
    CaseDone,
    CasesCounted,
    GrantWaiting,
    ModelLoaded,
    RunDone,
    RunEvent,
    RunFailed,
    StepStarted,
)
from sealbench.contract.inputs import Rule
from sealbench.contract.spec import ENDPOINT_ENV_NAMES

__all__ = [
    "STEPS",
    "case_done",
    "cases_counted",
    "emit",
    "grant_waiting",
    "model_loaded",
    "refusal_rule",
    "run_done",
    "run_failed",
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


#: The key-release condition's clauses a refusal's reason may name, by the rule each enforces
#: (first match wins). The reason is the token exchange's own error text (the mock's STS names
#: the clause that is false; Google's names none, and then no rule is stated): a foreign text,
#: translated into the contract's :class:`~sealbench.contract.inputs.Rule` once, here, so that
#: the client keys on the rule and never reads the prose.
_REFUSAL_CLAUSES: tuple[tuple[tuple[str, ...], Rule], ...] = (
    (("dbgstat", "support_attributes"), Rule.PRODUCTION_IMAGE),
    (("hwmodel",), Rule.HARDWARE),
    (("secboot",), Rule.SECURE_BOOT),
    (ENDPOINT_ENV_NAMES, Rule.ENDPOINT),
    (("cmd_override",), Rule.NO_COMMAND),
    (("image_digest in",), Rule.IMAGE),
)
#: Control characters (C0, DEL, C1): an event's reason is one printable line.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def refusal_rule(error: EnclaveError) -> Rule | None:
    """The rule of the key-release condition a refusal's reason names; None for any other
    failure, and for a refusal whose reason names no clause."""
    if not isinstance(error, KeyReleaseDenied):
        return None
    reason = str(error)
    for clues, rule in _REFUSAL_CLAUSES:
        if any(clue in reason for clue in clues):
            return rule
    return None


def run_failed(error: EnclaveError) -> None:
    """The run failed with ``error``: its ``failed`` event (exit code, failure code, the public
    reason on one line, the refused rule), written before the prose line
    ``sealbench-enclave: <reason> (exit N)`` that :mod:`sealbench.enclave.__main__` prints on
    stderr. The reason is shortened to fit the event's line, never dropped."""
    reason = _CONTROL.sub(" ", str(error)).strip() or type(error).__name__
    reason = reason[:MAX_FAILURE_REASON_CHARS]
    fields = {"exit_code": error.exit_code, "code": error.code, "rule": refusal_rule(error)}
    try:
        event = RunFailed.model_validate({**fields, "reason": reason})
        while len(event.to_line()) > MAX_EVENT_LINE_CHARS:  # quotes and backslashes escaped
            reason = reason[: len(reason) * 3 // 4]
            event = RunFailed.model_validate({**fields, "reason": reason})
    except ValidationError:
        _log.warning("the failure event was not written (%s)", type(error).__name__)
        return
    emit(event)
