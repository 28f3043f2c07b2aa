"""The pooled boards' cache (issue 42): ``board_cache`` keeps each pooled board as the API
serialised it, with the stamp of what it was built from (:mod:`sealbench.server.db_cache`), so
a fresh server process answers its first board without importing the benchmark's plug-in. A
cache: safe to empty, rebuilt on demand; the downgrade drops it.

Revision ID: 0019_h42
Revises: 0018
Create Date: 2026-12-07 19:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_h42"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "board_cache",
        sa.Column("benchmark_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("stamp", sa.String(length=300), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["benchmark_id"], ["benchmarks.id"],
                                name=op.f("fk_board_cache_benchmark_id_benchmarks")),
        sa.PrimaryKeyConstraint("benchmark_id", "key", name=op.f("pk_board_cache")),
    )


def downgrade() -> None:
    op.drop_table("board_cache")
