"""Pool authorizations (issue 40: every draw on the ledger).

- ``pool_authorizations``: each pool the registry authorized, its inputs document (exact bytes),
  digest, the log key's signature and the ``pool.authorize`` event's sequence number.
- ``privacy_debits.pool_authorization_id``: a debit charged when a pool is authorized (before the
  aggregator may draw); exactly one of ``result_id``, ``pooled_release_id`` and
  ``pool_authorization_id`` is set. ``privacy_debits`` is rebuilt on SQLite; every existing
  debit keeps its owner.
- ``pooled_releases.authorization_id``: the authorization a release spent (one release each).
- ``pooled_inputs``: a result may now be pooled by several releases (each authorized and
  debited), so its ``result_id`` is no longer unique.
- ``benchmarks.pool_log_key``, ``pool_witnesses``, ``pool_witness_quorum``: the rest of the pool
  anchor the aggregator's uid names. NULL for existing benchmarks: their anchor names the
  registry's current log key and no witnesses (:func:`sealbench.server.services.pooling.
  anchor_of`; a migration cannot read the key file).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 19:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ONE_OF_THREE = ("(CASE WHEN result_id IS NULL THEN 0 ELSE 1 END) + "
                 "(CASE WHEN pooled_release_id IS NULL THEN 0 ELSE 1 END) + "
                 "(CASE WHEN pool_authorization_id IS NULL THEN 0 ELSE 1 END) = 1")


def upgrade() -> None:
    op.execute("ALTER TABLE benchmarks ADD COLUMN pool_log_key VARCHAR(512)")
    op.execute("ALTER TABLE benchmarks ADD COLUMN pool_witnesses JSON")
    op.execute("ALTER TABLE benchmarks ADD COLUMN pool_witness_quorum INTEGER")
    op.create_table(
        "pool_authorizations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("authorized_by_id", sa.Integer(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("inputs_digest", sa.String(length=71), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("audit_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["benchmark_id"], ["benchmarks.id"],
                                name=op.f("fk_pool_authorizations_benchmark_id_benchmarks")),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"],
                                name=op.f("fk_pool_authorizations_model_id_models")),
        sa.ForeignKeyConstraint(["authorized_by_id"], ["users.id"],
                                name=op.f("fk_pool_authorizations_authorized_by_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_authorizations")),
        sa.UniqueConstraint("pool_id", name=op.f("uq_pool_authorizations_pool_id")),
    )
    with op.batch_alter_table("pool_authorizations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pool_authorizations_benchmark_id"),
                              ["benchmark_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_pool_authorizations_model_id"), ["model_id"],
                              unique=False)
    with op.batch_alter_table("pooled_releases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("authorization_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_pooled_releases_authorization_id_pool_authorizations"),
            "pool_authorizations", ["authorization_id"], ["id"])
        batch_op.create_unique_constraint(
            batch_op.f("uq_pooled_releases_authorization_id"), ["authorization_id"])
    with op.batch_alter_table("pooled_inputs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_pooled_inputs_result_id"), type_="unique")
    with op.batch_alter_table("privacy_debits", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pool_authorization_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_privacy_debits_pool_authorization_id_pool_authorizations"),
            "pool_authorizations", ["pool_authorization_id"], ["id"])
        batch_op.create_index(batch_op.f("ix_privacy_debits_pool_authorization_id"),
                              ["pool_authorization_id"], unique=False)
        batch_op.create_unique_constraint(
            batch_op.f("uq_privacy_debits_authorization_dataset"),
            ["pool_authorization_id", "dataset_id"])
        batch_op.drop_constraint(batch_op.f("ck_privacy_debits_one_release"), type_="check")
        batch_op.create_check_constraint("one_release", _ONE_OF_THREE)


def downgrade() -> None:
    op.execute("DELETE FROM privacy_debits WHERE pool_authorization_id IS NOT NULL")
    with op.batch_alter_table("privacy_debits", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_privacy_debits_one_release"), type_="check")
        batch_op.create_check_constraint(
            "one_release", "(result_id IS NULL) <> (pooled_release_id IS NULL)")
        batch_op.drop_constraint(batch_op.f("uq_privacy_debits_authorization_dataset"),
                                 type_="unique")
        batch_op.drop_index(batch_op.f("ix_privacy_debits_pool_authorization_id"))
        batch_op.drop_constraint(
            batch_op.f("fk_privacy_debits_pool_authorization_id_pool_authorizations"),
            type_="foreignkey")
        batch_op.drop_column("pool_authorization_id")
    with op.batch_alter_table("pooled_inputs", schema=None) as batch_op:
        batch_op.create_unique_constraint(batch_op.f("uq_pooled_inputs_result_id"),
                                          ["result_id"])
    with op.batch_alter_table("pooled_releases", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_pooled_releases_authorization_id"),
                                 type_="unique")
        batch_op.drop_constraint(
            batch_op.f("fk_pooled_releases_authorization_id_pool_authorizations"),
            type_="foreignkey")
        batch_op.drop_column("authorization_id")
    op.drop_table("pool_authorizations")
    op.execute("ALTER TABLE benchmarks DROP COLUMN pool_witness_quorum")
    op.execute("ALTER TABLE benchmarks DROP COLUMN pool_witnesses")
    op.execute("ALTER TABLE benchmarks DROP COLUMN pool_log_key")
