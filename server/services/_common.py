"""Helpers every service uses: paging, lookups that raise NotFoundError, and commits that turn
a uniqueness violation into a ConflictError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Row, Select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sealbench.server.errors import ConflictError, NotFoundError

__all__ = ["PageOf", "commit", "flush", "get_or_404", "paged", "rows_page"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class PageOf(Generic[T]):
    items: tuple[T, ...]
    limit: int
    offset: int
    next_offset: int | None


def paged(session: Session, stmt: Select[T], *, limit: int, offset: int) -> PageOf[T]:
    """Run ``stmt`` (already ordered) for one page; one extra row tells whether more follow."""
    rows = tuple(session.scalars(stmt.limit(limit + 1).offset(offset)).all())
    more = len(rows) > limit
    return PageOf(rows[:limit], limit, offset, offset + limit if more else None)


def rows_page(session: Session, stmt: Select[Any], *, limit: int, offset: int) -> PageOf[Row[Any]]:
    """Like :func:`paged` but returns plain rows (no ORM objects): for read-only listings,
    where building and tracking ORM instances would cost more than the query."""
    rows = tuple(session.execute(stmt.limit(limit + 1).offset(offset)).all())
    more = len(rows) > limit
    return PageOf(rows[:limit], limit, offset, offset + limit if more else None)


def get_or_404(
    session: Session, model: type[R], ident: int, kind: str, *, for_update: bool = False
) -> R:
    """The row, locked for the transaction when ``for_update`` (PostgreSQL; SQLite write
    transactions hold the database lock already), or :class:`NotFoundError`."""
    row = session.get(model, ident, with_for_update=for_update)
    if row is None:
        raise NotFoundError(kind, ident)
    return row


def commit(session: Session, what: str) -> None:
    """Commit, translating a unique-constraint race into :class:`ConflictError`."""
    try:
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        raise ConflictError(f"{what} conflicts with an existing record") from exc


def flush(session: Session, what: str) -> None:
    """Flush early so that uniqueness violations surface before the audit event is written."""
    try:
        session.flush()
    except IntegrityError as exc:
        session.rollback()
        raise ConflictError(f"{what} conflicts with an existing record") from exc
