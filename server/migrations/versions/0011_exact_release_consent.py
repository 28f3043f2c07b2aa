"""Exact releases only by knowing consent (issue 25): ``exact_release_consent`` on each
revision of a benchmark's dataset and model links, false for existing rows (no installed plug-in
offered an exact release before this revision, so no existing link needed it). A dataset joins a
benchmark whose pin publishes exact (non-private) figures only through a revision its owner wrote
with this set.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 19:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("benchmark_datasets", "benchmark_models")


def upgrade() -> None:
    # A plain string default: SQLite adds the column in place (an expression default would make
    # batch mode rebuild the table).
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("exact_release_consent", sa.Boolean(), nullable=False,
                                          server_default="0"))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("exact_release_consent")
