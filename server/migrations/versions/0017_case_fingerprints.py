"""Case fingerprints (issue 40, "One budget per set of patients").

- ``case_fingerprints``: per dataset, the keyed fingerprint of each of its cases its owner's
  client sent at registration (HMAC-SHA256 under the owner's key of a content digest no case id
  enters), with the owner, indexed by (owner, fingerprint) so a new registration finds the
  owner's earlier datasets that hold the same cases. Existing datasets have none (they were
  registered without) and keep their own ledgers.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 19:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "case_fingerprints",
        sa.Column("dataset_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"],
                                name=op.f("fk_case_fingerprints_dataset_id_datasets")),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"],
                                name=op.f("fk_case_fingerprints_owner_id_users")),
        sa.PrimaryKeyConstraint("dataset_id", "fingerprint", name=op.f("pk_case_fingerprints")),
    )
    with op.batch_alter_table("case_fingerprints", schema=None) as batch_op:
        batch_op.create_index("ix_case_fingerprints_owner_fingerprint",
                              ["owner_id", "fingerprint"], unique=False)


def downgrade() -> None:
    op.drop_table("case_fingerprints")
