"""The pooled boards, kept in the database as the API serialised them (issue 42), so that the
first board a fresh server process serves needs neither the benchmark's plug-in (its imports:
scipy, nibabel, ...) nor the statistics: one stamp query, one primary-key read, the stored
bytes.

A row holds one board as one viewer class sees it (:func:`viewer_class`: the authority, every
signed-in user of a published board, or one other user) with one set of options, and the
**stamp** of what the board was built from (:func:`stamp`): the benchmark's row (its owner,
pin, publication and last change), the highest id and the number of its results, its
highest pooled-release id and its highest association revision on either side (associations
append a revision for every change, results and releases are never changed), and this code's
board format. A row whose stamp differs from the current one is never served; the next board
built replaces it. Losing the table costs only time (the rows are rebuilt on demand), so a
failure to store one is logged and ignored.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Final

from sqlalchemy import ForeignKey, LargeBinary, String, delete, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Mapped, Session, mapped_column

from sealbench.server.models import (
    Base,
    Benchmark,
    BenchmarkDataset,
    BenchmarkModel,
    PooledRelease,
    Result,
    UtcDateTime,
)

__all__ = ["BOARD_FORMAT", "BoardCache", "cached_board", "stamp", "store_board", "viewer_class"]

log = logging.getLogger("sealbench.server")

#: Changes whenever the board's arrangement or serialisation changes, so that rows written by
#: an older registry are never served by a newer one.
BOARD_FORMAT: Final = "board/2"


class BoardCache(Base):
    """One serialised pooled board (see the module's docstring; migration ``0019_h42``).
    Boards filtered to some sites are never stored (the filter is the caller's own list) and an
    unknown metric fails before a board exists, so a benchmark has at most a row per viewer
    class, metric and option set."""

    __tablename__ = "board_cache"

    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), primary_key=True,
                                              autoincrement=False)
    #: viewer class and options, e.g. ``owner|metric=|every=0|breakdown=1``
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    stamp: Mapped[str] = mapped_column(String(300))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


def viewer_class(bench_owner_id: int, published: bool, user_id: int) -> str:
    """Who the board is built for, as far as its content goes: the authority sees every result
    (and is told so), a published board shows every result to everyone else, and otherwise a
    user sees the results on its own datasets and of its own models."""
    if user_id == bench_owner_id:
        return "owner"
    return "published" if published else f"user:{user_id}"


def stamp(session: Session, benchmark_id: int) -> tuple[str, int, bool] | None:
    """The benchmark's current stamp, its owner and whether its board is published, in one
    query; None for a benchmark that does not exist."""
    by_bench = Result.benchmark_id == benchmark_id
    row = session.execute(select(
        Benchmark.owner_id, Benchmark.leaderboard_published, Benchmark.metrics_version,
        Benchmark.updated_at,
        select(func.max(Result.id)).where(by_bench).scalar_subquery(),
        select(func.count(Result.id)).where(by_bench).scalar_subquery(),
        select(func.max(PooledRelease.id))
        .where(PooledRelease.benchmark_id == benchmark_id).scalar_subquery(),
        select(func.max(BenchmarkDataset.id))
        .where(BenchmarkDataset.benchmark_id == benchmark_id).scalar_subquery(),
        select(func.max(BenchmarkModel.id))
        .where(BenchmarkModel.benchmark_id == benchmark_id).scalar_subquery(),
    ).where(Benchmark.id == benchmark_id)).first()
    if row is None:
        return None
    owner, published, pin, updated, *counters = row
    text = "|".join((BOARD_FORMAT, str(owner), str(bool(published)), str(pin),
                     updated.isoformat() if updated is not None else "",
                     *("" if c is None else str(c) for c in counters)))
    return text, int(owner), bool(published)


def cached_board(session: Session, benchmark_id: int, key: str, current: str) -> bytes | None:
    """The stored board under ``key`` if it was built at stamp ``current``."""
    row = session.execute(select(BoardCache.stamp, BoardCache.body).where(
        BoardCache.benchmark_id == benchmark_id, BoardCache.key == key)).first()
    if row is None or row[0] != current:
        return None
    return bytes(row[1])


def store_board(session: Session, benchmark_id: int, key: str, current: str, body: bytes,
                now: datetime) -> None:
    """Keep ``body`` as the board under ``key`` at stamp ``current`` (in ``session``, a writer,
    committed here); a failure only costs the next request a rebuild."""
    try:
        session.execute(delete(BoardCache).where(BoardCache.benchmark_id == benchmark_id,
                                                 BoardCache.key == key))
        session.add(BoardCache(benchmark_id=benchmark_id, key=key, stamp=current, body=body,
                               created_at=now))
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        log.warning("pooled board of benchmark %s not cached: %s", benchmark_id,
                    type(exc).__name__)

