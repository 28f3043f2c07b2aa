"""Privacy budgets (DESIGN, "Releases"; issue 25): each dataset, or budget group of datasets
that share cases, has a lifetime privacy budget its owner set at registration; the registry
charges every accepted result's release to it, refuses a release that would overspend it, and
logs every charge as a ``privacy.debit`` event of the transparency log.

**Accounting** (issue 41; :mod:`sealbench.contract.privacy_loss`). Budgets are stated as
(epsilon, delta). A debit is a release's :class:`~sealbench.contract.privacy_loss.PrivacyLoss`:
its Gaussian part's zCDP ``rho`` (the rows and ``privacy.debit`` events of every release since
issue 25) and the pure epsilons of its Laplace mechanisms (``laplace``, absent for none). The
spend is the composition of the debits (Gaussians compose exactly by adding rho); it fits the
budget when its epsilon at the budget's delta, on the exact Gaussian curve (with an RDP bound
once Laplace parts are in), is at most the budget's epsilon. ``budget_rho`` is the Gaussian rho
the budget holds on that curve (:func:`~sealbench.benchmarks.release.rho_of`), ``spent_rho``
the spend's Gaussian part, ``remaining_rho`` how much more Gaussian rho fits. An **exact**
release costs nothing; it is recorded (``exact``) and never refused here (each data owner's
consent to exact releases is a separate rule).

**The ledger** of a dataset is its own debits, or its group's when it is in one; it is locked
(``SELECT ... FOR UPDATE`` on the dataset or group row; SQLite's write transaction holds the
database lock) before the spend is read, so concurrent submissions cannot both fit in what is
left. :class:`Ledger` is the pure arithmetic, :func:`charge` the one write.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from sealbench.benchmarks.interface import Benchmark as Plugin
from sealbench.benchmarks.interface import PublicSummary, release_of
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.benchmarks.release import Release, ReleaseSpec, epsilon_of, rho_of
from sealbench.contract.privacy_loss import SLACK, PrivacyLoss
from sealbench.server.audit import append_event
from sealbench.server.auth import Principal
from sealbench.server.errors import (
    ConflictError,
    PrivacyBudgetExceededError,
    ResultRejectedError,
)
from sealbench.server.models import (
    Benchmark,
    BenchmarkDataset,
    BudgetGroup,
    Dataset,
    DatasetBudgetGroup,
    PooledRelease,
    PrivacyDebit,
    Result,
)
from sealbench.server.schemas import DatasetCreate
from sealbench.server.schemas.budgets import DEFAULT_BUDGET_DELTA, DEFAULT_BUDGET_EPSILON
from sealbench.server.services._common import get_or_404
from sealbench.server.services.benchmark_plugins import PluginLookup, declared_release
from sealbench.server.services.fingerprints import SharedLedger, shared_ledger

__all__ = [
    "Budget",
    "BudgetReadout",
    "Ledger",
    "ReleaseCost",
    "charge",
    "charge_pooled",
    "checked_release",
    "join_group",
    "ledger_of",
    "lock_ledger",
    "readout",
    "registration_budget",
]

#: Relative slack when comparing spend with budget, so that a budget set to exactly ``k``
#: releases (rounded through epsilon and back) holds all ``k`` (1e-9 of a budget is no leak).
_SLACK: Final = SLACK
#: The most releases :meth:`Ledger.releases_left` counts (a budget of pure-epsilon releases is
#: searched, not divided).
_MOST_RELEASES: Final = 100_000


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


@dataclass(frozen=True)
class Budget:
    """A lifetime budget as its owner stated it (``epsilon`` at ``delta``)."""

    epsilon: float
    delta: float

    @property
    def rho(self) -> float:
        """The Gaussian rho this budget holds (exact curve)."""
        return rho_of(self.epsilon, self.delta)

    def holds(self, loss: PrivacyLoss) -> bool:
        """Whether ``loss`` stays within this budget."""
        return loss.fits(self.epsilon, self.delta)

    def same_as(self, other: Budget) -> bool:
        return _near(self.epsilon, other.epsilon) and _near(self.delta, other.delta)

    def text(self) -> str:
        return f"epsilon {self.epsilon:g} at delta {self.delta:g}"


@dataclass(frozen=True)
class Ledger:
    """A budget and the privacy loss spent from it: pure arithmetic, no I/O."""

    budget: Budget
    spent: PrivacyLoss = field(default_factory=PrivacyLoss)

    @property
    def spent_rho(self) -> float:
        """The spend's Gaussian part (zCDP rho)."""
        return self.spent.rho

    @property
    def spent_epsilon(self) -> float:
        """The whole spend (Laplace parts included) read as epsilon at the budget's delta."""
        return 0.0 if self.spent.empty else self.spent.epsilon_at(self.budget.delta)

    @property
    def remaining_rho(self) -> float:
        """How much more Gaussian rho fits (the budget's rho less the spend's, when the spend is
        Gaussian; searched on the composed curve when it holds Laplace parts)."""
        if not self.spent.laplace:
            return max(self.budget.rho - self.spent.rho, 0.0)
        if not self.budget.holds(self.spent):
            return 0.0
        low, high = 0.0, self.budget.rho
        for _ in range(100):
            mid = (low + high) / 2
            if self.budget.holds(self.spent + PrivacyLoss.gaussian(mid)):
                low = mid
            else:
                high = mid
        return low

    @property
    def remaining_epsilon(self) -> float:
        """:attr:`remaining_rho` read as epsilon at the budget's delta."""
        return self.epsilon(self.remaining_rho)

    def epsilon(self, rho: float) -> float:
        """``rho`` read as epsilon at the budget's delta."""
        return epsilon_of(rho, self.budget.delta)

    def cost_epsilon(self, cost: PrivacyLoss) -> float:
        """``cost`` read as epsilon at the budget's delta."""
        return 0.0 if cost.empty else cost.epsilon_at(self.budget.delta)

    def fits(self, cost: PrivacyLoss) -> bool:
        """Whether ``cost`` fits in what is left."""
        return self.budget.holds(self.spent + cost)

    def releases_left(self, cost: PrivacyLoss | float) -> int:
        """How many more releases of ``cost`` (a :class:`PrivacyLoss`, or a Gaussian rho) each
        fit (what :meth:`after` would accept, one after another)."""
        if not isinstance(cost, PrivacyLoss):
            if not cost > 0:
                raise ValueError(f"a release costs rho > 0, got {cost}")
            cost = PrivacyLoss.gaussian(cost)
        if cost.empty:
            raise ValueError("an exact release costs nothing: no count of them is left")

        def fit(k: int) -> bool:
            return k == 0 or self.budget.holds(PrivacyLoss(
                rho=self.spent.rho + k * cost.rho, laplace=self.spent.laplace + cost.laplace * k))

        if not cost.laplace and not self.spent.laplace:
            guess = math.floor((self.budget.rho * (1 + _SLACK) - self.spent.rho) / cost.rho)
            k = min(max(guess, 0), _MOST_RELEASES)
            while k > 0 and not fit(k):
                k -= 1
            while k < _MOST_RELEASES and fit(k + 1):
                k += 1
            return k
        if not fit(1):
            return 0
        low, high = 1, 2
        while high < _MOST_RELEASES and fit(high):
            low, high = high, min(high * 2, _MOST_RELEASES)
        if fit(high):
            return high
        while high - low > 1:
            mid = (low + high) // 2
            if fit(mid):
                low = mid
            else:
                high = mid
        return low

    def after(self, release: Release, what: str) -> Ledger:
        """The ledger once ``release`` is charged; :class:`PrivacyBudgetExceededError` (saying
        spent, remaining and this release's cost, as epsilon at the budget's delta) when it
        does not fit. An exact release costs nothing."""
        return self.after_loss(release.loss, f"this release would overspend {what}'s")

    def after_loss(self, cost: PrivacyLoss, who: str) -> Ledger:
        """:meth:`after` for a bare ``cost``; ``who`` begins the refusal's message."""
        if not self.fits(cost):
            raise PrivacyBudgetExceededError(
                f"{who} privacy budget ({self.budget.text()}): "
                f"spent epsilon {self.spent_epsilon:.4g}, remaining epsilon "
                f"{self.remaining_epsilon:.4g}, this release costs epsilon "
                f"{self.cost_epsilon(cost):.4g}; nothing was stored (the exact composition: "
                f"'sealbench dataset budget --json')")
        return Ledger(self.budget, self.spent + cost)

    def payload(self) -> dict[str, object]:
        """The ledger's state as a ``privacy.debit`` event states it after the debit: the
        Gaussian spend in rho, the Laplace spend (``spent_laplace``: [[epsilon, count], ...],
        absent when none), and both read at the budget's delta."""
        out: dict[str, object] = {
            "budget_epsilon": self.budget.epsilon,
            "budget_delta": self.budget.delta,
            "budget_rho": self.budget.rho,
            "spent_rho": self.spent_rho,
            "remaining_rho": self.remaining_rho,
            "spent_epsilon": self.spent_epsilon,
            "remaining_epsilon": self.remaining_epsilon,
        }
        if self.spent.laplace:
            counts: dict[float, int] = {}
            for eps in self.spent.laplace:
                counts[eps] = counts.get(eps, 0) + 1
            out["spent_laplace"] = [[eps, n] for eps, n in sorted(counts.items())]
        return out


