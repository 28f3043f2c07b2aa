"""Privacy budget wire types (issue 25): the budget a data owner sets when registering a dataset,
and what ``GET /api/v1/datasets/{id}/budget`` answers (budget, spend, remaining, every debit,
and what one release of each associated benchmark costs).

Budgets are stated as (epsilon, delta) for people; the registry's ledger adds up zCDP rho
(``rho``-zCDP is ``(rho + 2*sqrt(rho*ln(1/delta)), delta)``-DP, see
:mod:`sealbench.benchmarks.release`), so every figure also carries its rho.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import Field

from sealbench.server.schemas.common import WireModel

__all__ = [
    "DEFAULT_BUDGET_DELTA",
    "DEFAULT_BUDGET_EPSILON",
    "MAX_BUDGET_DELTA",
    "MAX_BUDGET_EPSILON",
    "BudgetDebitPublic",
    "DatasetBudget",
    "ReleaseCostPublic",
]

#: A dataset's lifetime privacy budget unless its owner sets another: epsilon 10 at delta 1e-6.
#: Why: a benchmark's default release costs epsilon 1 at delta 1e-6
#: (``sealbench.benchmarks.release.DEFAULT_EPSILON``), and Gaussian releases compose exactly
#: (rho adds, read on the exact Gaussian curve: issue 41), so this budget holds 60 such releases
#: (60 compose to epsilon 9.91 at delta 1e-6, 61 to 10.004): enough for a dataset to evaluate a few
#: dozen models across its benchmarks, while the lifetime loss about any one patient stays a
#: stated, bounded epsilon. An owner expecting more runs sets a larger budget knowingly.
DEFAULT_BUDGET_EPSILON: Final = 10.0
#: The delta at which :data:`DEFAULT_BUDGET_EPSILON` is read (the per-release default's delta;
#: far below one over any dataset's case count).
DEFAULT_BUDGET_DELTA: Final = 1e-6
#: Largest budget epsilon the registry accepts: beyond it a budget bounds nothing.
MAX_BUDGET_EPSILON: Final = 1000.0
#: Largest budget delta the registry accepts (delta must stay well below 1 / cases).
MAX_BUDGET_DELTA: Final = 0.01


class BudgetDebitPublic(WireModel):
    """One release charged to the ledger: a site's own (per-site, ``result_id``) or a TEE-pooled
    one (``pool_id``, and ``pooled_release_id`` once its release was accepted); ``audit_seq`` is
    the ``privacy.debit`` event of the transparency log that records it (its inclusion proof is
    ``GET /api/v1/audit/inclusion?seq=...``). A run in a benchmark that pools in the TEE is
    charged twice: its own release when its result is accepted, and the pooled release it
    joins when a pool over it is authorized (issue 41)."""

    release: Literal["per-site", "pooled"] = Field(
        description="which release this debit paid for: 'per-site' (the site's own release, "
        "result_id) or 'pooled' (a TEE-pooled release over several sites, pool_id)")
    result_id: int | None = Field(description="the result whose release this is (None: a "
                                  "TEE-pooled release's debit)")
    pooled_release_id: int | None = Field(
        default=None, description="the TEE-pooled release this debit paid for: the release its "
        "pool authorization produced (None until one was accepted), or, for releases submitted "
        "before pool authorizations (issue 27), the release that included the dataset")
    pool_authorization_id: int | None = Field(
        default=None, description="the pool authorization that debited the ledger before its "
        "aggregator could draw (issue 40): one debit per ledger and authorization")
    pool_id: str | None = Field(
        default=None, description="that authorization's pool id (what 'benchmark pool' printed "
        "and the debit's log event names)")
    dataset_id: int
    benchmark_id: int
    exact: bool = Field(description="an exact (non-private) release: no rho, epsilon or delta")
    rho: float | None
    laplace: tuple[float, ...] = Field(
        default=(), description="the pure epsilons of the release's Laplace mechanisms (issue "
        "41; rho is then its Gaussian part alone, None when it has none)")
    epsilon: float | None
    delta: float | None
    audit_seq: int
    created_at: datetime


class ReleaseCostPublic(WireModel):
    """What one release of a benchmark the dataset is associated with costs, from the
    benchmark plug-in's declared release (``epsilon_at_budget_delta``: the same rho read at the
    budget's delta). ``releases_left``: how many more such releases the remaining budget
    holds (None for an exact release, which costs no rho)."""

    benchmark_id: int
    benchmark_name: str
    benchmark_version: str
    association: Literal["pending", "approved"]
    exact: bool
    rho: float | None
    epsilon: float | None
    delta: float | None
    epsilon_at_budget_delta: float | None
    releases_left: int | None


class DatasetBudget(WireModel):
    """A dataset's privacy budget and its spend. ``group``: the budget group whose ledger it
    shares (then ``datasets`` lists every dataset of the group, and ``debits`` are the group's).
    ``spent_epsilon`` and ``remaining_epsilon`` read the spent and the remaining rho at
    ``budget_delta``."""

    dataset_id: int
    group: str | None
    datasets: tuple[int, ...]
    budget_epsilon: float
    budget_delta: float
    budget_rho: float
    spent_rho: float
    spent_epsilon: float
    remaining_rho: float
    remaining_epsilon: float
    releases: int = Field(description="accepted private releases (exact ones not counted)")
    exact_releases: int
    debits: tuple[BudgetDebitPublic, ...]
    costs: tuple[ReleaseCostPublic, ...]
