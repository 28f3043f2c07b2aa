"""What waits for the caller (``sealbench inbox``): the registry's inbox (decisions, pending
requests, benchmarks to approve, approved evaluations with their latest verified result)
merged with what only this machine knows, its run records: an approved evaluation with no
verified result is *to run*, or *to open and submit* when a run of it succeeded here, or
*running* while a run is recorded as started. :func:`merge` is pure; each item carries the
command that acts on it (runnable as it is; for a decision, the approval). Items of a benchmark
that accepts EXPERIMENTAL (confidential-GPU preview) images are marked (``experimental``, and
:data:`EXPERIMENTAL_MARK` in the text), and :func:`consent_warning` is the line the owners'
approval and association commands print before they consent to such a benchmark. A decision on a
dataset says what each run will publish about its cases (the release's privacy loss per run, or
EXACT figures, whose approval takes ``--consent-exact-release``). An asset of the caller's whose
key grants lag its approvals is listed as *policy sync needed*, with the command (issue 29).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sealbench.client.runs.records import RunRecord
from sealbench.contract.privacy_loss import PrivacyLoss
from sealbench.server.schemas import (
    BenchmarkPublic,
    DatasetBudget,
    GrantsStatus,
    Inbox,
    InboxEvaluation,
    InboxLink,
    ReleaseTerms,
)

if TYPE_CHECKING:
    from sealbench.benchmarks.release import ReleaseSpec

__all__ = ["EXPERIMENTAL_MARK", "Action", "InboxItem", "InboxView", "consent_warning", "merge",
           "privacy_cost", "release_text"]

#: Marks an inbox item of a benchmark that accepts EXPERIMENTAL images.
EXPERIMENTAL_MARK = "[EXPERIMENTAL GPU images]"


def consent_warning(benchmark: BenchmarkPublic) -> str | None:
    """The warning an owner reads before approving or joining ``benchmark`` when it accepts
    EXPERIMENTAL (confidential-GPU preview) images; None when it accepts STABLE images only."""
    if not benchmark.accept_experimental:
        return None
    return (f"WARNING: benchmark {benchmark.name} {benchmark.version} (#{benchmark.id}) accepts "
            "EXPERIMENTAL images: your keys will also be released to its image on Confidential "
            "Space's confidential-GPU preview (not STABLE; fewer guarantees, may change). "
            "Approve only if you accept that.")

#: The most releases :func:`_left` counts.
_MOST: int = 100_000


def _left(budget: DatasetBudget, cost: PrivacyLoss) -> int:
    """How many more releases of ``cost`` the dataset's budget holds, one after another: the
    ledger's debits (their Gaussian rho and Laplace epsilons) composed with k such costs, read
    at the budget's delta, as the registry's ledger reads them (issue 41)."""
    if cost.empty:
        return 0
    debits = [d for d in getattr(budget, "debits", ()) if not d.exact]
    if not cost.laplace and not any(d.laplace for d in debits):
        # Gaussians only: rho composes exactly, what is left is the remaining rho
        return max(math.floor(budget.remaining_rho / cost.rho + 1e-9), 0)
    spent = PrivacyLoss.total(PrivacyLoss(rho=d.rho or 0.0, laplace=tuple(d.laplace))
                              for d in debits)

    def fits(k: int) -> bool:
        return PrivacyLoss(rho=spent.rho + k * cost.rho,
                           laplace=spent.laplace + cost.laplace * k).fits(
            budget.budget_epsilon, budget.budget_delta)

    if not fits(1):
        return 0
    low, high = 1, 2
    while high < _MOST and fits(high):
        low, high = high, min(2 * high, _MOST)
    if fits(high):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _noise(loss: PrivacyLoss) -> str:
    """A release's noise in a data owner's words: epsilon only (the zCDP rho that the
    registry's ledger adds up is for ``dataset budget --json``)."""
    parts = ["Gaussian noise"] if loss.rho else []
    if loss.laplace:
        parts.append("Laplace noise at epsilon " + " + ".join(f"{e:g}" for e in loss.laplace))
    return " and ".join(parts)


def privacy_cost(benchmark: BenchmarkPublic, spec: ReleaseSpec | None, budget: DatasetBudget,
                 pooled: ReleaseSpec | None = None) -> str:
    """The line a data owner reads before consenting to ``benchmark`` for a dataset: what each
    run's published release costs of the dataset's privacy budget (``spec``: the benchmark
    plug-in's declared release) and what is left; an exact release is said to be one.
    ``pooled``: the benchmark pools in the TEE and this is its pooled release (issue 41): each
    pool over the run charges it too, so the line states both and what a run pooled once costs
    in all (zCDP adds up). ``spec`` None: the benchmark's sites publish no release of their
    own (a ``-pool`` pin), so a run costs only the pooled releases that cover it."""

    name = f"benchmark {benchmark.name} {benchmark.version} (#{benchmark.id})"
    left = (f"dataset {budget.dataset_id} has epsilon {budget.remaining_epsilon:.3g} of "
            f"{budget.budget_epsilon:g} left (at delta {budget.budget_delta:g})")

    def each(release: ReleaseSpec) -> str:
        loss = release.loss
        if release.exact:
            return "EXACT (not differentially private) figures"
        if loss.laplace:  # a Laplace release, or one split between a headline and the rest
            return (f"epsilon {loss.epsilon_at(budget.budget_delta):.3g} at delta "
                    f"{budget.budget_delta:g} ({_noise(loss)})")
        return f"epsilon {release.epsilon:g} at delta {release.delta:g}"

    if spec is None:
        if pooled is None:
            return f"PRIVACY: {name} publishes no release of your cases; {left}."
        how_many = ("" if pooled.loss.empty
                    else f": about {_left(budget, pooled.loss)} such pools")
        return (f"PRIVACY:{' EXACT' if pooled.exact else ''} each run of {name} publishes no "
                "release of its own (you read your exact figures locally with 'result "
                "open'); it joins the benchmark's pooled release inside the TEE, charged "
                f"each time a pool covers it: {each(pooled)}; {left}{how_many}.")
    if pooled is None:
        if spec.exact:
            return (f"PRIVACY: {name} publishes EXACT (not differentially private) figures of "
                    f"your cases; {left}.")
        runs = _left(budget, spec.loss)
        return (f"PRIVACY: each run of {name} publishes a differentially private release "
                f"costing {each(spec)}; {left}: about {runs} such releases.")
    cost = spec.loss + pooled.loss
    parts = f" ({_noise(cost)})" if cost.laplace else ""
    total = ("" if cost.empty else
             f"; a run pooled once costs epsilon {cost.epsilon_at(budget.budget_delta):.3g} "
             f"at delta {budget.budget_delta:g} in all{parts}: 2 releases charged")
    how_many = "" if cost.empty else f": about {_left(budget, cost)} such runs"
    exact = " EXACT" if spec.exact or pooled.exact else ""
    return (f"PRIVACY:{exact} each run of {name} publishes its own release, {each(spec)}, and "
            "joins the benchmark's pooled release inside the TEE, charged again each time a "
            f"pool covers it: {each(pooled)}{total}; {left}{how_many}.")


Action = Literal["decide", "policy sync needed", "approve benchmark", "run", "submit",
                 "running", "waiting"]
#: The order items are listed in: what only the caller can do first, waiting last.
_ORDER: dict[Action, int] = {
    "decide": 0, "policy sync needed": 1, "approve benchmark": 2, "submit": 3, "run": 4,
    "running": 5, "waiting": 6,
}


@dataclass(frozen=True)
class InboxItem:
    action: Action
    what: str
    command: str | None
    #: The benchmark accepts EXPERIMENTAL (confidential-GPU preview) images.
    experimental: bool = False


@dataclass(frozen=True)
class InboxView:
    items: tuple[InboxItem, ...]
    #: Approved evaluations of the caller's datasets that have a verified result.
    evaluated: int
    truncated: bool

    @property
    def to_do(self) -> tuple[InboxItem, ...]:
        """Everything but what waits for someone else."""
        return tuple(i for i in self.items if i.action != "waiting")

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [
                {"action": i.action, "what": i.what, "command": i.command,
                 "experimental": i.experimental}
                for i in self.items
            ],
            "evaluated": self.evaluated,
            "truncated": self.truncated,
        }