def _spend(rows: Sequence[tuple[float | None, list[float] | None]]) -> PrivacyLoss:
    """The composition of a ledger's debits (``rho``, ``laplace`` per row)."""
    return PrivacyLoss(rho=math.fsum(r for r, _ in rows if r),
                       laplace=tuple(e for _, lap in rows for e in (lap or ())))


# -- registration ---------------------------------------------------------------------------------


def registration_budget(
    session: Session, actor: Principal, body: DatasetCreate, now: datetime
) -> tuple[Budget, BudgetGroup | None]:
    """The budget a new dataset gets and the group it joins (created here, with this budget,
    when the owner has none of that name; not committed). Joining an existing group takes the
    group's budget; stating another one is refused (409) rather than silently ignored.

    A dataset holding cases of an earlier dataset of the same owner (its case fingerprints:
    :func:`~sealbench.server.services.fingerprints.shared_ledger`) shares that dataset's
    ledger whatever it asks: it joins the earlier one's group, or a group created here for the
    earlier dataset (with that dataset's budget, its debits so far counted in it:
    :func:`_debits_where`). Asking for another budget or another group is refused (409)."""
    asked = Budget(body.budget_epsilon or DEFAULT_BUDGET_EPSILON,
                   body.budget_delta or DEFAULT_BUDGET_DELTA)
    shared = shared_ledger(session, actor.user_id, body.case_fingerprints)
    if shared is not None and (shared.group is None or shared.group.name != body.budget_group):
        return _shared_budget(session, actor, body, shared, now)
    # no case registered before, or all in the very group this registration names
    if body.budget_group is None:
        return asked, None
    group = session.scalars(select(BudgetGroup).where(
        BudgetGroup.owner_id == actor.user_id, BudgetGroup.name == body.budget_group)).first()
    if group is None:
        group = BudgetGroup(owner_id=actor.user_id, name=body.budget_group,
                            budget_epsilon=asked.epsilon, budget_delta=asked.delta,
                            created_at=now)
        session.add(group)
        return asked, group
    theirs = Budget(group.budget_epsilon, group.budget_delta)
    stated = Budget(body.budget_epsilon or theirs.epsilon, body.budget_delta or theirs.delta)
    if not stated.same_as(theirs):
        raise ConflictError(
            f"budget group {group.name} has the budget {theirs.text()} (set when it was "
            f"created); this dataset asks for {stated.text()}: register it with the group's "
            "budget (or without one), or in another group")
    return theirs, group


