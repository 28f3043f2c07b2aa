"""Benchmarks say whether they accept confidential-GPU preview images (issue 18):
``accept_experimental`` on ``benchmarks``, false for existing rows (their key-release conditions
keep requiring STABLE images).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 08:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("accept_experimental", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_column("accept_experimental")
