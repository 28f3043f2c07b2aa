"""Run status on the registry: ``runs``, one row per confidential run a data owner's client
reported (state, failure class or interrupt reason, step timings, image digest, the result it
produced), unique per (reporter, client run id).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 07:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_key", sa.String(length=64), nullable=False),
        sa.Column("reporter_id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("image_digest", sa.String(length=71), nullable=False),
        sa.Column("tee", sa.String(length=32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("step_seconds", sa.JSON(), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"], ["benchmarks.id"], name=op.f("fk_runs_benchmark_id_benchmarks")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_runs_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_runs_model_id_models")),
        sa.ForeignKeyConstraint(
            ["reporter_id"], ["users.id"], name=op.f("fk_runs_reporter_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["result_id"], ["results.id"], name=op.f("fk_runs_result_id_results")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("reporter_id", "run_key", name="uq_runs_reporter_key"),
        sa.UniqueConstraint("result_id", name=op.f("uq_runs_result_id")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_benchmark_pair", ["benchmark_id", "model_id", "dataset_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_runs_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_model_id"), ["model_id"], unique=False)


def downgrade() -> None:
    op.drop_table("runs")
