"""The Compute reads of the Confidential Space launcher's watch (for :mod:`sealbench.gcp.launcher`),
kept under the project's read quota together: Google counts every ``instances.get`` and
``getSerialPortOutput`` against one per-project ``Read requests per minute`` quota (1,500 by
default), and a run past it is answered 403 ``rateLimitExceeded``. One watch polls twice per
interval; about a dozen runs started together at one-second polls used to reach the quota.

:class:`ReadBudget` is a token bucket shared by every watch of one project in this process
(:func:`read_budget`): each read takes a token, and a watch with none waits for the next, so
any number of concurrent runs together read at most :data:`DEFAULT_READS_PER_MINUTE` a minute
(each run's polls slow down, none fails). Reads from other processes or tools (a second
``sealbench run``, the console, ``gcloud``) are not counted: that is what the headroom between
the default and Google's quota is for, and what the watch's backoff on ``rateLimitExceeded``
absorbs past it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_READS_PER_MINUTE", "ReadBudget", "read_budget"]

#: The reads a minute all watches of one project in this process share: 40% of Google's
#: default 1,500, the rest left to other processes and tools.
DEFAULT_READS_PER_MINUTE: Final = 600
#: Reads a budget may spend at once after an idle spell (a watch's status and serial read).
_BURST: Final = 10


class ReadBudget:
    """A token bucket of ``per_minute`` reads, ``burst`` of them at once. Thread-safe; the
    caller's ``clock`` and ``sleep`` (a watch's, injectable in tests) measure and wait."""

    def __init__(self, per_minute: float, burst: int = _BURST) -> None:
        if per_minute <= 0 or burst < 1:
            raise ValueError("a read budget needs a positive rate and a burst of at least 1")
        self.per_minute = float(per_minute)
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at: float | None = None
        self._lock = threading.Lock()
        #: Reads taken, and seconds waited for them, since the budget was made.
        self.taken = 0
        self.waited_s = 0.0

    def _claim(self, now: float) -> float:
        """Take a token (possibly one not yet there); the seconds until it is."""
        with self._lock:
            if self._at is not None:
                elapsed = max(0.0, now - self._at)
                self._tokens = min(self._burst, self._tokens + elapsed * self.per_minute / 60)
            self._at = now
            self._tokens -= 1
            self.taken += 1
            wait = 0.0 if self._tokens >= 0 else -self._tokens * 60 / self.per_minute
            self.waited_s += wait
            return wait

    def take(self, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        """Spend one read, waiting until the budget has it."""
        wait = self._claim(clock())
        if wait > 0:
            sleep(wait)


_BUDGETS: dict[str, ReadBudget] = {}
_BUDGETS_LOCK = threading.Lock()


def read_budget(project: str, per_minute: float = DEFAULT_READS_PER_MINUTE) -> ReadBudget:
    """The budget every watch of ``project`` in this process shares (made on first use with
    ``per_minute``; later callers share it as it is)."""
    with _BUDGETS_LOCK:
        budget = _BUDGETS.get(project)
        if budget is None:
            budget = _BUDGETS[project] = ReadBudget(per_minute)
        return budget