def _shared_budget(
    session: Session, actor: Principal, body: DatasetCreate, shared: SharedLedger,
    now: datetime,
) -> tuple[Budget, BudgetGroup]:
    """The earlier datasets' ledger for a dataset holding their cases: their group, or one
    made now for the one earlier dataset (named by ``body.budget_group`` when that names no
    group yet); refused (409) when the registration asks for another budget or group."""
    group = shared.group
    before = f"these cases were registered before as {shared.text()}"
    if group is not None:
        theirs, where = Budget(group.budget_epsilon, group.budget_delta), group.name
    else:
        [earlier] = shared.datasets
        theirs = Budget(earlier.budget_epsilon, earlier.budget_delta)
        where = body.budget_group or _free_group_name(session, actor.user_id, earlier)
        taken = session.scalars(select(BudgetGroup.id).where(
            BudgetGroup.owner_id == actor.user_id, BudgetGroup.name == where)).first()
        if taken is not None:
            raise ConflictError(
                f"{before}, which keeps its own privacy budget; budget group {where} is "
                "another ledger, and one set of patients has one budget: register it without "
                "--budget-group (it then shares the earlier dataset's budget); nothing was "
                "registered")
    if body.budget_group is not None and body.budget_group != where:
        raise ConflictError(
            f"{before}, in budget group {where}: they share its privacy budget, so this "
            f"dataset cannot join budget group {body.budget_group}; register it without "
            f"--budget-group or with {where}; nothing was registered")
    stated = Budget(body.budget_epsilon or theirs.epsilon, body.budget_delta or theirs.delta)
    if not stated.same_as(theirs):
        raise ConflictError(
            f"{before}: they share its privacy budget ({theirs.text()}), and this dataset "
            f"asks for {stated.text()}; re-registering cases never gives them a fresh "
            "budget: register it without a budget (or with that one); nothing was registered")
    if group is None:
        [earlier] = shared.datasets
        group = BudgetGroup(owner_id=actor.user_id, name=where, budget_epsilon=theirs.epsilon,
                            budget_delta=theirs.delta, created_at=now)
        session.add(group)
        session.flush()
        join_group(session, earlier, group)
        append_event(
            session, actor_id=actor.user_id, action="dataset.budget_group",
            entity_type="dataset", entity_id=earlier.id,
            payload={"dataset_id": earlier.id, "budget_group": group.name,
                     "budget_group_id": group.id, "budget_epsilon": theirs.epsilon,
                     "budget_delta": theirs.delta,
                     "reason": "a dataset registered later holds some of its cases"},
            now=now)
    return theirs, group


