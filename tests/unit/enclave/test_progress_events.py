"""The enclave's progress events (issue 26): one typed line per progress point on stdout, in the
run's order, next to the prose; none names a case, a metric or a secret."""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest

from sealbench.contract.events import (
    EVENT_MARKER,
    CaseDone,
    CasesCounted,
    GrantWaiting,
    ModelLoaded,
    RunDone,
    StepStarted,
    parse_event,
)
from sealbench.enclave import progress
from sealbench.enclave.grant_wait import WAITING_MARK, GrantWait
from tests.unit.enclave.test_grant_wait import Flaky, _denied


def _events(out: str) -> list[Any]:
    lines = [line for line in out.splitlines() if line.startswith(EVENT_MARKER)]
    events = [parse_event(line) for line in lines]
    assert None not in events, lines  # every line the enclave marks is an event
    return events


def test_a_run_writes_its_events_in_order_and_names_no_case(
    world: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="sealbench.enclave"):
        report = world.run()
    out = capsys.readouterr().out
    events = _events(out)
    steps = [e.index for e in events if isinstance(e, StepStarted)]
    assert steps == list(range(8)) and {e.total for e in events if isinstance(e, StepStarted)} \
        == {7}
    kinds = [type(e).__name__ for e in events if not isinstance(e, StepStarted)]
    assert kinds == ["ModelLoaded", "CasesCounted", "CaseDone", "CaseDone", "CaseDone", "RunDone"]
    assert [(e.index, e.total) for e in events if isinstance(e, CaseDone)] == [
        (1, 3), (2, 3), (3, 3)]
    assert [e.total for e in events if isinstance(e, CasesCounted)] == [3]
    assert isinstance(events[-1], RunDone)
    assert events[-1].timings == report.timings
    assert events[-1].provider == "CPUExecutionProvider"
    # an event follows the prose line of its step (both are still written)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "step 5/7: case 2/3 done" in text and "dataset manifest verified (3 cases)" in text
    for folder in (world.prepared / "data" / "cases").iterdir():
        assert folder.name not in out


def test_a_grant_wait_writes_its_event(capsys: pytest.CaptureFixture[str]) -> None:
    key = "projects/secret-project/locations/global/keyRings/r/cryptoKeys/k"
    GrantWait(60, lambda _s: None).call("model", Flaky(_denied(key)))
    out = capsys.readouterr().out
    assert _events(out) == [GrantWaiting(owner="model", service="key", next_try_s=2,
                                         waited_s=0, window_s=60)]
    assert "secret-project" not in out and WAITING_MARK not in out


def test_an_event_out_of_bounds_or_an_unwritable_stream_never_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    with caplog.at_level(logging.WARNING, logger="sealbench.enclave"):
        progress.model_loaded("CUDAExecutionProvider; patient BraTS-GLI-00001")
        progress.case_done(3, 2)
    assert out.getvalue() == ""
    assert "patient" not in caplog.text and "out of its bounds" in caplog.text
    out.close()  # a closed stream: the event is dropped, the run goes on
    progress.step_started(1, "check the recipient key and the result destination")
    monkeypatch.undo()


def test_the_provider_event_is_written_as_soon_as_the_model_loads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress.model_loaded("CUDAExecutionProvider")
    assert _events(capsys.readouterr().out) == [ModelLoaded(provider="CUDAExecutionProvider")]
