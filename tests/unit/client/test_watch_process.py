"""The background policy watcher's record (:mod:`sealbench.client.assets.watch_process`): a
recorded process id counts as the watcher only while that id is still the process recorded."""

from __future__ import annotations

import os
from pathlib import Path

from sealbench.client.assets.watch_process import PID_FILE, running_watch
from sealbench.client.processes import process_identity


def test_the_recorded_process_still_running_is_the_watcher(tmp_path: Path) -> None:
    pid, started = process_identity()
    assert started is not None  # Linux: /proc says it
    (tmp_path / PID_FILE).write_text(f"{pid} {started}\n")
    watch = running_watch(tmp_path)
    assert watch is not None and watch.pid == pid and not watch.started


def test_an_id_the_kernel_gave_to_another_process_is_not_the_watcher(tmp_path: Path) -> None:
    """After a reboot the recorded id may be a live process started at another time."""
    pid, started = process_identity()
    assert started is not None
    (tmp_path / PID_FILE).write_text(f"{pid} {started + 1}\n")
    assert running_watch(tmp_path) is None


def test_no_record_or_an_unreadable_one_is_no_watcher(tmp_path: Path) -> None:
    assert running_watch(tmp_path) is None
    (tmp_path / PID_FILE).write_text("not a pid\n")
    assert running_watch(tmp_path) is None
    (tmp_path / PID_FILE).write_text(f"{os.getpid()}\n")  # a record without its start time
    assert running_watch(tmp_path) is not None
