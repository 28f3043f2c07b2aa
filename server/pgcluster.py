"""A throwaway PostgreSQL cluster for the test suite and the performance script: ``initdb`` into
a fresh directory, ``pg_ctl start`` on 127.0.0.1 and a free port, ``pg_ctl stop -m immediate``.

PostgreSQL refuses to run as root, so when the current user is root every command runs as the
``postgres`` system user through ``runuser``. Failures raise :class:`ClusterError` with the
server's own log tail, so a test that needs the cluster fails with a clear message instead of
being skipped. Trust authentication on loopback only: never for a deployment.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ClusterError", "ThrowawayPostgres", "free_port"]

_BIN_DIRS = ("/usr/local/bin", "/usr/lib/postgresql/15/bin", "/usr/bin")
_START_TIMEOUT_S = 60
_PG_USER = "postgres"


class ClusterError(RuntimeError):
    """The throwaway cluster could not be created, started or used."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _binary(name: str) -> str:
    for d in _BIN_DIRS:
        candidate = Path(d) / name
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise ClusterError(f"PostgreSQL's {name} was not found in {_BIN_DIRS} or on PATH")
    return found


@dataclass
class ThrowawayPostgres:
    """One local cluster under ``base_dir`` (default: a fresh directory in the system temp
    directory, which the ``postgres`` user can reach, removed again on stop); use as a context
    manager or call start/stop."""

    base_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sealbench-pg-")))
    port: int = field(default_factory=free_port)
    remove_on_stop: bool = True
    _started: bool = False

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "pgdata"

    @property
    def _as_root(self) -> bool:
        return os.geteuid() == 0

    def _run(self, args: list[str], what: str) -> None:
        cmd = ["runuser", "-u", _PG_USER, "--", *args] if self._as_root else args
        proc = subprocess.run(  # noqa: S603 - fixed binaries, arguments we built
            cmd, capture_output=True, text=True, timeout=_START_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            log = self.base_dir / "postgres.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ClusterError(
                f"PostgreSQL {what} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-2000:]} {tail}".strip()
            )

    def start(self) -> ThrowawayPostgres:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            shutil.chown(self.base_dir, user=_PG_USER, group=_PG_USER)
            self.base_dir.chmod(0o700)
        self._run(
            [
                _binary("initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                _PG_USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            "initdb",
        )
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.base_dir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(
            [
                _binary("pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.base_dir / "postgres.log"),
                "-o",
                options,
                "-w",
                "-t",
                str(_START_TIMEOUT_S),
                "start",
            ],
            "start",
        )
        self._started = True
        return self

    def stop(self) -> None:
        try:
            if self._started:
                self._started = False
                self._run(
                    [_binary("pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"],
                    "stop",
                )
        finally:
            if self.remove_on_stop:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` in this cluster."""
        return f"postgresql+psycopg://{_PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create ``name`` (optionally copied from ``template``) and return its URL."""
        import psycopg  # only the PostgreSQL tier needs the driver

        if not name.isidentifier():
            raise ClusterError(f"database name must be an identifier, received {name!r}")
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={_PG_USER} dbname=postgres", autocommit=True
        ) as conn:
            sql = f'CREATE DATABASE "{name}"'
            if template is not None:
                if not template.isidentifier():
                    raise ClusterError(f"template must be an identifier, received {template!r}")
                sql += f' TEMPLATE "{template}"'
            conn.execute(sql.encode())
        return self.url(name)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
