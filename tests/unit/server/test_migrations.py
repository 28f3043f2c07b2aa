"""Alembic migrations produce exactly the ORM's schema, on both backends."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from sealbench.server.db import open_database
from sealbench.server.migrate import current_revision, head_revision, upgrade_to_head
from sealbench.server.models import Base


def test_migrations_match_orm_metadata(database_url: str) -> None:
    db = open_database(database_url)
    try:
        with db.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
        assert current_revision(db.engine) == head_revision() is not None
    finally:
        db.dispose()


def test_upgrade_is_idempotent(database_url: str) -> None:
    db = open_database(database_url)
    try:
        upgrade_to_head(db.engine)
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT seq FROM audit_head").scalar_one() == 0
    finally:
        db.dispose()
