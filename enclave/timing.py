"""Wall time per step of a run (attest, unwrap, download, decrypt, infer, score, seal, upload),
accumulated across threads; the totals are logged at the end of a run (they reveal nothing
about the data beyond its size)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STEP_NAMES", "StepTimer"]

STEP_NAMES = ("attest", "unwrap", "download", "decrypt", "load", "infer", "score", "seal", "upload")


class StepTimer:
    """Thread-safe accumulator of seconds per step name."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._totals: dict[str, float] = dict.fromkeys(STEP_NAMES, 0.0)

    @contextmanager
    def measure(self, step: str) -> Iterator[None]:
        start = self._clock()
        try:
            yield
        finally:
            elapsed = self._clock() - start
            with self._lock:
                self._totals[step] = self._totals.get(step, 0.0) + elapsed

    def totals(self) -> dict[str, float]:
        with self._lock:
            return {name: round(value, 4) for name, value in self._totals.items()}
