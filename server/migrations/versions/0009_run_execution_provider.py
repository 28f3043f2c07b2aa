"""Runs say which ONNX Runtime execution provider ran the model (issue 18): a nullable
``execution_provider`` on ``runs`` (``CPUExecutionProvider``, ``CUDAExecutionProvider``, ...;
the schema accepts only known names), NULL for existing rows (they did not say).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 10:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("execution_provider", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("execution_provider")
