"""Privacy budgets (issue 25): each dataset's lifetime budget (``budget_epsilon``,
``budget_delta`` on ``datasets``; existing rows get the defaults, epsilon 10 at delta 1e-6),
``budget_groups`` (datasets of one owner sharing cases share one budget; name unique per
owner), ``dataset_budget_groups`` (membership, so that ``datasets`` gains no foreign key and
SQLite need not rebuild a table others refer to) and ``privacy_debits`` (one per accepted
result whose summary is a release, with the audit event that logged it).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain string defaults: SQLite adds the columns in place (an expression default would make
    # batch mode rebuild ``datasets``, which results and runs refer to).
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("budget_epsilon", sa.Double(), nullable=False,
                                      server_default="10.0"))
        batch_op.add_column(sa.Column("budget_delta", sa.Double(), nullable=False,
                                      server_default="1e-06"))
    op.create_table(
        "budget_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("budget_epsilon", sa.Double(), nullable=False),
        sa.Column("budget_delta", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_budget_groups_owner_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_groups")),
        sa.UniqueConstraint("owner_id", "name", name="uq_budget_groups_owner_name"),
    )
    with op.batch_alter_table("budget_groups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_budget_groups_owner_id"), ["owner_id"],
                              unique=False)
    op.create_table(
        "dataset_budget_groups",
        sa.Column("dataset_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"],
            name=op.f("fk_dataset_budget_groups_dataset_id_datasets"),
        ),
        sa.ForeignKeyConstraint(
            ["group_id"], ["budget_groups.id"],
            name=op.f("fk_dataset_budget_groups_group_id_budget_groups"),
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_dataset_budget_groups")),
    )
    with op.batch_alter_table("dataset_budget_groups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_dataset_budget_groups_group_id"), ["group_id"],
                              unique=False)
    op.create_table(
        "privacy_debits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("budget_group_id", sa.Integer(), nullable=True),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("exact", sa.Boolean(), nullable=False),
        sa.Column("rho", sa.Double(), nullable=True),
        sa.Column("epsilon", sa.Double(), nullable=True),
        sa.Column("delta", sa.Double(), nullable=True),
        sa.Column("audit_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"], ["benchmarks.id"],
            name=op.f("fk_privacy_debits_benchmark_id_benchmarks"),
        ),
        sa.ForeignKeyConstraint(
            ["budget_group_id"], ["budget_groups.id"],
            name=op.f("fk_privacy_debits_budget_group_id_budget_groups"),
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_privacy_debits_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["result_id"], ["results.id"], name=op.f("fk_privacy_debits_result_id_results")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_privacy_debits")),
        sa.UniqueConstraint("result_id", name=op.f("uq_privacy_debits_result_id")),
    )
    with op.batch_alter_table("privacy_debits", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_privacy_debits_budget_group_id"),
                              ["budget_group_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_privacy_debits_dataset_id"), ["dataset_id"],
                              unique=False)


def downgrade() -> None:
    op.drop_table("privacy_debits")
    op.drop_table("dataset_budget_groups")
    op.drop_table("budget_groups")
    # SQLite (3.35+) drops a plain column in place; batch mode would rebuild ``datasets``,
    # whose DROP fails the foreign keys of results and runs that refer to its rows.
    for column in ("budget_delta", "budget_epsilon"):
        op.drop_column("datasets", column)
