"""``serve --workers N``'s supervisor (issue 42, :mod:`sealbench.server.workers`): a worker that
is still starting (on a loaded machine, longer than uvicorn's 5 s health ping) is never killed
for not answering; one that started and then stops answering is replaced, as is one that exits;
one that failed before it started stops the supervisor instead of looping. The workers here are
stand-ins for uvicorn's (their pipe is real: the supervisor's questions travel through it)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from multiprocessing import Pipe
from typing import Any

import pytest
from uvicorn.config import STARTUP_FAILURE, Config

from sealbench.server import workers
from sealbench.server.workers import PatientMultiprocess


class _Child:
    def __init__(self) -> None:
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive


class _Worker:
    """A worker whose child answers the supervisor's pings only when told to."""

    made = 0

    def __init__(self, _config: Any = None, _sockets: Any = None) -> None:
        _Worker.made += 1
        self.parent_conn, self.child_conn = Pipe()
        self.process = _Child()
        self.pid = 1000 + _Worker.made
        self.exitcode: int | None = None
        self.killed = self.started_process = False

    def start(self) -> None:
        self.started_process = True

    def answer(self, started: bool) -> None:
        """The child's health thread: answer every question waiting in the pipe."""
        while self.child_conn.poll(0):
            self.child_conn.recv()
            self.child_conn.send(started)

    def is_alive(self, timeout: float = 5) -> bool:
        """uvicorn's: a ping answered within ``timeout`` (here: the answer is there or not)."""
        if not self.process.is_alive():
            return False
        self.parent_conn.send(b"ping")
        if self.parent_conn.poll(min(timeout, 0.05)):
            self.parent_conn.recv()
            return True
        return False

    def kill(self) -> None:
        self.killed = True
        self.process.alive = False

    def join(self) -> None:
        return None


@pytest.fixture
def supervisor(monkeypatch: pytest.MonkeyPatch) -> Iterator[PatientMultiprocess]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                                    signal.SIGTTIN, signal.SIGTTOU)}
    monkeypatch.setattr(workers, "Process", _Worker)
    try:
        sup = PatientMultiprocess(Config("x:app", workers=2), sockets=[])
        sup.processes = [_Worker(), _Worker()]  # type: ignore[list-item]
        yield sup
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _worker(sup: PatientMultiprocess, i: int) -> _Worker:
    w = sup.processes[i]
    assert isinstance(w, _Worker)
    return w


def test_a_worker_still_starting_is_never_killed_for_silence(
        supervisor: PatientMultiprocess) -> None:
    first, second = _worker(supervisor, 0), _worker(supervisor, 1)
    for _ in range(50):  # 25 s of uvicorn's rounds: neither has answered anything yet
        supervisor.keep_subprocess_alive()
    assert supervisor.processes == [first, second]
    assert not first.killed and not second.killed
    # each was asked once, not once a round: its pipe holds one question
    first.answer(False)
    assert first.parent_conn.poll(0)
    first.parent_conn.recv()
    assert not first.parent_conn.poll(0)


def test_a_started_worker_that_stops_answering_is_replaced(
        supervisor: PatientMultiprocess) -> None:
    first = _worker(supervisor, 0)
    supervisor.keep_subprocess_alive()  # asks both
    first.answer(True)
    supervisor.keep_subprocess_alive()  # reads "started"
    assert supervisor.has_started(first)
    supervisor.keep_subprocess_alive()  # pings it; it does not answer: hung
    assert first.killed
    replacement = _worker(supervisor, 0)
    assert replacement is not first and replacement.started_process
    assert not supervisor.has_started(replacement)


def test_a_worker_that_answers_while_importing_is_still_starting(
        supervisor: PatientMultiprocess) -> None:
    first = _worker(supervisor, 0)
    for _ in range(5):
        supervisor.keep_subprocess_alive()
        first.answer(False)  # its health thread runs, its app is not loaded yet
    assert not first.killed and not supervisor.has_started(first)


def test_a_worker_that_exits_is_replaced(supervisor: PatientMultiprocess) -> None:
    second = _worker(supervisor, 1)
    second.process.alive = False
    second.exitcode = 1
    supervisor.keep_subprocess_alive()
    assert _worker(supervisor, 1) is not second and not supervisor.should_exit.is_set()


def test_a_worker_that_failed_to_start_stops_the_supervisor(
        supervisor: PatientMultiprocess) -> None:
    first = _worker(supervisor, 0)
    first.process.alive = False
    first.exitcode = STARTUP_FAILURE
    supervisor.keep_subprocess_alive()
    assert supervisor.should_exit.is_set() and _worker(supervisor, 0) is first
