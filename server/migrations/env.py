"""Alembic environment: runs the migrations on the connection handed over by
:func:`sealbench.server.migrate.upgrade_to_head` (never from a URL in a config file)."""

from __future__ import annotations

from alembic import context

from sealbench.server.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "sealbench migrations run through sealbench.server.migrate, with a connection"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
