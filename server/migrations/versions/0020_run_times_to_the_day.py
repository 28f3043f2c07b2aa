"""Nothing beside the release (issue 40): the runs reported before this revision lose their step
timings (``step_seconds`` becomes ``{}``) and their ``created_at``/``updated_at`` are cut to their
UTC day, the precision the registry now keeps (timings and times of day of a run vary with its
cases: a model that spins on one patient's record lengthened its run). The data is gone on
upgrade; downgrade cannot bring it back and leaves the rows as they are.

Audit events keep their times: each is hashed into the log's chain and tree, which clients hold
signed checkpoints of, so rewriting them would break the log. Events from this revision on are
dated to the day (:func:`sealbench.server.audit.event_time`).

Revision ID: 0020
Revises: 0019_h42
Create Date: 2026-12-07 19:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sealbench.server.models import UtcDateTime
from sealbench.server.schemas.runs import day_of

revision: str = "0020"
down_revision: str | None = "0019_h42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_runs = sa.table(
    "runs",
    sa.column("id", sa.Integer),
    sa.column("step_seconds", sa.JSON),
    sa.column("created_at", UtcDateTime()),
    sa.column("updated_at", UtcDateTime()),
)


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.select(_runs.c.id, _runs.c.created_at, _runs.c.updated_at)).all()
    for row_id, created, updated in rows:
        bind.execute(_runs.update().where(_runs.c.id == row_id).values(
            step_seconds={}, created_at=day_of(created), updated_at=day_of(updated)))


def downgrade() -> None:
    pass  # the timings and times of day are gone: nothing to restore
