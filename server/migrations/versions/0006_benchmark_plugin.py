"""Benchmarks store the plug-in they pin: ``plugin_name`` and ``plugin_version`` on
``benchmarks``, filled for existing rows from ``metrics_version`` (``<name>/<version>``; a pin
without a slash keeps its whole text as the name and version ``0``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 08:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("plugin_name", sa.String(length=48), nullable=True))
        batch_op.add_column(sa.Column("plugin_version", sa.String(length=16), nullable=True))
    benchmarks = sa.table("benchmarks", sa.column("id", sa.Integer),
                          sa.column("metrics_version", sa.String),
                          sa.column("plugin_name", sa.String),
                          sa.column("plugin_version", sa.String))
    connection = op.get_bind()
    rows = connection.execute(sa.select(benchmarks.c.id, benchmarks.c.metrics_version)).all()
    for ident, pin in rows:
        name, sep, version = str(pin).partition("/")
        connection.execute(
            benchmarks.update().where(benchmarks.c.id == ident).values(
                plugin_name=name[:48], plugin_version=(version if sep else "0")[:16]))
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.alter_column("plugin_name", existing_type=sa.String(length=48), nullable=False)
        batch_op.alter_column("plugin_version", existing_type=sa.String(length=16),
                              nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_column("plugin_version")
        batch_op.drop_column("plugin_name")
