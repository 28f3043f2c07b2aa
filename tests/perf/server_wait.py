"""Waiting for a server the benches start: by its answer, however long a loaded machine makes
its start, never by a fixed sleep or a short deadline (a registry took 29-58 s of wall to start
on a busy CI machine, so a 60 s wait failed and deleted the registry under a server still
starting). A bench fails at once when the server process exits, and only after
:data:`START_LIMIT_S` of wall (``SEALBENCH_BENCH_START_LIMIT_S``) when it neither exits nor
answers; a line every :data:`PROGRESS_S` says what it waits for and the server's CPU so far."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["START_LIMIT_S", "ServerStart", "health_answers", "port_answers", "wait_for_answer"]

#: A server that neither answers nor exits in this long is stuck, not slow.
START_LIMIT_S = float(os.environ.get("SEALBENCH_BENCH_START_LIMIT_S", "900"))
PROGRESS_S = 15.0
_POLL_S = 0.05


class ServerStart(RuntimeError):  # noqa: N818 - reads as what went wrong: the server's start
    """The server exited before answering, or answered nothing within the limit."""


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (a server's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(entry.name)] = int(fields[1])
            cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo, seen = 0.0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen or current not in cpu:
            continue
        seen.add(current)
        total += cpu[current]
        todo += [child for child, parent in parents.items() if parent == current]
    return total


def health_answers(url: str) -> Callable[[], bool]:
    """A probe: ``GET url`` answers 200."""
    import httpx

    def probe() -> bool:
        try:
            return httpx.get(url, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    return probe


def port_answers(port: int, host: str = "127.0.0.1") -> Callable[[], bool]:
    """A probe: the port accepts a connection (uvicorn listens once its start-up is done), for a
    bench whose first request is what it measures."""

    def probe() -> bool:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            return False
        return True

    return probe


def wait_for_answer(proc: subprocess.Popen[bytes], probe: Callable[[], bool], what: str, *,
                    limit_s: float = START_LIMIT_S, log: Path | None = None) -> float:
    """Poll ``probe`` until it holds; the wall seconds it took. :class:`ServerStart` when
    ``proc`` exits first or after ``limit_s`` (then ``proc`` is killed); ``log``: where the
    server writes, named in the error."""
    start = time.monotonic()
    said = start
    where = f" (its log: {log})" if log is not None else ""
    while not probe():
        now = time.monotonic()
        if proc.poll() is not None:
            raise ServerStart(f"{what} exited with {proc.returncode} before answering{where}")
        if now - start > limit_s:
            proc.kill()
            proc.wait()
            raise ServerStart(f"{what} neither answered nor exited in {limit_s:.0f} s{where}")
        if now - said >= PROGRESS_S:
            said = now
            print(f"  waiting for {what}: {now - start:.0f} s, its CPU "
                  f"{tree_cpu_seconds(proc.pid):.1f} s so far", flush=True)
        time.sleep(_POLL_S)
    return time.monotonic() - start
