"""One privacy budget per set of patients (issue 40): a dataset that holds cases of an earlier
dataset of the same owner shares that dataset's ledger.

At registration the owner's client sends one keyed fingerprint per case
(:mod:`sealbench.client.assets.fingerprints`: HMAC-SHA256, under a key only the owner holds, of
a digest of the case's content that no case id or file name enters). The registry stores them
(:class:`~sealbench.server.models.CaseFingerprint`, never returned by any API) and compares a new
dataset's with the owner's earlier datasets' only: it learns which of one owner's datasets share
cases and how many, nothing about a case, and nothing across owners (each owner's key differs, so
the same patient at two hospitals gives unrelated fingerprints).

:func:`shared_ledger` is the registration rule (:func:`sealbench.server.services.budgets.
registration_budget` applies it): the earlier datasets a new one overlaps must all be on one
ledger (one budget group, or one dataset on its own), which the new dataset then shares;
overlapping datasets on two ledgers are refused (409) naming them. :func:`shares_cases` and
:func:`overlap_groups` answer the same question for datasets already registered (what a pool
needs so that a case shared by two of its datasets is debited once per release).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import and_, insert, select
from sqlalchemy.orm import Session, aliased

from sealbench.server.errors import ConflictError
from sealbench.server.models import (
    BudgetGroup,
    CaseFingerprint,
    Dataset,
    DatasetBudgetGroup,
    User,
)

__all__ = [
    "SharedLedger",
    "overlap_groups",
    "record_fingerprints",
    "shared_ledger",
    "shares_cases",
]

#: Fingerprints per ``IN (...)`` query (well under SQLite's and PostgreSQL's parameter limits).
_CHUNK: Final = 500


@dataclass(frozen=True)
class SharedLedger:
    """The ledger a new dataset's cases are already on: the earlier datasets (of the same owner)
    that hold some of them, and their budget group (None: the one dataset's own ledger)."""

    datasets: tuple[Dataset, ...]
    group: BudgetGroup | None

    def text(self) -> str:
        named = ", ".join(f"{d.id} ({d.name})" for d in self.datasets)
        noun = "dataset" if len(self.datasets) == 1 else "datasets"
        return f"{noun} {named}"


def _earlier(session: Session, owner_id: int, fingerprints: Sequence[str]) -> list[int]:
    found: set[int] = set()
    unique = sorted(set(fingerprints))
    for start in range(0, len(unique), _CHUNK):
        found.update(session.scalars(
            select(CaseFingerprint.dataset_id).distinct().where(
                CaseFingerprint.owner_id == owner_id,
                CaseFingerprint.fingerprint.in_(unique[start:start + _CHUNK]))))
    return sorted(found)


def _group_ids(session: Session, dataset_ids: Iterable[int]) -> dict[int, int]:
    """Dataset id -> its budget group's id, for those of ``dataset_ids`` in a group."""
    rows = session.execute(select(DatasetBudgetGroup.dataset_id, DatasetBudgetGroup.group_id)
                           .where(DatasetBudgetGroup.dataset_id.in_(list(dataset_ids)))).all()
    return {dataset_id: group_id for dataset_id, group_id in rows}


def shared_ledger(
    session: Session, owner_id: int, fingerprints: Sequence[str] | None
) -> SharedLedger | None:
    """The ledger the owner's earlier datasets holding any of ``fingerprints`` are on (None:
    no earlier dataset of this owner holds any of these cases, or no fingerprints were sent).
    :class:`ConflictError` when they are on two or more ledgers: the new dataset would join
    budgets that are spent separately, so nothing is registered. The earlier datasets' rows are
    locked for the transaction, so that none of them changes ledger meanwhile."""
    if not fingerprints:
        return None
    # One registration with fingerprints at a time per owner (PostgreSQL: the owner's row;
    # SQLite's writers already queue on the database lock): two registrations of the same
    # cases at once must not both find no earlier dataset and each get a ledger.
    session.execute(select(User.id).where(User.id == owner_id).with_for_update())
    ids = _earlier(session, owner_id, fingerprints)
    if not ids:
        return None
    datasets = tuple(session.scalars(select(Dataset).where(Dataset.id.in_(ids))
                                     .order_by(Dataset.id).with_for_update()).all())
    groups = _group_ids(session, ids)
    ledgers = {("group", groups[d.id]) if d.id in groups else ("dataset", d.id)
               for d in datasets}
    if len(ledgers) > 1:
        names = {g.id: g.name for g in session.scalars(
            select(BudgetGroup).where(BudgetGroup.id.in_(set(groups.values()))))}
        shown = "; ".join(
            f"dataset {d.id} ({d.name}): "
            + (f"budget group {names[groups[d.id]]}" if d.id in groups else "its own budget")
            for d in datasets)
        raise ConflictError(
            "this dataset holds cases already registered in datasets that keep separate "
            f"privacy budgets ({shown}): one set of patients has one budget, so it cannot "
            "join both; nothing was registered. Register the cases of each separately, or "
            "only cases not registered before")
    group = None
    if groups:
        group = session.get(BudgetGroup, next(iter(groups.values())))
    return SharedLedger(datasets, group)


def record_fingerprints(session: Session, dataset: Dataset, fingerprints: Sequence[str]) -> None:
    """Store the (flushed) ``dataset``'s case fingerprints, each distinct one once (two equal
    cases in one dataset are one row); not committed."""
    unique = sorted(set(fingerprints))
    if unique:
        session.execute(insert(CaseFingerprint), [
            {"dataset_id": dataset.id, "fingerprint": f, "owner_id": dataset.owner_id}
            for f in unique])


def _pairs(session: Session, dataset_ids: Sequence[int]) -> list[tuple[int, int]]:
    a, b = aliased(CaseFingerprint), aliased(CaseFingerprint)
    rows = session.execute(
        select(a.dataset_id, b.dataset_id).distinct()
        .join(b, and_(b.owner_id == a.owner_id, b.fingerprint == a.fingerprint,
                      b.dataset_id > a.dataset_id))
        .where(a.dataset_id.in_(dataset_ids), b.dataset_id.in_(dataset_ids))).all()
    return [(x, y) for x, y in rows]


def shares_cases(session: Session, dataset_a_id: int, dataset_b_id: int) -> bool:
    """Whether the two datasets (one owner's: fingerprints of two owners never match) hold a
    case in common, as their registrations' fingerprints say. False for a dataset registered
    without fingerprints (before migration 0017), and for a dataset with itself."""
    if dataset_a_id == dataset_b_id:
        return False
    return bool(_pairs(session, (dataset_a_id, dataset_b_id)))


def overlap_groups(session: Session, dataset_ids: Iterable[int]) -> list[frozenset[int]]:
    """``dataset_ids`` partitioned into the sets linked by shared cases (two datasets sharing a
    case are in one set, and so on transitively); a dataset sharing none is a set of its own.
    Sets in order of their smallest id."""
    ids = sorted(set(dataset_ids))
    parent = {i: i for i in ids}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for x, y in _pairs(session, ids):
        rx, ry = root(x), root(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    sets: dict[int, set[int]] = {}
    for i in ids:
        sets.setdefault(root(i), set()).add(i)
    return [frozenset(members) for _, members in sorted(sets.items())]
