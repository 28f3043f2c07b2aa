"""Grant reports (issue 29): ``grants_digest`` and ``grants_synced_at`` on
``dataset_coordinates`` and ``model_coordinates``, the digest of the grant set
(:func:`sealbench.contract.workload.grant_set_digest`) the asset's owner last wrote to its key with
``sealbench policy sync``, and when. Null for existing rows: no owner has reported one, so the
registry compares the current approvals with the empty set (an asset with approved pairs shows
as needing a sync until its owner syncs once with a client of this revision).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 22:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("dataset_coordinates", "model_coordinates")


def upgrade() -> None:
    # Nullable columns without a default: SQLite adds them in place (no table rebuild).
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("grants_digest", sa.String(length=71), nullable=True))
            batch_op.add_column(sa.Column("grants_synced_at", sa.DateTime(timezone=True),
                                          nullable=True))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("grants_synced_at")
            batch_op.drop_column("grants_digest")