def _asset(link: InboxLink) -> str:
    a = link.association
    version = "" if link.asset_version is None else f" {link.asset_version}"
    return f"{a.asset_kind} {link.asset_name}{version} (#{a.asset_id})"


def _benchmark(link: InboxLink) -> str:
    mark = f" {EXPERIMENTAL_MARK}" if link.benchmark_accept_experimental else ""
    return (f"benchmark {link.benchmark_name} {link.benchmark_version} "
            f"(#{link.association.benchmark_id}){mark}")


def release_text(terms: ReleaseTerms | None) -> str:
    """What each run publishes about a dataset's cases, in a few words."""
    if terms is None:
        return "a release the registry cannot describe (its plug-in is not installed there)"
    if terms.exact:
        return "EXACT figures, with no privacy bound"
    if terms.delta is None:  # a pure-epsilon (Laplace) release
        return f"a private release costing epsilon {terms.epsilon:g} (pure, no delta)"
    return f"a private release costing epsilon {terms.epsilon:g} at delta {terms.delta:g}"


def _decision(link: InboxLink) -> InboxItem:
    a = link.association
    if a.initiator_role == "asset_owner":
        what = f"{_asset(link)} of user {link.asset_owner_id} asks to join {_benchmark(link)}"
    else:
        what = f"{_benchmark(link)} invites your {_asset(link)}"
    target = f"--benchmark {a.benchmark_id} --{a.asset_kind} {a.asset_id}"
    how = "approve or reject"
    if a.asset_kind == "dataset":
        what += f" (each run publishes {release_text(link.release)})"
        if (link.release is not None and link.release.exact
                and a.initiator_role == "benchmark_owner"):
            how = "approve with --consent-exact-release only if you accept that, or reject"
    return InboxItem("decide", f"{what}: {how}",
                     f"sealbench association approve {target}",
                     link.benchmark_accept_experimental)


