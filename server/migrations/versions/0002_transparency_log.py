"""The transparency log: the Merkle tree's complete subtrees (``audit_nodes``), the tree head on
``audit_head`` (root and right edge), the log's published keys, witnesses' cosignatures, the
record of server-side recomputations, and an index to find a result's event. Every existing
audit event becomes a leaf, in order, so the log's first leaves are the history so far.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 10:00:00.000000
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from sealbench.crypto.tlog import CompactRange

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000


def _leaf_hash(row: Any) -> bytes:
    """The ``sealbench/audit-leaf`` v1 leaf hash (kept literal here, as 0001 keeps the genesis
    hash, so that this migration never changes when the code does; equal to
    sealbench.server.audit_format.event_leaf_hash)."""
    data = json.dumps(
        {
            "format": "sealbench/audit-leaf",
            "v": 1,
            "seq": row.seq,
            "actor_id": row.actor_id,
            "action": row.action,
            "entity_type": row.entity_type,
            "entity_id": row.entity_id,
            "payload": row.payload,
            "occurred_at": row.occurred_at,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")
    return hashlib.sha256(b"\x00" + data).digest()


def _backfill(nodes: sa.Table) -> None:
    """Make every stored event a leaf, in sequence order, and set the tree head."""
    conn = op.get_bind()
    events = sa.table(
        "audit_events",
        *(sa.column(c) for c in ("seq", "actor_id", "action", "entity_type", "entity_id",
                                 "payload", "occurred_at")),
    )
    head = sa.table("audit_head", sa.column("id"), sa.column("seq"), sa.column("tree_root"),
                    sa.column("tree_edge"))
    edge = CompactRange()
    after = 0
    while True:
        rows = conn.execute(
            sa.select(events).where(events.c.seq > after).order_by(events.c.seq).limit(_BATCH)
        ).all()
        if not rows:
            break
        batch: list[dict[str, Any]] = []
        for row in rows:
            if row.seq != edge.size + 1:
                raise RuntimeError(
                    f"audit event {edge.size + 1} is missing (next stored is {row.seq}): "
                    "repair the audit log before migrating"
                )
            for (level, idx), value in edge.append(_leaf_hash(row)):
                batch.append({"level": level, "idx": idx, "hash": value})
        conn.execute(nodes.insert(), batch)
        after = rows[-1].seq
    conn.execute(
        head.update().where(head.c.id == 1).values(tree_root=edge.root(),
                                                   tree_edge=edge.to_bytes())
    )


def upgrade() -> None:
    nodes = op.create_table(
        "audit_nodes",
        sa.Column("level", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("level", "idx", name=op.f("pk_audit_nodes")),
    )
    op.create_table(
        "log_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("verifier", sa.String(length=400), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("endorsement", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_keys")),
        sa.UniqueConstraint("verifier", name=op.f("uq_log_keys_verifier")),
    )
    op.create_table(
        "audit_cosignatures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("witness", sa.String(length=400), nullable=False),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("root", sa.LargeBinary(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("submitted_by_id", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submitted_by_id"], ["users.id"],
            name=op.f("fk_audit_cosignatures_submitted_by_id_users"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_cosignatures")),
        sa.UniqueConstraint("witness", "tree_size", name="uq_audit_cosignatures_witness_size"),
    )
    op.create_table(
        "audit_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("tree_size", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("first_broken_seq", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_checks")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index("ix_audit_events_entity", ["entity_type", "entity_id"],
                              unique=False)
    with op.batch_alter_table("audit_head", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tree_root", sa.LargeBinary(), nullable=True))
        batch_op.add_column(sa.Column("tree_edge", sa.LargeBinary(), nullable=True))
    _backfill(nodes)
    with op.batch_alter_table("audit_head", schema=None) as batch_op:
        batch_op.alter_column("tree_root", existing_type=sa.LargeBinary(), nullable=False)
        batch_op.alter_column("tree_edge", existing_type=sa.LargeBinary(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_head", schema=None) as batch_op:
        batch_op.drop_column("tree_edge")
        batch_op.drop_column("tree_root")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_entity")
    op.drop_table("audit_checks")
    op.drop_table("audit_cosignatures")
    op.drop_table("log_keys")
    op.drop_table("audit_nodes")