def _free_group_name(session: Session, owner_id: int, earlier: Dataset) -> str:
    """``cases-of-<dataset name>`` (or with ``-2``, ``-3``, ... when the owner has that name)."""
    base = f"cases-of-{earlier.name}"[:190]
    taken = set(session.scalars(select(BudgetGroup.name).where(
        BudgetGroup.owner_id == owner_id, BudgetGroup.name.startswith(base))))
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def join_group(session: Session, dataset: Dataset, group: BudgetGroup) -> None:
    """Record ``dataset``'s membership of ``group`` (both flushed; not committed)."""
    session.add(DatasetBudgetGroup(dataset_id=dataset.id, group_id=group.id))


# -- accepting a result -----------------------------------------------------------------------


def checked_release(plugin: Plugin, summary: PublicSummary | None,
                    spec: ReleaseSpec | None = None) -> Release | None:
    """The release ``summary`` carries (None for a withheld summary or a plug-in without
    releases: nothing to charge), refused (422) when it is not the release the plug-in
    declares (``spec``, by default its site release): another privacy loss (an
    operator-raised epsilon), noise turned off, other content. The plug-in's declaration is
    part of the pin the owners approved."""
    release = None if summary is None else release_of(summary)
    if spec is None:
        spec = getattr(plugin, "release_spec", None)
    if release is not None and spec is not None and not release.matches(spec):
        declared = ("an exact release" if spec.exact
                    else f"Laplace epsilon {spec.epsilon:g}" if spec.mechanism == "laplace"
                    else f"epsilon {spec.epsilon:g} at delta {spec.delta:g}")
        got = ("an exact release" if release.exact
               else f"Laplace epsilon {release.epsilon:g}" if release.mechanism == "laplace"
               else f"epsilon {release.epsilon:g} at delta {release.delta:g}")
        raise ResultRejectedError(
            f"summary: its release is not the one {plugin.ref} declares ({declared} per "
            f"release, its columns and categories); received {got}")
    return release


