"""A launcher reads a failed run from the enclave's ``failed`` event (code, exit code, reason,
rule), not from its prose; a workload that dies without one is still a failure, with its exit
status."""

from __future__ import annotations

from sealbench.contract.errors import AssetIntegrityError, KeyReleaseDenied
from sealbench.contract.events import RunFailed
from sealbench.contract.inputs import Rule
from sealbench.platforms.launcher import FailureWatch, failure_from_exit

_REFUSED = RunFailed(exit_code=13, code="key_release_denied", reason="the pool refused: dbgstat",
                     rule=Rule.PRODUCTION_IMAGE)
_PROSE = "sealbench-enclave: the pool refused: dbgstat (exit 13)"


def test_the_watch_keeps_the_last_failure_event_and_passes_every_line() -> None:
    seen: list[str] = []
    watch = FailureWatch(seen.append)
    lines = ["step 1/7: x", _REFUSED.to_line(), "sealbench-event: {not json", "prose"]
    for line in lines:
        watch(line)
    assert seen == lines and watch.event == _REFUSED
    FailureWatch()(_REFUSED.to_line())  # no sink: nothing to hand on


def test_the_failure_comes_from_the_event() -> None:
    failed = failure_from_exit(13, _REFUSED, [_PROSE], 7, max_reason=2000)
    assert (failed.exit_code, failed.code, failed.rule, failed.reason) == (
        13, "key_release_denied", Rule.PRODUCTION_IMAGE, "the pool refused: dbgstat")
    assert failed.error_class is KeyReleaseDenied and failed.failure_class == "key_release_denied"
    assert failed.peak_rss_bytes == 7
    assert str(failed) == ("the enclave failed (exit 13, KeyReleaseDenied): the pool refused: "
                           "dbgstat")
    assert failure_from_exit(13, _REFUSED, [], None, max_reason=8).reason == "the pool"


def test_a_workload_that_dies_without_an_event_fails_with_its_exit_status() -> None:
    failed = failure_from_exit(14, None, ["Traceback ...", "MemoryError", "  "], None,
                               max_reason=2000)
    assert (failed.exit_code, failed.code, failed.rule) == (14, None, None)
    assert failed.error_class is AssetIntegrityError and failed.reason == "MemoryError"
    silent = failure_from_exit(3, None, [], None, max_reason=2000)
    assert silent.reason == "exited 3 without a reason" and silent.failure_class == "killed"


def test_an_event_that_does_not_match_the_exit_status_is_not_the_failure() -> None:
    """A plug-in can print any line: an event whose exit code is not how the process ended
    says nothing about this failure."""
    failed = failure_from_exit(1, _REFUSED, ["crashed"], None, max_reason=2000)
    assert (failed.exit_code, failed.code, failed.rule, failed.reason) == (1, None, None,
                                                                          "crashed")
    assert failed.failure_class == "enclave"
