"""State that several server processes share: dashboard sessions (``web_sessions``, keyed by
the SHA-256 of the session id), users that an admin disabled (``users.disabled_at``), and the
revocation generation every process polls to drop its token cache (``auth_generation``, one
row).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 07:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    generation = op.create_table(
        "auth_generation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_auth_generation")),
    )
    op.bulk_insert(generation, [{"id": 1, "value": 0}])
    op.create_table(
        "web_sessions",
        sa.Column("id_sha256", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_web_sessions_token_id_api_tokens")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_web_sessions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id_sha256", name=op.f("pk_web_sessions")),
    )
    with op.batch_alter_table("web_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_web_sessions_expires_at"), ["expires_at"])
        batch_op.create_index(batch_op.f("ix_web_sessions_token_id"), ["token_id"])
        batch_op.create_index(batch_op.f("ix_web_sessions_user_id"), ["user_id"])


def downgrade() -> None:
    op.drop_table("web_sessions")
    op.drop_table("auth_generation")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("disabled_at")