def _waiting(link: InboxLink) -> InboxItem:
    if link.association.initiator_role == "asset_owner":
        who = f"the benchmark's owner (user {link.benchmark_owner_id})"
        what = f"your request: {_asset(link)} to join {_benchmark(link)}"
    else:
        who = f"the {link.association.asset_kind}'s owner (user {link.asset_owner_id})"
        what = f"your invitation of {_asset(link)} to {_benchmark(link)}"
    return InboxItem("waiting", f"{what}; waits for {who}", None,
                     link.benchmark_accept_experimental)


def _evaluation(e: InboxEvaluation, records: list[RunRecord]) -> InboxItem:
    item = _evaluation_item(e, records)
    if not e.benchmark_accept_experimental:
        return item
    return InboxItem(item.action, item.what, item.command, True)


def _evaluation_item(e: InboxEvaluation, records: list[RunRecord]) -> InboxItem:
    mark = f" {EXPERIMENTAL_MARK}" if e.benchmark_accept_experimental else ""
    what = (f"dataset {e.dataset_name} (#{e.dataset_id}) x model {e.model_name} "
            f"{e.model_version} (#{e.model_id}) in benchmark {e.benchmark_name} "
            f"{e.benchmark_version} (#{e.benchmark_id}){mark}")
    run = (f"sealbench run --benchmark {e.benchmark_id} --dataset {e.dataset_id} "
           f"--model {e.model_id}")
    mine = [r for r in records if (r.benchmark_id, r.dataset_id, r.model_id)
            == (e.benchmark_id, e.dataset_id, e.model_id)]
    unsent = [r for r in mine if r.status == "succeeded" and r.result_id is None]
    if unsent:
        latest = unsent[-1]
        return InboxItem("submit", f"{what}: run {latest.run_id} succeeded, result not submitted",
                         f"sealbench result open {latest.run_id} && "
                         f"sealbench result submit {latest.run_id}")
    if mine and mine[-1].active:
        return InboxItem("running", f"{what}: run {mine[-1].run_id} started "
                         f"{mine[-1].started_at:%Y-%m-%d %H:%M} UTC and has not finished "
                         "(if it died, run it again with --force)",
                         f"{run} --force")
    if mine and mine[-1].status == "failed":
        return InboxItem("run", f"{what}: the last run ({mine[-1].run_id}) failed", run)
    if mine and mine[-1].status == "interrupted":
        return InboxItem("run", f"{what}: the last run ({mine[-1].run_id}) was interrupted "
                         "before it finished", run)
    return InboxItem("run", f"{what}: not evaluated yet", run)


def _sync_needed(status: GrantsStatus) -> InboxItem:
    when = ("never reported" if status.synced_at is None
            else f"last synced {status.synced_at:%Y-%m-%d %H:%M} UTC")
    return InboxItem(
        "policy sync needed",
        f"{status.asset_kind} {status.asset_name} (#{status.asset_id}): its approvals changed "
        f"since its key's grants were written ({when}); until you sync, a withdrawn or rejected "
        "association's workloads (its benchmark's aggregator included) are still released its "
        f"key, and newly approved runs are refused it ({status.required_count} workloads "
        "approved now)",
        status.command)


def merge(inbox: Inbox, records: Iterable[RunRecord]) -> InboxView:
    """The registry's ``inbox`` and this profile's run ``records`` as one to-do list (see the
    module docstring); evaluations with a verified result are counted, not listed."""
    ordered = sorted(records, key=lambda r: r.started_at)
    items = [_decision(link) for link in inbox.to_decide]
    items += [_sync_needed(status) for status in inbox.syncs_needed]
    items += [
        InboxItem("approve benchmark",
                  f"benchmark {b.name} {b.version} (#{b.id}) by user {b.owner_id} is pending",
                  f"sealbench benchmark approve {b.id}")
        for b in inbox.benchmarks_to_approve
    ]
    pending = [e for e in inbox.evaluations if e.result_id is None]
    items += [_evaluation(e, ordered) for e in pending]
    items += [_waiting(link) for link in inbox.awaiting_others]
    items.sort(key=lambda i: _ORDER[i.action])
    return InboxView(tuple(items), len(inbox.evaluations) - len(pending), inbox.truncated)
