"""Which process is which: a process id with its start time, so that a recorded id that the
kernel has since given to another process is not taken for the one recorded (a run's owner,
the background policy watcher)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["owner_alive", "process_identity"]


def process_identity(pid: int | None = None) -> tuple[int, int | None]:
    """``(pid, start time in clock ticks since boot)`` of a process (this one by default); the
    start time is None where ``/proc`` does not say it."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return pid, None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return pid, int(fields[19])  # field 22, starttime
    except (IndexError, ValueError):
        return pid, None


def owner_alive(pid: int, started: int | None) -> bool:
    """Whether the process that owned a run is still the one running as ``pid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive, but not ours unless the start time matches
    if started is None:
        return True
    return process_identity(pid)[1] in (started, None)

