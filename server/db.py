"""Database engines and sessions. SQLite runs in WAL mode with a busy timeout, and write
transactions start with ``BEGIN IMMEDIATE`` so that concurrent writers queue on the database lock
instead of failing on a lock upgrade; PostgreSQL is reached through ``postgresql+psycopg://``.

On SQLite, reader sessions run each statement in its own implicit transaction (no ``BEGIN`` /
``ROLLBACK`` round trips): every read sees a committed snapshot, and a request that reads
twice may see a commit in between, which no read path here depends on. Everything else
(writers, migrations, the CLI) runs in explicit transactions.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

# The cache tables live beside the code that keeps them; importing them here puts them in the
# ORM's metadata wherever a database is opened (the migrations' check compares the two).
from sealbench.server import db_cache as _db_cache  # noqa: F401

__all__ = ["SQLITE_BUSY_TIMEOUT_MS", "Database", "open_database"]

SQLITE_BUSY_TIMEOUT_MS = 30_000
_IMMEDIATE = "sealbench_immediate"
_AUTOCOMMIT_READS = "sealbench_autocommit_reads"


@dataclass(frozen=True)
class Database:
    """An engine and two session factories: ``reader`` for requests that only read, ``writer``
    for requests that change something."""

    engine: Engine
    reader: sessionmaker[Session]
    writer: sessionmaker[Session]

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=20,
        max_overflow=40,
        pool_timeout=60,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (below) rather than the driver's implicit one.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cur)
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        options = conn.get_execution_options()
        if options.get(_IMMEDIATE, False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif not options.get(_AUTOCOMMIT_READS, False):
            conn.exec_driver_sql("BEGIN")

    return engine


def _enable_wal(cur: Any) -> None:
    """Switch the database to WAL (persistent, so once per file). On a brand-new file several
    processes may race to switch it (replicas or migration jobs started together); the switch
    promotes a shared lock to an exclusive one, and SQLite answers "database is locked" at once
    instead of calling the busy handler when that could deadlock. The switch is therefore
    retried, within the busy timeout, until this or another connection has made it."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def open_database(url: str, *, pool_size: int = 10) -> Database:
    """Create the engine for ``url`` (SQLite file or PostgreSQL) and its session factories."""
    if url.startswith("sqlite"):
        engine = _sqlite_engine(url)
    else:
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=2 * pool_size,
            pool_timeout=60,
            pool_pre_ping=True,
        )
    writer_bind = engine.execution_options(**{_IMMEDIATE: True})
    reader_bind = engine.execution_options(**{_AUTOCOMMIT_READS: True})
    return Database(
        engine=engine,
        reader=sessionmaker(bind=reader_bind, expire_on_commit=False),
        writer=sessionmaker(bind=writer_bind, expire_on_commit=False),
    )
