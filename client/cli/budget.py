"""``sealbench dataset budget`` and the budget options of ``sealbench dataset register``: a
dataset's lifetime privacy budget (issue 25), rendered from the registry's
``GET /datasets/{id}/budget``
(:meth:`~sealbench.client.registry.api.RegistryClient.dataset_budget`)."""

from __future__ import annotations

from typing import Annotated

import typer

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, plural, session, table
from sealbench.server.schemas import BudgetDebitPublic, DatasetBudget
from sealbench.server.schemas.budgets import DEFAULT_BUDGET_DELTA, DEFAULT_BUDGET_EPSILON

__all__ = ["BudgetDeltaOpt", "BudgetEpsilonOpt", "BudgetGroupOpt", "dataset_budget", "release_of"]

BudgetEpsilonOpt = Annotated[
    float | None,
    typer.Option(
        "--budget-epsilon",
        help="the dataset's lifetime privacy budget: the epsilon (read at --budget-delta) "
        "that all its published results together may spend. Each accepted result spends "
        "its benchmark's declared epsilon per release (1 by default; 'dataset budget' shows "
        "each benchmark's cost), adding up in zCDP, and the registry refuses a result that "
        f"would overspend. Default {DEFAULT_BUDGET_EPSILON:g} (about 60 releases of "
        "epsilon 1), or the group's with --budget-group. Set once, at registration",
        show_default=False),
]
BudgetDeltaOpt = Annotated[
    float | None,
    typer.Option(
        "--budget-delta",
        help=f"the delta of the budget (default {DEFAULT_BUDGET_DELTA:g}, or the group's; "
        "keep it far below 1 / cases)", show_default=False),
]
BudgetGroupOpt = Annotated[
    str | None,
    typer.Option(
        "--budget-group",
        help="a name of yours for datasets that share cases (the same patients): they spend "
        "one shared budget, set by the group's first dataset; a later one stating another "
        "budget is refused", show_default=False),
]


def _eps(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def release_of(d: BudgetDebitPublic) -> str:
    """Which release a debit paid for (issue 41): the site's own release of a result, or a
    TEE-pooled release (the pool's id, and the release once accepted)."""
    if d.release == "per-site":
        return f"per-site: result {d.result_id}"
    if d.pool_id is None:
        return ("pooled: release -" if d.pooled_release_id is None
                else f"pooled: release {d.pooled_release_id}")
    released = ("not released yet" if d.pooled_release_id is None
                else f"release {d.pooled_release_id}")
    return f"pooled: {released} ({d.pool_id})"


def _releases(b: DatasetBudget) -> str:
    """The private releases charged, per-site and pooled told apart, exact ones beside."""
    pooled = sum(1 for d in b.debits if not d.exact and d.release == "pooled")
    if not pooled:
        return plural(b.releases, "release")
    site = b.releases - pooled
    text = f"{plural(site, 'per-site release')} and {plural(pooled, 'pooled release')}"
    return text + (f" ({b.releases} in all)" if site else "")


def _budget_tables(b: DatasetBudget) -> None:
    group = "" if b.group is None else (
        f", budget group {b.group} (datasets {', '.join(map(str, b.datasets))})")
    exact = f" and {plural(b.exact_releases, 'exact release')}" if b.exact_releases else ""
    table(
        f"privacy budget of dataset {b.dataset_id}{group}",
        ("", "epsilon", "delta"),
        (("budget", f"{b.budget_epsilon:g}", f"{b.budget_delta:g}"),
         ("spent", _eps(b.spent_epsilon), f"{b.budget_delta:g}"),
         ("remaining", _eps(b.remaining_epsilon), f"{b.budget_delta:g}"),
         ("releases", _releases(b) + exact, "")),
    )
    if b.costs:
        table("cost of one release", ("benchmark", "name", "association", "epsilon", "delta",
                                      "releases left"),
              ((c.benchmark_id, f"{c.benchmark_name} {c.benchmark_version}", c.association,
                "exact (no noise)" if c.exact else _eps(c.epsilon),
                "-" if c.delta is None else f"{c.delta:g}",
                "-" if c.releases_left is None else c.releases_left) for c in b.costs))
    if b.debits:
        grouped = b.group is not None  # the dataset of each debit only matters in a group
        table("debits: each release charged (epsilon at the release's delta)",
              ("release", *(("dataset",) if grouped else ()), "benchmark", "epsilon",
               "log event", "when"),
              ((release_of(d), *((d.dataset_id,) if grouped else ()), d.benchmark_id,
                "exact" if d.exact else _eps(d.epsilon), d.audit_seq,
                d.created_at.strftime("%Y-%m-%d %H:%M")) for d in b.debits))


def dataset_budget(
    dataset: Annotated[int, typer.Argument(help="dataset id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> DatasetBudget:
    """The dataset's lifetime privacy budget (its budget group's, if in one): spent and
    remaining, as epsilon at the budget's delta (--json adds the zCDP figures that add up);
    every release charged to it with its transparency-log event, each named: a per-site release
    (the result's id) or a TEE-pooled release (its pool id and release id; a run in a
    benchmark that pools in the TEE is charged for its own release and for each pooled release
    it joins); and what one release of each benchmark it is associated with costs."""
    with session(profile) as s:
        budget = s.client.dataset_budget(dataset)
    emit_json(budget) if json_out else _budget_tables(budget)
    return budget