@dataclass(frozen=True)
class LockedLedger:
    """A dataset's ledger, locked for the transaction: its group (or None) and its state."""

    dataset_id: int
    group: BudgetGroup | None
    ledger: Ledger

    @property
    def name(self) -> str:
        return (f"budget group {self.group.name}" if self.group is not None
                else f"dataset {self.dataset_id}")

    def after(self, release: Release) -> Ledger:
        """See :meth:`Ledger.after`: raises when ``release`` does not fit."""
        return self.ledger.after(release, self.name)


def _group_of(session: Session, dataset_id: int) -> BudgetGroup | None:
    return session.scalars(
        select(BudgetGroup).join(DatasetBudgetGroup, DatasetBudgetGroup.group_id == BudgetGroup.id)
        .where(DatasetBudgetGroup.dataset_id == dataset_id)).first()


def _debits_where(dataset_id: int, group: BudgetGroup | None) -> ColumnElement[bool]:
    """The debits of a ledger: the group's, with those its members were charged on their own
    ledgers before they joined it (a dataset whose cases were registered again joins a group
    made then: :func:`registration_budget`); else the dataset's own."""
    if group is not None:
        members = select(DatasetBudgetGroup.dataset_id).where(
            DatasetBudgetGroup.group_id == group.id)
        return or_(PrivacyDebit.budget_group_id == group.id,
                   and_(PrivacyDebit.budget_group_id.is_(None),
                        PrivacyDebit.dataset_id.in_(members)))
    return PrivacyDebit.dataset_id == dataset_id


def _spent(session: Session, dataset_id: int, group: BudgetGroup | None) -> PrivacyLoss:
    rows = session.execute(select(PrivacyDebit.rho, PrivacyDebit.laplace).where(
        _debits_where(dataset_id, group), PrivacyDebit.exact.is_(False))).all()
    return _spend([(r, lap) for r, lap in rows])


def lock_ledger(session: Session, dataset: Dataset) -> LockedLedger:
    """Lock ``dataset``'s ledger (its group's row, or its own) and read its spend."""
    group = _group_of(session, dataset.id)
    if group is not None:
        session.execute(select(BudgetGroup.id).where(BudgetGroup.id == group.id)
                        .with_for_update())
        budget = Budget(group.budget_epsilon, group.budget_delta)
    else:
        session.execute(select(Dataset.id).where(Dataset.id == dataset.id).with_for_update())
        budget = Budget(dataset.budget_epsilon, dataset.budget_delta)
    return LockedLedger(dataset.id, group, Ledger(budget, _spent(session, dataset.id, group)))


def ledger_of(session: Session, dataset: Dataset) -> LockedLedger:
    """``dataset``'s ledger as it stands, read without locking (what a listing reports: whether
    one more release fits now; the charge itself locks, :func:`lock_ledger`)."""
    group = _group_of(session, dataset.id)
    budget = (Budget(group.budget_epsilon, group.budget_delta) if group is not None
              else Budget(dataset.budget_epsilon, dataset.budget_delta))
    return LockedLedger(dataset.id, group, Ledger(budget, _spent(session, dataset.id, group)))


def charge(
    session: Session, actor: Principal, locked: LockedLedger, result: Result, release: Release,
    now: datetime, *, loss: PrivacyLoss | None = None,
) -> PrivacyDebit:
    """Charge ``release`` (of the flushed ``result``) to the locked ledger and log it
    (``privacy.debit``), in the caller's transaction (not committed here);
    :class:`PrivacyBudgetExceededError` when it does not fit, before anything is written.
    ``loss``: what the summary cost when it carries more than one release (a headline and a
    breakdown, composed: :func:`sealbench.benchmarks.pooling.summary_loss`); ``release``'s by
    default."""
    return _charge(session, actor, locked, release, now, benchmark_id=result.benchmark_id,
                   result_id=result.id, pooled_release_id=None, loss=loss)


