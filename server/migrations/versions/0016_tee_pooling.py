"""TEE pooling (issue 27).

- ``benchmarks.aggregator_image_digest``: the benchmark's aggregator image, and
  ``benchmarks.pool_recipient_key``: the registry's pool-release key its aggregator seals to
  (base64 X25519); NULL for every existing benchmark (none pools in the TEE yet).
- ``results.result_uri``: where the result's run left its objects; NULL for existing results
  (they cannot be pooled in the TEE).
- ``pooled_releases``: the pooled releases the registry verified; ``pooled_inputs``: the
  accepted results each used (a result at most once).
- ``privacy_debits.pooled_release_id``: a debit that belongs to a pooled release rather than to
  one result; ``result_id`` becomes nullable and exactly one of the two is set.
  ``privacy_debits`` is rebuilt on SQLite (no table refers to it); every existing debit keeps
  its result.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 01:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place on SQLite (a nullable column without a default): no rebuild of ``benchmarks``,
    # which other tables refer to.
    op.execute("ALTER TABLE benchmarks ADD COLUMN aggregator_image_digest VARCHAR(71)")
    op.execute("ALTER TABLE benchmarks ADD COLUMN pool_recipient_key VARCHAR(44)")
    op.execute("ALTER TABLE results ADD COLUMN result_uri VARCHAR(1024)")
    op.create_table(
        "pooled_releases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("submitted_by_id", sa.Integer(), nullable=False),
        sa.Column("release", sa.JSON(), nullable=False),
        sa.Column("sealed_release", sa.LargeBinary(), nullable=False),
        sa.Column("inputs_digest", sa.String(length=71), nullable=False),
        sa.Column("attestation_token", sa.Text(), nullable=False),
        sa.Column("token_issuer", sa.String(length=512), nullable=False),
        sa.Column("image_digest", sa.String(length=71), nullable=False),
        sa.Column("nonce", sa.String(length=64), nullable=False),
        sa.Column("n_sites", sa.Integer(), nullable=False),
        sa.Column("n_cases", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["benchmark_id"], ["benchmarks.id"],
                                name=op.f("fk_pooled_releases_benchmark_id_benchmarks")),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"],
                                name=op.f("fk_pooled_releases_model_id_models")),
        sa.ForeignKeyConstraint(["submitted_by_id"], ["users.id"],
                                name=op.f("fk_pooled_releases_submitted_by_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pooled_releases")),
        sa.UniqueConstraint("nonce", name=op.f("uq_pooled_releases_nonce")),
    )
    with op.batch_alter_table("pooled_releases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pooled_releases_benchmark_id"), ["benchmark_id"],
                              unique=False)
        batch_op.create_index(batch_op.f("ix_pooled_releases_model_id"), ["model_id"],
                              unique=False)
    op.create_table(
        "pooled_inputs",
        sa.Column("pooled_release_id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("commitment", sa.String(length=71), nullable=False),
        sa.ForeignKeyConstraint(["pooled_release_id"], ["pooled_releases.id"],
                                name=op.f("fk_pooled_inputs_pooled_release_id_pooled_releases")),
        sa.ForeignKeyConstraint(["result_id"], ["results.id"],
                                name=op.f("fk_pooled_inputs_result_id_results")),
        sa.PrimaryKeyConstraint("pooled_release_id", "result_id", name=op.f("pk_pooled_inputs")),
        sa.UniqueConstraint("result_id", name=op.f("uq_pooled_inputs_result_id")),
    )
    with op.batch_alter_table("privacy_debits", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pooled_release_id", sa.Integer(), nullable=True))
        batch_op.alter_column("result_id", existing_type=sa.Integer(), nullable=True)
        batch_op.create_foreign_key(
            batch_op.f("fk_privacy_debits_pooled_release_id_pooled_releases"),
            "pooled_releases", ["pooled_release_id"], ["id"])
        batch_op.create_unique_constraint(
            batch_op.f("uq_privacy_debits_pooled_release_dataset"),
            ["pooled_release_id", "dataset_id"])
        batch_op.create_check_constraint(
            "one_release", "(result_id IS NULL) <> (pooled_release_id IS NULL)")


def downgrade() -> None:
    op.execute("DELETE FROM privacy_debits WHERE pooled_release_id IS NOT NULL")
    with op.batch_alter_table("privacy_debits", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_privacy_debits_one_release"), type_="check")
        batch_op.drop_constraint(batch_op.f("uq_privacy_debits_pooled_release_dataset"),
                                 type_="unique")
        batch_op.drop_constraint(
            batch_op.f("fk_privacy_debits_pooled_release_id_pooled_releases"),
            type_="foreignkey")
        batch_op.alter_column("result_id", existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column("pooled_release_id")
    op.drop_table("pooled_inputs")
    op.drop_table("pooled_releases")
    op.execute("ALTER TABLE results DROP COLUMN result_uri")
    op.execute("ALTER TABLE benchmarks DROP COLUMN pool_recipient_key")
    op.execute("ALTER TABLE benchmarks DROP COLUMN aggregator_image_digest")
