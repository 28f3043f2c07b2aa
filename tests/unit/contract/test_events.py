"""The enclave's progress events (issue 26): every kind goes through its line and back, and no
line the operator can print (the process's output is theirs) makes the reader raise or read
more than the typed event."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from sealbench.contract.events import (
    EVENT_MARKER,
    MAX_EVENT_LINE_CHARS,
    MAX_FAILURE_REASON_CHARS,
    CaseDone,
    CasesCounted,
    GrantWaiting,
    ModelLoaded,
    RunDone,
    RunFailed,
    StepStarted,
    parse_event,
)
from sealbench.contract.inputs import Rule

EVENTS = [
    StepStarted(index=0, total=7, name="read the run specification"),
    StepStarted(index=7, total=7, name="attest and upload the result"),
    CasesCounted(total=0),
    CasesCounted(total=20),
    CaseDone(index=3, total=20),
    GrantWaiting(owner="model", service="key", next_try_s=4, waited_s=6, window_s=600),
    GrantWaiting(owner="dataset", service="storage", next_try_s=0, waited_s=0, window_s=0),
    ModelLoaded(provider="CUDAExecutionProvider"),
    RunDone(timings={"attest": 0.1, "infer": 12.25}, provider="CPUExecutionProvider"),
    RunDone(timings={}),
    RunFailed(exit_code=13, code="key_release_denied",
              reason="the dataset owner's pool refused this workload: dbgstat",
              rule=Rule.PRODUCTION_IMAGE),
    RunFailed(exit_code=10, code="spec", reason="invalid run specification: SEALBENCH_RUN_ID"),
    RunFailed(exit_code=1, code="cpu_fallback_refused", reason="the model runs on the CPU é"),
    RunFailed(exit_code=18, code="egress_refused", reason='refused "x" \\ y'),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.event)
def test_every_event_goes_through_its_line_and_back(event: Any) -> None:
    line = event.to_line()
    assert line.startswith(EVENT_MARKER) and "\n" not in line
    body = json.loads(line.removeprefix(EVENT_MARKER))
    assert body["v"] == 2 and body["event"] == event.event
    assert parse_event(line) == event
    assert parse_event(line + "\r\n") == event  # a serial port's line ending
    assert type(parse_event(line)) is type(event)


def test_the_line_is_one_json_object_with_version_and_discriminator() -> None:
    line = CaseDone(index=1, total=2).to_line()
    assert line == 'sealbench-event: {"v":2,"event":"case_done","index":1,"total":2}'


def _line(body: dict[str, Any]) -> str:
    return EVENT_MARKER + json.dumps(body)


def _failed(**fields: Any) -> str:
    """A ``failed`` line: a valid key-release refusal with ``fields`` changed."""
    body = {"v": 2, "event": "failed", "exit_code": 13, "code": "key_release_denied",
            "reason": "the model owner refused this workload", "rule": None}
    return _line(body | fields)


HOSTILE = [
    # prose, and the marker anywhere but at the start
    "step 5/7: case 3/20 done",
    'done: step timings in seconds {"infer": 1.0}; execution provider CPUExecutionProvider',
    "the model said " + CaseDone(index=1, total=2).to_line(),
    "2026-01-01 INFO sealbench.enclave: " + CaseDone(index=1, total=2).to_line(),
    EVENT_MARKER.strip(),
    EVENT_MARKER,
    # not JSON, or not an object
    EVENT_MARKER + "hello",
    EVENT_MARKER + "[1, 2]",
    EVENT_MARKER + '"step"',
    EVENT_MARKER + "null",
    EVENT_MARKER + '{"v": 2, "event": "cases", "total": 2',
    EVENT_MARKER + '{"v": 2, "event": "cases", "total": 2} trailing',
    EVENT_MARKER + "[" * 3000 + "]" * 3000,
    EVENT_MARKER + "\x00\udcff",
    # a version this reader does not know (the one before ``failed`` too), or none stated
    _line({"v": 3, "event": "cases", "total": 2}),
    _line({"v": 1, "event": "cases", "total": 2}),
    _line({"v": 1, "event": "failed", "exit_code": 13, "code": "key_release_denied",
           "reason": "x"}),
    _line({"v": "2", "event": "cases", "total": 2}),
    _line({"event": "cases", "total": 2}),
    # an unknown event, a missing discriminator, an extra member
    _line({"v": 2, "event": "case_metric", "dice": 0.9}),
    _line({"v": 2, "total": 2}),
    _line({"v": 2, "event": "cases", "total": 2, "case_id": "BraTS-GLI-00001"}),
    _line({"v": 2, "event": "done", "timings": {}, "provider": None, "metrics": {"dice": 1}}),
    # values out of their bounds, or of the wrong type
    _line({"v": 2, "event": "cases", "total": -1}),
    _line({"v": 2, "event": "cases", "total": True}),
    _line({"v": 2, "event": "cases", "total": "2"}),
    _line({"v": 2, "event": "cases", "total": 1e30}),
    _line({"v": 2, "event": "case_done", "index": 3, "total": 2}),
    _line({"v": 2, "event": "case_done", "index": 0, "total": 2}),
    _line({"v": 2, "event": "step", "index": 8, "total": 7, "name": "x"}),
    _line({"v": 2, "event": "step", "index": 1, "total": 7, "name": "two\nlines"}),
    _line({"v": 2, "event": "step", "index": 1, "total": 7, "name": "x" * 121}),
    _line({"v": 2, "event": "waiting", "owner": "attacker", "service": "key",
           "next_try_s": 1, "waited_s": 0, "window_s": 10}),
    _line({"v": 2, "event": "waiting", "owner": "model", "service": "key",
           "next_try_s": 1.5, "waited_s": 0, "window_s": 10}),
    _line({"v": 2, "event": "model_loaded", "provider": "CUDA; patient BraTS-GLI-00001"}),
    _line({"v": 2, "event": "done", "timings": {"infer": -1}}),
    _line({"v": 2, "event": "done", "timings": {"infer": "NaN"}}),
    _line({"v": 2, "event": "done", "timings": {"BraTS GLI 00001": 1.0}}),
    _line({"v": 2, "event": "done", "timings": {f"s{i}": 1.0 for i in range(33)}}),
    _line({"v": 2, "event": "done", "timings": [1.0]}),
    EVENT_MARKER + '{"v": 2, "event": "done", "timings": {"infer": Infinity}}',
    # a failure of the wrong types, out of bounds, unknown or inconsistent
    *(_failed(**fields) for fields in (
        {"exit_code": "13"},
        {"exit_code": 13.0},
        {"exit_code": True, "code": "enclave"},
        {"exit_code": None},
        {"exit_code": 0, "code": "enclave"},
        {"exit_code": -1},
        {"exit_code": 256},
        {"exit_code": 10**30},
        {"exit_code": 14},  # key_release_denied exits 13: the event contradicts itself
        {"exit_code": 1, "code": "killed"},
        {"exit_code": 99, "code": "launcher_refused"},
        {"code": "KeyReleaseDenied"},
        {"code": "key_release_denied; rm -rf /"},
        {"code": ["key_release_denied"]},
        {"code": None},
        {"reason": ""},
        {"reason": None},
        {"reason": 42},
        {"reason": ["refused"]},
        {"reason": "two\nlines"},
        {"reason": "a bell \u0007"},
        {"reason": "a C1 control \u009b31m"},
        {"reason": "x" * (MAX_FAILURE_REASON_CHARS + 1)},
        {"rule": "debug-image"},
        {"rule": 1},
        {"exit_code": 14, "code": "integrity", "rule": "production-image"},
        {"token": "eyJhbGciOi"},
    )),
    _line({"v": 2, "event": "failed"}),
    _line({"v": 2, "event": "failed", "exit_code": 13, "code": "key_release_denied"}),
    # too long, even when the body would be an event
    EVENT_MARKER + '{"v":2,"event":"cases","total":2}' + " " * MAX_EVENT_LINE_CHARS,
    EVENT_MARKER + "x" * 10_000_000,
]


@pytest.mark.parametrize("line", HOSTILE)
def test_a_hostile_or_foreign_line_is_no_event_and_never_raises(line: str) -> None:
    assert parse_event(line) is None


@pytest.mark.parametrize("value", [None, 42, b"sealbench-event: {}", ["line"]])
def test_anything_but_text_is_no_event(value: Any) -> None:
    assert parse_event(value) is None


def test_the_enclave_side_refuses_what_an_event_may_not_carry() -> None:
    with pytest.raises(ValidationError):
        CasesCounted(total=2, case_id="BraTS-GLI-00001")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ModelLoaded(provider="CUDAExecutionProvider; patient BraTS-GLI-00001")
    with pytest.raises(ValidationError):
        CaseDone(index=3, total=2)


def test_events_are_frozen() -> None:
    event = CasesCounted(total=2)
    with pytest.raises(ValidationError):
        event.total = 3  # type: ignore[misc]


def test_a_failure_event_states_a_known_code_with_its_own_exit_code() -> None:
    from sealbench.contract.errors import FAILURE_CODES, error_for_code

    for code in FAILURE_CODES:
        error = error_for_code(code)
        assert error is not None and error.code == code
        event = RunFailed(exit_code=error.exit_code, code=code, reason="why")
        assert parse_event(event.to_line()) == event
    assert parse_event(_failed()) == RunFailed(
        exit_code=13, code="key_release_denied", reason="the model owner refused this workload")
    with pytest.raises(ValidationError):
        RunFailed(exit_code=13, code="integrity", reason="why")
    with pytest.raises(ValidationError):
        RunFailed(exit_code=14, code="integrity", reason="why", rule=Rule.IMAGE)


def test_the_longest_failure_event_fits_the_line() -> None:
    """The enclave's widest reason, escaped, still fits: a reader never drops a failure for its
    length (the enclave shortens a reason of quotes and backslashes, which doubles)."""
    widest = RunFailed(exit_code=15, code="asset_rejected", reason="é" * MAX_FAILURE_REASON_CHARS,
                       rule=None)
    assert len(widest.to_line()) <= MAX_EVENT_LINE_CHARS
    assert parse_event(widest.to_line()) == widest
