"""Alembic migrations applied programmatically: ``sealbench-server init`` and the tests call
:func:`upgrade_to_head`; no ``alembic.ini`` is needed. The migration scripts ship inside the
package (``sealbench/server/migrations``)."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

__all__ = [
    "MIGRATIONS_DIR",
    "alembic_config",
    "current_revision",
    "head_revision",
    "upgrade_to_head",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration pointing at the packaged scripts, bound to ``connection``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade_to_head(engine: Engine) -> None:
    """Apply every pending migration in one transaction."""
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")


@functools.cache
def head_revision() -> str | None:
    """The newest revision the packaged scripts define (read once: the scripts ship with the
    package and do not change while it runs)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` before ``init``)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
