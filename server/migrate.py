"""Alembic migrations applied programmatically: ``sealbench-server migrate`` / ``init`` and the
tests call :func:`upgrade_to_head`; no ``alembic.ini`` is needed. The migration scripts ship
inside the package (``sealbench/server/migrations``).

Several processes may start an upgrade at once (replicas of a deployment, a migration job run
twice): on PostgreSQL each takes a transaction-scoped advisory lock first, on SQLite the
transaction starts with ``BEGIN IMMEDIATE`` (the database's write lock). Either way the others
wait, then read the revision the first one wrote and have nothing left to apply."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

__all__ = [
    "MIGRATIONS_DIR",
    "MIGRATION_LOCK_KEY",
    "alembic_config",
    "current_revision",
    "head_revision",
    "upgrade_to_head",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: The advisory lock key serialising upgrades on PostgreSQL (any constant unique to sealbench:
#: the first eight bytes of SHA-256("sealbench/migrate") as a signed integer).
MIGRATION_LOCK_KEY = -0x359148A8EBC48678


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration pointing at the packaged scripts, bound to ``connection``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade_to_head(engine: Engine) -> tuple[str | None, str | None]:
    """Apply every pending migration in one transaction, after any concurrent upgrade of the
    same database has finished (see the module docstring). Returns the revisions before and
    after, as this upgrade saw them under the lock (equal when another process had already
    applied everything)."""
    if engine.dialect.name == "sqlite":
        # db.py's begin hook emits BEGIN IMMEDIATE for this option; on an engine made
        # elsewhere the plain BEGIN below is pysqlite's own.
        engine = engine.execution_options(sealbench_immediate=True)
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        before = MigrationContext.configure(conn).get_current_revision()
        command.upgrade(alembic_config(conn), "head")
        after = MigrationContext.configure(conn).get_current_revision()
    return before, after


@functools.cache
def head_revision() -> str | None:
    """The newest revision the packaged scripts define (read once: the scripts ship with the
    package and do not change while it runs)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` before ``init``)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