def charge_pooled(
    session: Session, actor: Principal, locked: LockedLedger, pooled: PooledRelease,
    release: Release, now: datetime,
) -> PrivacyDebit:
    """Charge a TEE-pooled ``release`` (of the flushed ``pooled`` row) to one included
    dataset's locked ledger, once, and log it like :func:`charge` (``privacy.debit`` with
    ``pooled_release_id`` instead of ``result_id``); not committed here."""
    return _charge(session, actor, locked, release, now, benchmark_id=pooled.benchmark_id,
                   result_id=None, pooled_release_id=pooled.id)


def _charge(
    session: Session, actor: Principal, locked: LockedLedger, release: Release, now: datetime,
    *, benchmark_id: int, result_id: int | None, pooled_release_id: int | None,
    loss: PrivacyLoss | None = None,
) -> PrivacyDebit:
    # what the summary cost: its one release's loss, or (a plug-in that splits a release
    # between a headline and a breakdown) every release's it carries, composed
    cost = release.loss if loss is None else loss
    after = locked.ledger.after_loss(cost, f"this release would overspend {locked.name}'s")
    rho = cost.rho if cost.rho > 0 else None
    owner = ({"result_id": result_id} if pooled_release_id is None
             else {"pooled_release_id": pooled_release_id})
    event = append_event(
        session,
        actor_id=actor.user_id,
        action="privacy.debit",
        entity_type="dataset",
        entity_id=locked.dataset_id,
        payload={
            "dataset_id": locked.dataset_id,
            "budget_group": None if locked.group is None else locked.group.name,
            "budget_group_id": None if locked.group is None else locked.group.id,
            **owner,
            "benchmark_id": benchmark_id,
            "mechanism": release.mechanism,
            "rho": rho,
            **({"laplace": list(cost.laplace)} if cost.laplace else {}),
            "epsilon": release.epsilon,
            "delta": release.delta,
            **after.payload(),
        },
        now=now,
    )
    debit = PrivacyDebit(
        dataset_id=locked.dataset_id,
        budget_group_id=None if locked.group is None else locked.group.id,
        benchmark_id=benchmark_id, result_id=result_id, pooled_release_id=pooled_release_id,
        exact=release.exact,
        rho=rho, laplace=list(cost.laplace) or None,
        epsilon=release.epsilon, delta=release.delta,
        audit_seq=event.seq, created_at=now)
    session.add(debit)
    return debit


# -- reading a budget ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseCost:
    """One release of an associated benchmark, from its plug-in's declared release."""

    benchmark: Benchmark
    association: Literal["pending", "approved"]
    spec: ReleaseSpec


@dataclass(frozen=True)
class BudgetReadout:
    dataset_id: int
    group: BudgetGroup | None
    datasets: tuple[int, ...]
    ledger: Ledger
    debits: tuple[PrivacyDebit, ...]
    costs: tuple[ReleaseCost, ...]


def _costs(session: Session, dataset_id: int, plugins: PluginLookup) -> tuple[ReleaseCost, ...]:
    latest = (
        select(BenchmarkDataset.benchmark_id, func.max(BenchmarkDataset.revision).label("rev"))
        .where(BenchmarkDataset.asset_id == dataset_id)
        .group_by(BenchmarkDataset.benchmark_id)
        .subquery()
    )
    rows = session.execute(
        select(Benchmark, BenchmarkDataset.status)
        .join(BenchmarkDataset, BenchmarkDataset.benchmark_id == Benchmark.id)
        .join(latest, (latest.c.benchmark_id == BenchmarkDataset.benchmark_id)
              & (latest.c.rev == BenchmarkDataset.revision))
        .where(BenchmarkDataset.asset_id == dataset_id,
               BenchmarkDataset.status.in_(("pending", "approved")))
        .order_by(Benchmark.id)
    ).all()
    costs = []
    for bench, status in rows:
        spec = declared_release(bench.metrics_version, plugins)
        if spec is not None:
            costs.append(ReleaseCost(bench, "approved" if status == "approved" else "pending",
                                     spec))
    return tuple(costs)


