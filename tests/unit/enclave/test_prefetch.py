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


def test_a_case_is_decoded_only_after_the_one_before_it_is_done() -> None:
    """The prefetch thread fetches the next object's files, but its cases' volumes (145 MB for a
    full-size BraTS case) are decoded only when the caller asks for them, after it let go of the
    case before: never two decoded cases at once, as the fetched files of two objects are."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from sealbench.enclave.evaluation import _cases, _Fetched, _Loaded

    class _Layout:
        def load(self, files: dict[str, bytes]) -> _Case:
            assert files == {"cases/a": b"x"}
            return _Case()

    timer = SimpleNamespace(measure=lambda _name: nullcontext())
    run = SimpleNamespace(timer=timer, benchmark=None)
    files = {"cases/a": b"x"}
    dataset = SimpleNamespace(
        model=SimpleNamespace(keys=SimpleNamespace(destination=SimpleNamespace(run=run))),
        layout=_Layout())
    slot = SimpleNamespace(case_id="c", files=("cases/a",), obj=None)
    _Case.live = _Case.peak = 0
    fetched = prefetched(list(range(6)), lambda _i: [_Fetched(slot, files)])  # type: ignore[arg-type]
    count = 0
    for item in _cases(dataset, fetched):  # type: ignore[arg-type]
        assert isinstance(item, _Loaded)
        count += 1
        del item
        gc.collect()
    assert count == 6
    assert _Case.peak == 1
