"""The benchmark pin is stored once (issue 26): ``plugin_name`` and ``plugin_version`` (migration
0006) repeated ``metrics_version`` split in two; the registry now reads the pin as one typed value
(:class:`sealbench.contract.pin.BenchmarkPin`, column type ``sealbench.server.models.PinColumn``)
and the two copies go. The downgrade writes them back from ``metrics_version``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 06:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place on both backends (SQLite 3.35+ drops a plain column without rebuilding the
    # table): a batch rebuild would drop ``benchmarks`` while results and associations refer
    # to it, which SQLite's foreign keys refuse.
    for column in ("plugin_version", "plugin_name"):
        op.execute(f"ALTER TABLE benchmarks DROP COLUMN {column}")


def downgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("plugin_name", sa.String(length=48), nullable=True))
        batch_op.add_column(sa.Column("plugin_version", sa.String(length=16), nullable=True))
    benchmarks = sa.table("benchmarks", sa.column("id", sa.Integer),
                          sa.column("metrics_version", sa.String),
                          sa.column("plugin_name", sa.String),
                          sa.column("plugin_version", sa.String))
    bind = op.get_bind()
    for row_id, pin in bind.execute(sa.select(benchmarks.c.id, benchmarks.c.metrics_version)):
        name, sep, version = str(pin).partition("/")
        bind.execute(benchmarks.update().where(benchmarks.c.id == row_id).values(
            plugin_name=name[:48], plugin_version=(version if sep else "0")[:16]))
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.alter_column("plugin_name", existing_type=sa.String(length=48), nullable=False)
        batch_op.alter_column("plugin_version", existing_type=sa.String(length=16),
                              nullable=False)
