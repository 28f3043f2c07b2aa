"""The bound on one case: what the enclave sets around ``runner.predict`` and a plug-in's
inference obeys.

The enclave opens a :class:`CaseGuard` for each case (:func:`case_guard`, with the benchmark's
per-case limit, never more than the run has left). A plug-in runs its ONNX Runtime sessions
through :func:`sealbench.benchmarks.onnx_runtime.run`, which registers a way to stop the run
with :func:`current_guard`: when the limit passes, a timer thread stops every registered run
(ONNX Runtime's ``RunOptions.terminate``, checked between nodes, so a ``Loop`` of 2^31
iterations stops too) and the guard records ``timeout``; an allocation that fails under the
run's memory limit is recorded as ``memory``. The enclave then reads :attr:`CaseGuard.reason`
and flags the case with it, whatever the plug-in made of the exception.

The guard lives in a context variable, so it reaches the plug-in's code on the thread that
calls ``predict`` without passing through the :class:`~sealbench.benchmarks.interface.Runner`
interface; outside a guard (``model check``, tests) nothing is bounded. Pure Python: no ONNX
Runtime here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Final, Literal

__all__ = ["MEMORY", "TIMEOUT", "CaseGuard", "LimitReason", "case_guard", "current_guard"]

#: The reasons a case fails when a limit stops it: the enclave's flagged-failure reasons.
TIMEOUT: Final = "timeout"
MEMORY: Final = "memory"
LimitReason = Literal["timeout", "memory"]

_CURRENT: ContextVar[CaseGuard | None] = ContextVar("sealbench_case_guard", default=None)


class CaseGuard:
    """One case's time limit and what stopped it. Thread-safe: the timer thread stops runs the
    predicting thread registered."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a case's time limit must be positive, received {seconds}")
        self.seconds = seconds
        self._lock = threading.Lock()
        self._stops: dict[int, Callable[[], None]] = {}
        self._next = 0
        self._reason: LimitReason | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.name = "sealbench-case-limit"

    @property
    def reason(self) -> LimitReason | None:
        """``timeout`` when the limit passed, ``memory`` when an allocation failed under the
        memory limit (the first that happened), else None."""
        with self._lock:
            return self._reason

    @property
    def expired(self) -> bool:
        return self.reason == TIMEOUT

    def _expire(self) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = TIMEOUT
            stops = list(self._stops.values())
        for stop in stops:
            stop()

    def out_of_memory(self) -> None:
        """Record that an allocation of this case failed under the memory limit."""
        with self._lock:
            if self._reason is None:
                self._reason = MEMORY

    @contextlib.contextmanager
    def stoppable(self, stop: Callable[[], None]) -> Iterator[None]:
        """Within the block, ``stop()`` is called when the limit passes (at once when it has
        already passed)."""
        with self._lock:
            key = self._next
            self._next += 1
            self._stops[key] = stop
            expired = self._reason == TIMEOUT
        if expired:
            stop()
        try:
            yield
        finally:
            with self._lock:
                del self._stops[key]

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()


def current_guard() -> CaseGuard | None:
    """The guard of the case being predicted on this thread, or None outside the enclave."""
    return _CURRENT.get()


@contextlib.contextmanager
def case_guard(seconds: float) -> Iterator[CaseGuard]:
    """A :class:`CaseGuard` of ``seconds``, current within the block."""
    guard = CaseGuard(seconds)
    token = _CURRENT.set(guard)
    guard.start()
    try:
        yield guard
    finally:
        guard.cancel()
        _CURRENT.reset(token)
