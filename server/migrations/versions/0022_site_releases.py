"""Spend the budget where it speaks (issue 41): ``benchmarks.site_releases``, whether each run of
the benchmark publishes its own (per-site) release. False for a benchmark whose pin ends in
``-pool`` (it pools in the TEE and publishes its pooled release only); the pin, which the owners'
key-release conditions bind, decides it, and the column states it for every reader of the
benchmark row. Every benchmark before this revision publishes per-site releases (no ``-pool``
pin existed): true. Downgrade drops the column (the pin still says it).

Revision ID: 0022_site_releases
Revises: 0021_laplace
Create Date: 2026-12-07 22:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_site_releases"
down_revision: str | None = "0021_laplace"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # in place on both dialects (SQLite adds a NOT NULL column with a constant default): batch
    # mode would rebuild ``benchmarks``, whose DROP fails the foreign keys that refer to it
    op.add_column("benchmarks", sa.Column("site_releases", sa.Boolean(), nullable=False,
                                          server_default=sa.true()))


def downgrade() -> None:
    # SQLite (3.35+) drops a plain column in place; batch mode would rebuild ``benchmarks``,
    # whose DROP fails the foreign keys of the rows that refer to it (as 0010 says)
    op.drop_column("benchmarks", "site_releases")
