"""Benchmarks can be closed to new associations: ``closed_at`` and ``closed_by_id`` on
``benchmarks`` (NULL: open). The state column is left alone, since a closed benchmark stays
approved: its existing links keep running and submitting results.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 14:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("closed_by_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_benchmarks_closed_by_id_users"), "users", ["closed_by_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_benchmarks_closed_by_id_users"), type_="foreignkey")
        batch_op.drop_column("closed_by_id")
        batch_op.drop_column("closed_at")
