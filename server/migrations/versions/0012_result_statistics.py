"""The pooled leaderboard's stored statistics: ``result_statistics``, one row per result with the
figures its benchmark's plug-in computed from its summary, its case count, privacy loss and
mock-issuer mark, and its model's pool at that moment (:mod:`sealbench.server.services.
result_statistics`). New results get their row when they are accepted.

Existing results are backfilled here with the installed plug-ins, so an old registry's first
board after the upgrade is as fast as later ones: every result gets its row, and the latest
result of each (benchmark, model) that the board pools carries the pool of the model's latest
results on every site. A benchmark whose plug-in is not installed is skipped (logged); the board
reads such results from their summaries, once per process, as it does any result without a row.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 20:00:00.000000
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_log = logging.getLogger("alembic.runtime.migration")

_results = sa.table(
    "results", sa.column("id", sa.Integer()), sa.column("benchmark_id", sa.Integer()),
    sa.column("dataset_id", sa.Integer()), sa.column("model_id", sa.Integer()),
    sa.column("summary", sa.JSON()), sa.column("token_issuer", sa.String()))
_benchmarks = sa.table(
    "benchmarks", sa.column("id", sa.Integer()), sa.column("metrics_version", sa.String()))
_statistics = sa.table(
    "result_statistics", sa.column("result_id", sa.Integer()), sa.column("plugin", sa.String()),
    sa.column("format", sa.Integer()), sa.column("n_cases", sa.Integer()),
    sa.column("reason", sa.Text()), sa.column("mock_tee", sa.Boolean()),
    sa.column("epsilon", sa.Double()), sa.column("delta", sa.Double()),
    sa.column("figures", sa.JSON()), sa.column("pool", sa.JSON()))


def upgrade() -> None:
    op.create_table(
        "result_statistics",
        sa.Column("result_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("plugin", sa.String(length=80), nullable=False),
        sa.Column("format", sa.Integer(), nullable=False),
        sa.Column("n_cases", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("mock_tee", sa.Boolean(), nullable=False),
        sa.Column("epsilon", sa.Double(), nullable=True),
        sa.Column("delta", sa.Double(), nullable=True),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("pool", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["result_id"], ["results.id"], name=op.f("fk_result_statistics_result_id_results")
        ),
        sa.PrimaryKeyConstraint("result_id", name=op.f("pk_result_statistics")),
    )
    _backfill(op.get_bind())


def _backfill(conn: sa.Connection) -> None:
    # the services' own functions: the rows are exactly what accepting the results now writes
    from sealbench.benchmarks.interface import BenchmarkError
    from sealbench.benchmarks.registry import load
    from sealbench.contract.pin import BenchmarkPin
    from sealbench.server.services import result_statistics as rs

    for bench_id, pin in conn.execute(sa.select(_benchmarks.c.id, _benchmarks.c.metrics_version)
                                      .order_by(_benchmarks.c.id)).all():
        try:
            plugin = load(BenchmarkPin.parse(pin))
        except (BenchmarkError, ValueError) as exc:
            _log.warning("result statistics of benchmark %s not backfilled: %s", bench_id, exc)
            continue
        latest = set(conn.execute(
            sa.select(sa.func.max(_results.c.id)).where(_results.c.benchmark_id == bench_id)
            .group_by(_results.c.model_id, _results.c.dataset_id)).scalars())
        by_model: dict[int, list[tuple[int, rs.Statistics, Any]]] = {}
        rows = []
        for rid, model_id, doc, issuer in conn.execute(
                sa.select(_results.c.id, _results.c.model_id, _results.c.summary,
                          _results.c.token_issuer)
                .where(_results.c.benchmark_id == bench_id).order_by(_results.c.id)):
            stats, summary = rs.read(plugin, doc, issuer)
            rows.append((rid, stats))
            if rid in latest and summary is not None and rs.poolable(plugin, stats):
                by_model.setdefault(model_id, []).append((rid, stats, summary))
        pools = {}
        for pooled in by_model.values():
            try:
                figures = rs.pooled_figures(plugin, [s for _, _, s in pooled])
            except (BenchmarkError, ValueError, TypeError):
                continue
            ids = frozenset(rid for rid, _, _ in pooled)
            pools[max(ids)] = rs.StoredPool(ids, figures)
        values = []
        for rid, stats in rows:
            row = rs.encode(rid, plugin, rs.Statistics(
                stats.n_cases, stats.figures, stats.reason, stats.mock_tee, stats.epsilon,
                stats.delta, pools.get(rid)))
            values.append({c.name: getattr(row, c.name) for c in _statistics.columns})
        for start in range(0, len(values), 500):
            conn.execute(sa.insert(_statistics), values[start:start + 500])


def downgrade() -> None:
    op.drop_table("result_statistics")