def readout(
    session: Session, dataset_id: int, plugins: PluginLookup = load_plugin
) -> BudgetReadout:
    """A dataset's budget, spend, debits and per-release costs (read rule: a dataset's)."""
    dataset = get_or_404(session, Dataset, dataset_id, "dataset")
    group = _group_of(session, dataset.id)
    if group is not None:
        budget = Budget(group.budget_epsilon, group.budget_delta)
        members: Sequence[int] = session.scalars(
            select(DatasetBudgetGroup.dataset_id).where(DatasetBudgetGroup.group_id == group.id)
            .order_by(DatasetBudgetGroup.dataset_id)).all()
    else:
        budget = Budget(dataset.budget_epsilon, dataset.budget_delta)
        members = (dataset.id,)
    debits = tuple(session.scalars(select(PrivacyDebit).where(
        _debits_where(dataset.id, group)).order_by(PrivacyDebit.id)).all())
    spent = _spend([(d.rho, d.laplace) for d in debits if not d.exact])
    return BudgetReadout(dataset.id, group, tuple(members), Ledger(budget, spent), debits,
                         _costs(session, dataset.id, plugins))


# -- pool authorizations (issue 40) ----------------------------------------------------------


def ledger_key(locked: LockedLedger) -> str:
    """The ledger's name in a pool authorization (``group:<id>`` or ``dataset:<id>``)."""
    return (f"group:{locked.group.id}" if locked.group is not None
            else f"dataset:{locked.dataset_id}")


def charge_authorization(
    session: Session, actor: Principal, locked: LockedLedger, *, authorization_id: int,
    pool_id: str, benchmark_id: int, datasets: Sequence[int], release: ReleaseSpec,
    now: datetime,
) -> tuple[PrivacyDebit, int]:
    """Charge one pool authorization's release to one locked ledger, once for all of the pool's
    ``datasets`` on it (one set of patients pays once per release), before any noise is drawn;
    log it (``privacy.debit`` naming the authorization, the datasets, the rho, the ledger's
    budget and its spend after) and return the debit and its event's sequence number, in the
    caller's transaction (not committed here). :class:`PrivacyBudgetExceededError` when it does
    not fit, before anything is written."""
    cost = release.loss
    after = locked.ledger.after_loss(cost, f"pool {pool_id} would overspend {locked.name}'s")
    exact = cost.empty
    event = append_event(
        session, actor_id=actor.user_id, action="privacy.debit", entity_type="dataset",
        entity_id=datasets[0],
        payload={
            "dataset_id": datasets[0],
            "datasets": list(datasets),
            "ledger": ledger_key(locked),
            "budget_group": None if locked.group is None else locked.group.name,
            "budget_group_id": None if locked.group is None else locked.group.id,
            "pool_authorization_id": pool_id,
            "benchmark_id": benchmark_id,
            "mechanism": "exact" if exact else release.mechanism,
            "exact": exact,
            "rho": release.rho,
            **({"laplace": list(cost.laplace)} if cost.laplace else {}),
            "epsilon": None if exact else release.epsilon,
            "delta": None if exact or release.mechanism == "laplace" else release.delta,
            **after.payload(),
        },
        now=now)
    debit = PrivacyDebit(
        dataset_id=datasets[0], budget_group_id=None if locked.group is None else locked.group.id,
        benchmark_id=benchmark_id, result_id=None, pooled_release_id=None,
        pool_authorization_id=authorization_id, exact=exact, rho=release.rho,
        laplace=list(cost.laplace) or None,
        epsilon=None if exact else release.epsilon,
        delta=None if exact or release.mechanism == "laplace" else release.delta,
        audit_seq=event.seq, created_at=now)
    session.add(debit)
    return debit, event.seq
