"""Database engines: SQLite in WAL mode with a busy timeout and foreign keys; writers take the
write lock at BEGIN (IMMEDIATE), so a second writer waits instead of failing on a lock upgrade
or losing an update."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from sqlalchemy import text

from sealbench.server.db import SQLITE_BUSY_TIMEOUT_MS, open_database
from sealbench.server.migrate import upgrade_to_head


def test_sqlite_runs_in_wal_mode_with_busy_timeout(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'r.sqlite3'}")
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    db.dispose()


def test_switch_to_wal_waits_for_a_writer_in_rollback_mode(tmp_path: Path) -> None:
    """A second process opening a database still in rollback mode while another holds its write
    lock (migration jobs started together on a new file): SQLite refuses the switch to WAL at
    once ("database is locked", no busy handler, as it could deadlock); the engine retries
    within the busy timeout and opens once the writer commits."""
    path = tmp_path / "r.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (1)")
    threading.Timer(0.5, lambda: other.execute("COMMIT")).start()
    db = open_database(f"sqlite:///{path}")
    started = time.monotonic()
    with db.engine.connect() as conn:
        waited = time.monotonic() - started
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("SELECT x FROM t").scalar() == 1
    assert waited >= 0.3  # it waited for the commit, it did not skip the switch
    db.dispose()
    other.close()


def test_sqlite_writers_read_modify_write_without_lost_update(tmp_path: Path) -> None:
    """Both writers read the counter, then write it back incremented. With a deferred BEGIN
    the second would hold a stale snapshot and fail (or lose the first update); BEGIN
    IMMEDIATE makes it wait at BEGIN and read the committed value."""
    db = open_database(f"sqlite:///{tmp_path / 'r.sqlite3'}")
    upgrade_to_head(db.engine)
    first_read = threading.Event()

    def increment(pause: float, signal: threading.Event | None) -> None:
        with db.writer() as s:
            seq = s.execute(text("SELECT seq FROM audit_head")).scalar_one()
            if signal is not None:
                signal.set()
            time.sleep(pause)
            s.execute(text("UPDATE audit_head SET seq = :v"), {"v": seq + 1})
            s.commit()

    t = threading.Thread(target=increment, args=(0.3, first_read))
    t.start()
    first_read.wait(5)
    increment(0.0, None)
    t.join()
    with db.reader() as s:
        assert s.execute(text("SELECT seq FROM audit_head")).scalar_one() == 2
    db.dispose()
