"""``policy sync --watch`` started in the background for a profile (what ``profile add
--watch-policy`` does, or its question at a terminal answered yes): one detached process per
profile, its process id and its output in the profile's data directory, so that a second start
finds the first one alive and starts nothing.

``policy-watch.pid`` holds the process id and its start time (clock ticks since boot) as decimal
ASCII, so that an id the kernel has since given to another process (after a reboot) is not taken
for the watcher; ``policy-watch.log`` receives the
watcher's lines (one per sync, :mod:`sealbench.client.assets.grants_watch`). Stopping it is
``kill PID`` (SIGTERM: the watcher stops cleanly)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sealbench.client.processes import owner_alive, process_identity

__all__ = ["LOG_FILE", "PID_FILE", "WatchProcess", "running_watch", "start_policy_watch"]

PID_FILE: Final = "policy-watch.pid"
LOG_FILE: Final = "policy-watch.log"


@dataclass(frozen=True)
class WatchProcess:
    """The profile's background watcher: its process id, where its lines go, and whether this
    call started it (False: one was already running)."""

    pid: int
    log: Path
    started: bool


def running_watch(data_dir: Path) -> WatchProcess | None:
    """The watcher recorded in ``data_dir`` if its process is still the one running."""
    try:
        pid_text, *started = (data_dir / PID_FILE).read_text().split()
        pid, start = int(pid_text), (int(started[0]) if started else None)
    except (FileNotFoundError, ValueError):
        return None
    return WatchProcess(pid, data_dir / LOG_FILE, False) if owner_alive(pid, start) else None


def start_policy_watch(profile: str, data_dir: Path) -> WatchProcess:
    """Start ``sealbench policy sync --watch --profile PROFILE`` detached from this terminal
    (its own session, no input, output appended to ``data_dir/policy-watch.log``), unless the
    one recorded in ``data_dir`` is alive. The profile store is found as this process finds it
    (the environment is inherited)."""
    running = running_watch(data_dir)
    if running is not None:
        return running
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = data_dir / LOG_FILE
    with log.open("ab") as sink:
        proc = subprocess.Popen(  # noqa: S603 - our own CLI, arguments from no user input
            [sys.executable, "-m", "sealbench.client.cli", "policy", "sync", "--watch",
             "--profile", profile],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )
    tmp = data_dir / f".{PID_FILE}.tmp"
    started = process_identity(proc.pid)[1]
    tmp.write_text(f"{proc.pid}\n" if started is None else f"{proc.pid} {started}\n")
    tmp.replace(data_dir / PID_FILE)
    return WatchProcess(proc.pid, log, True)
