"""Laplace releases on the ledger (issue 41): a privacy debit may carry the pure epsilons of the
release's Laplace mechanisms (``privacy_debits.laplace``, a JSON list) beside the Gaussian
part's ``rho``. Rows before this revision have none (NULL): their ``rho`` still describes a
Gaussian mechanism exactly, so their cost is unchanged. Downgrade drops the column (and with it
what Laplace releases cost: do not downgrade a registry that charged any).

Revision ID: 0021_laplace
Revises: 0020
Create Date: 2026-12-07 22:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_laplace"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("privacy_debits") as batch:
        batch.add_column(sa.Column("laplace", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("privacy_debits") as batch:
        batch.drop_column("laplace")
