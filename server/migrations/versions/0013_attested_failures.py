"""Attested failures (issue 28): ``failure_attested`` on ``runs``, true when a failed run's
reason is the enclave's own failure record, whose attestation token (audience
``sealbench-failure``) the registry verified; false for existing rows (no failure was attested
before this revision: every stored failure is the hospital's claim).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 21:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain string default: SQLite adds the column in place (an expression default would make
    # batch mode rebuild the table).
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failure_attested", sa.Boolean(), nullable=False,
                                      server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("failure_attested")
