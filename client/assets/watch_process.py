"""``policy sync --watch`` started in the background for a profile (what ``profile add
--watch-policy`` does, or its question at a terminal answered yes): one detached process per
profile, its process id and its output in the profile's data directory, so that a second start
finds the first one alive and starts nothing.

``policy-watch.pid`` holds the process id as decimal ASCII; ``policy-watch.log`` receives the
watcher's lines (one per sync, :mod:`sealbench.client.assets.grants_watch`). Stopping it is
``kill PID`` (SIGTERM: the watcher stops cleanly)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's: not ours, but the id is taken
        return True
    return True


def running_watch(data_dir: Path) -> WatchProcess | None:
    """The watcher recorded in ``data_dir`` if its process is still alive."""
    try:
        pid = int((data_dir / PID_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return WatchProcess(pid, data_dir / LOG_FILE, False) if _alive(pid) else None


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
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(data_dir / PID_FILE)
    return WatchProcess(proc.pid, log, True)
