"""Memory stays bounded: the prefetching case stream never holds more than two cases (the one
being worked on and the next), whatever the number of cases."""

from __future__ import annotations

import gc
import threading
import weakref

from sealbench.enclave.evaluation import prefetched


class _Case:
    live = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self) -> None:
        with _Case.lock:
            _Case.live += 1
            _Case.peak = max(_Case.peak, _Case.live)
        weakref.finalize(self, _Case._gone)

    @staticmethod
    def _gone() -> None:
        with _Case.lock:
            _Case.live -= 1


def test_prefetch_holds_at_most_two_cases_for_any_count() -> None:
    for count in (1, 2, 5, 12):
        _Case.live = _Case.peak = 0
        order = []
        for index, case in enumerate(prefetched(list(range(count)), lambda i: (i, _Case()))):
            order.append(case[0])
            assert case[0] == index
            del case
            gc.collect()
        assert order == list(range(count))
        assert _Case.peak <= 2, (count, _Case.peak)


def test_prefetch_fetches_next_while_current_is_processed() -> None:
    started = threading.Event()

    def fetch(i: int) -> int:
        if i == 1:
            started.set()
        return i

    stream = prefetched([0, 1], fetch)
    assert next(stream) == 0
    assert started.wait(5)  # case 1 is fetched before the caller asks for it
    assert list(stream) == [1]


def test_prefetch_error_propagates() -> None:
    def fetch(i: int) -> int:
        if i == 2:
            raise ValueError("integrity")
        return i

    got = []
    try:
        for item in prefetched([0, 1, 2, 3], fetch):
            got.append(item)
    except ValueError:
        pass
    else:
        raise AssertionError("the fetch error was swallowed")
    assert got == [0, 1]
