"""Database engines: SQLite in WAL mode with a busy timeout and foreign keys; writers take the
write lock at BEGIN (IMMEDIATE), so a second writer waits instead of failing on a lock upgrade
or losing an update."""

from __future__ import annotations

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
