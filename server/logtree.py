"""The transparency log's tree as stored: its head, and the complete subtrees that every proof
is built from (``O(log n)`` rows per proof, read in one query), for any tree size the log has
had. Read-only; appending lives in :mod:`sealbench.server.audit`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from sealbench.crypto import tlog
from sealbench.crypto.errors import TreeError
from sealbench.server.errors import InvalidRequestError
from sealbench.server.models import AuditHead, AuditNode

__all__ = ["StoredTree", "TreeHead", "nodes_named"]


def nodes_named(keys: Sequence[tuple[int, int]]) -> ColumnElement[bool]:
    """``audit_nodes`` rows with these ``(level, idx)`` keys, as one index search per level
    (a row-value ``IN`` would make SQLite scan the whole table)."""
    by_level: dict[int, list[int]] = defaultdict(list)
    for level, idx in keys:
        by_level[level].append(idx)
    return or_(*(
        and_(AuditNode.level == level, AuditNode.idx.in_(sorted(idxs)))
        for level, idxs in sorted(by_level.items())
    ))


@dataclass(frozen=True)
class TreeHead:
    size: int
    root: bytes


class StoredTree(tlog.SubtreeReader):
    """Reads subtree hashes from ``audit_nodes`` through ``session``."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def subtree_hashes(self, keys: Sequence[tuple[int, int]]) -> list[bytes]:
        if not keys:
            return []
        rows = self._session.execute(
            select(AuditNode.level, AuditNode.idx, AuditNode.hash).where(nodes_named(keys))
        ).all()
        found = {(r.level, r.idx): bytes(r.hash) for r in rows}
        missing = [key for key in keys if key not in found]
        if missing:
            raise TreeError(f"the log's tree has no stored subtree {missing[0]}")
        return [found[key] for key in keys]

    def head(self) -> TreeHead:
        row = self._session.execute(
            select(AuditHead.seq, AuditHead.tree_root).where(AuditHead.id == 1)
        ).one()
        return TreeHead(row.seq, bytes(row.tree_root))

    def _within(self, size: int, head: TreeHead, what: str) -> None:
        if not 0 <= size <= head.size:
            raise InvalidRequestError(
                f"{what} {size} is not a size this log has had (it has {head.size} events)"
            )

    def root_at(self, size: int, head: TreeHead | None = None) -> bytes:
        head = head or self.head()
        self._within(size, head, "tree size")
        return head.root if size == head.size else tlog.tree_root(size, self)

    def inclusion(self, index: int, size: int, head: TreeHead | None = None) -> tuple[bytes, ...]:
        self._within(size, head or self.head(), "tree size")
        if not 0 <= index < size:
            raise InvalidRequestError(f"leaf {index} is not in the tree of size {size}")
        return tlog.inclusion_proof(index, size, self)

    def consistency(self, first: int, second: int) -> tuple[bytes, ...]:
        self._within(second, self.head(), "tree size")
        if not 0 <= first <= second:
            raise InvalidRequestError(
                f"no consistency proof from size {first} to the smaller size {second}"
            )
        return tlog.consistency_proof(first, second, self)
