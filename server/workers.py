"""Several registry processes on one socket: uvicorn's multiprocess supervisor, patient with
workers that are still starting.

uvicorn's own supervisor pings every worker each half second and kills one that does not answer
within ``timeout_worker_healthcheck`` (5 s), started or not. A spawned worker answers only once
its interpreter has re-imported the parent's main module and uvicorn (about a second of CPU), and
on a loaded machine (load 10 on 2 cores) that alone takes longer than 5 s of wall time: the
worker was killed and respawned in a loop and ``--workers 2`` never came up. Here a worker is
healthy while it is starting, however slowly, as long as its process lives: the supervisor asks
it once, without waiting, whether it has started, and reads the answer on a later round. Once a
worker has said it started, it is pinged as uvicorn pings it (a started worker whose event loop
does not answer within the timeout is hung and replaced), and a worker that exits is replaced,
unless it failed before starting (the app or the socket is broken: the supervisor stops, as
uvicorn's does).
"""

from __future__ import annotations

import logging
import socket
import weakref

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process

__all__ = ["PatientMultiprocess", "run_workers"]

log = logging.getLogger("uvicorn.error")


class PatientMultiprocess(Multiprocess):
    """:class:`uvicorn.supervisors.multiprocess.Multiprocess` whose liveness check spares the
    workers that have not started yet (see the module's docstring)."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        super().__init__(config, sockets)
        # the workers that said they have started, and those with a question unanswered
        self._started: weakref.WeakSet[Process] = weakref.WeakSet()
        self._asked: weakref.WeakSet[Process] = weakref.WeakSet()

    def has_started(self, process: Process) -> bool:
        """Whether ``process`` has said it started; never waits. A worker still importing has
        one question in its pipe, which it answers when its health thread runs."""
        if process in self._started:
            return True
        try:
            if process not in self._asked:
                process.parent_conn.send(b"ping")
                self._asked.add(process)
            if not process.parent_conn.poll(0):
                return False
            answer = process.parent_conn.recv()
        except (OSError, EOFError):
            return False  # its pipe is gone: the liveness check below finds out why
        self._asked.discard(process)
        if answer is True:
            self._started.add(process)
            return True
        return False

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            if process.process.is_alive():
                if not self.has_started(process):
                    continue  # still starting: alive is healthy
                if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                log.error("worker process [%s] failed to start, stopping", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.info("worker process [%s] died, starting another", process.pid)
            replacement = Process(self.config, self.sockets)
            replacement.start()
            self.processes[idx] = replacement


def run_workers(config: Config) -> None:
    """Serve ``config.app`` (an import string) from ``config.workers`` processes sharing one
    listening socket, under :class:`PatientMultiprocess`, until SIGINT or SIGTERM."""
    sock = config.bind_socket()
    try:
        PatientMultiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()
