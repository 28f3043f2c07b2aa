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
    CaseDone,
    CasesCounted,
    GrantWaiting,
    ModelLoaded,
    RunDone,
    StepStarted,
    parse_event,
)

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
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.event)
def test_every_event_goes_through_its_line_and_back(event: Any) -> None:
    line = event.to_line()
    assert line.startswith(EVENT_MARKER) and "\n" not in line
    body = json.loads(line.removeprefix(EVENT_MARKER))
    assert body["v"] == 1 and body["event"] == event.event
    assert parse_event(line) == event
    assert parse_event(line + "\r\n") == event  # a serial port's line ending
    assert type(parse_event(line)) is type(event)


def test_the_line_is_one_json_object_with_version_and_discriminator() -> None:
    line = CaseDone(index=1, total=2).to_line()
    assert line == 'sealbench-event: {"v":1,"event":"case_done","index":1,"total":2}'


def _line(body: dict[str, Any]) -> str:
    return EVENT_MARKER + json.dumps(body)


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
    EVENT_MARKER + '{"v": 1, "event": "cases", "total": 2',
    EVENT_MARKER + '{"v": 1, "event": "cases", "total": 2} trailing',
    EVENT_MARKER + "[" * 3000 + "]" * 3000,
    EVENT_MARKER + "\x00\udcff",
    # a version this reader does not know, or none stated
    _line({"v": 2, "event": "cases", "total": 2}),
    _line({"v": "1", "event": "cases", "total": 2}),
    _line({"event": "cases", "total": 2}),
    # an unknown event, a missing discriminator, an extra member
    _line({"v": 1, "event": "case_metric", "dice": 0.9}),
    _line({"v": 1, "total": 2}),
    _line({"v": 1, "event": "cases", "total": 2, "case_id": "BraTS-GLI-00001"}),
    _line({"v": 1, "event": "done", "timings": {}, "provider": None, "metrics": {"dice": 1}}),
    # values out of their bounds, or of the wrong type
    _line({"v": 1, "event": "cases", "total": -1}),
    _line({"v": 1, "event": "cases", "total": True}),
    _line({"v": 1, "event": "cases", "total": "2"}),
    _line({"v": 1, "event": "cases", "total": 1e30}),
    _line({"v": 1, "event": "case_done", "index": 3, "total": 2}),
    _line({"v": 1, "event": "case_done", "index": 0, "total": 2}),
    _line({"v": 1, "event": "step", "index": 8, "total": 7, "name": "x"}),
    _line({"v": 1, "event": "step", "index": 1, "total": 7, "name": "two\nlines"}),
    _line({"v": 1, "event": "step", "index": 1, "total": 7, "name": "x" * 121}),
    _line({"v": 1, "event": "waiting", "owner": "attacker", "service": "key",
           "next_try_s": 1, "waited_s": 0, "window_s": 10}),
    _line({"v": 1, "event": "waiting", "owner": "model", "service": "key",
           "next_try_s": 1.5, "waited_s": 0, "window_s": 10}),
    _line({"v": 1, "event": "model_loaded", "provider": "CUDA; patient BraTS-GLI-00001"}),
    _line({"v": 1, "event": "done", "timings": {"infer": -1}}),
    _line({"v": 1, "event": "done", "timings": {"infer": "NaN"}}),
    _line({"v": 1, "event": "done", "timings": {"BraTS GLI 00001": 1.0}}),
    _line({"v": 1, "event": "done", "timings": {f"s{i}": 1.0 for i in range(33)}}),
    _line({"v": 1, "event": "done", "timings": [1.0]}),
    EVENT_MARKER + '{"v": 1, "event": "done", "timings": {"infer": Infinity}}',
    # too long, even when the body would be an event
    EVENT_MARKER + '{"v":1,"event":"cases","total":2}' + " " * MAX_EVENT_LINE_CHARS,
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
