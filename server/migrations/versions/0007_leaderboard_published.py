"""Benchmarks say whether they publish their leaderboard (issue 15): ``leaderboard_published``
on ``benchmarks``, false for existing rows (a model owner keeps seeing only its own model's
per-site values until the authority publishes the leaderboard).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 08:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("leaderboard_published", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_column("leaderboard_published")
