"""What the registry knows waits for one user: pending associations on which the user decides,
the user's own pending requests, pending benchmarks (admins), every approved evaluation of
the user's datasets with its latest verified result, and the user's sealed assets whose key
grants lag their approvals (a ``policy sync`` is due: :mod:`sealbench.server.services.grants`).
The client adds what only it knows (its local run records); the dashboard shows this as it is.

Every list is bounded by ``limit``; :class:`InboxData` says when one was cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sealbench.server.auth import Principal
from sealbench.server.models import Benchmark, Dataset, Model, Result
from sealbench.server.services.associations import (
    Kind,
    Link,
    approved_pairs_subquery,
    pending_links,
)
from sealbench.server.services.grants import GrantState, lagging_of_owner

__all__ = ["INBOX_LIMIT", "Evaluation", "InboxData", "PendingLink", "inbox"]

#: Most items of each list.
INBOX_LIMIT: Final = 500


@dataclass(frozen=True)
class PendingLink:
    kind: Kind
    link: Link
    benchmark: Benchmark
    asset: Dataset | Model


@dataclass(frozen=True)
class Evaluation:
    benchmark: Benchmark
    dataset: Dataset
    model: Model
    result_id: int | None


@dataclass(frozen=True)
class InboxData:
    to_decide: tuple[PendingLink, ...]
    awaiting_others: tuple[PendingLink, ...]
    benchmarks_to_approve: tuple[Benchmark, ...]
    evaluations: tuple[Evaluation, ...]
    limit: int
    truncated: bool
    #: The user's sealed assets whose grants lag their approvals.
    syncs_needed: tuple[GrantState, ...] = ()


def _links(
    session: Session, user_id: int, side: Literal["decider", "initiator"], limit: int
) -> tuple[tuple[PendingLink, ...], bool]:
    found: list[PendingLink] = []
    kinds: tuple[Kind, ...] = ("dataset", "model")
    for kind in kinds:
        rows = pending_links(session, kind, user_id, side=side, limit=limit + 1)
        found.extend(PendingLink(kind, link, bench, asset) for link, bench, asset in rows)
    found.sort(key=lambda p: (p.link.created_at, p.kind, p.link.id))
    return tuple(found[:limit]), len(found) > limit


def _evaluations(
    session: Session, user_id: int, limit: int
) -> tuple[tuple[Evaluation, ...], bool]:
    datasets = approved_pairs_subquery("dataset")
    models = approved_pairs_subquery("model")
    rows = session.execute(
        select(Benchmark, Dataset, Model)
        .select_from(datasets)
        .join(Benchmark, Benchmark.id == datasets.c.benchmark_id)
        .join(Dataset, Dataset.id == datasets.c.asset_id)
        .join(models, models.c.benchmark_id == datasets.c.benchmark_id)
        .join(Model, Model.id == models.c.asset_id)
        .where(Dataset.owner_id == user_id, Benchmark.state == "approved")
        .order_by(Benchmark.id, Dataset.id, Model.id)
        .limit(limit + 1)
    ).all()
    latest = {
        (b, d, m): int(r)
        for b, d, m, r in session.execute(
            select(Result.benchmark_id, Result.dataset_id, Result.model_id, func.max(Result.id))
            .join(Dataset, Dataset.id == Result.dataset_id)
            .where(Dataset.owner_id == user_id)
            .group_by(Result.benchmark_id, Result.dataset_id, Result.model_id)
        ).all()
    }
    found = tuple(
        Evaluation(b, d, m, latest.get((b.id, d.id, m.id))) for b, d, m in rows[:limit]
    )
    return found, len(rows) > limit


def inbox(session: Session, actor: Principal, *, limit: int = INBOX_LIMIT) -> InboxData:
    """Everything waiting for ``actor`` that the registry knows of (see the module docstring)."""
    to_decide, cut_decide = _links(session, actor.user_id, "decider", limit)
    awaiting, cut_awaiting = _links(session, actor.user_id, "initiator", limit)
    pending: list[Benchmark] = []
    if actor.is_admin:
        pending = list(
            session.scalars(
                select(Benchmark)
                .where(Benchmark.state == "pending")
                .order_by(Benchmark.id)
                .limit(limit + 1)
            ).all()
        )
    evaluations, cut_evaluations = _evaluations(session, actor.user_id, limit)
    syncs, cut_syncs = lagging_of_owner(session, actor.user_id, limit)
    return InboxData(
        to_decide=to_decide,
        awaiting_others=awaiting,
        benchmarks_to_approve=tuple(pending[:limit]),
        evaluations=evaluations,
        limit=limit,
        truncated=(cut_decide or cut_awaiting or cut_evaluations or cut_syncs
                   or len(pending) > limit),
        syncs_needed=syncs,
    )
