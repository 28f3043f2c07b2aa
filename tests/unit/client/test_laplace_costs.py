"""The cost a data owner reads before consenting counts Laplace parts (issue 41 part 2): WDBC's
pooled release spends a Laplace epsilon on its AUROC beside the Gaussian breakdown; the line
states the whole loss and counts runs on the composed ledger, as the registry charges them."""

from __future__ import annotations

import re

from sealbench.benchmarks.release import Column, ReleaseSpec, rho_of
from sealbench.benchmarks.wdbc.summary import pooled_release_spec
from sealbench.client.runs.inbox import privacy_cost
from sealbench.contract.privacy_loss import PrivacyLoss
from sealbench.server.schemas import BenchmarkPublic, DatasetBudget
from sealbench.server.schemas.budgets import BudgetDebitPublic


def _budget(debits: tuple[BudgetDebitPublic, ...] = ()) -> DatasetBudget:
    return DatasetBudget.model_construct(
        dataset_id=9, budget_epsilon=10.0, budget_delta=1e-6, remaining_epsilon=10.0,
        remaining_rho=rho_of(10.0, 1e-6), debits=debits)


def _count(line: str, what: str) -> int:
    found = re.search(rf"about (\d+) such {what}", line)
    assert found, line
    return int(found.group(1))


NOTHING = PrivacyLoss()


def _fits(k: int, cost: PrivacyLoss, spent: PrivacyLoss = NOTHING) -> bool:
    return PrivacyLoss(rho=spent.rho + k * cost.rho,
                       laplace=spent.laplace + cost.laplace * k).fits(10.0, 1e-6)


def test_a_split_pooled_release_states_its_laplace_part_and_counts_on_the_composed_loss() -> None:
    bench = BenchmarkPublic.model_construct(id=3, name="wdbc", version="1-pool")
    pooled = pooled_release_spec()
    assert pooled.loss.laplace  # the AUROC headline
    line = privacy_cost(bench, None, _budget(), pooled)
    assert "Laplace noise at epsilon" in line and "rho" not in line, line
    pools = _count(line, "pools")
    assert _fits(pools, pooled.loss) and not _fits(pools + 1, pooled.loss)
    # counting the breakdown's rho alone would promise more pools than the budget holds
    assert pools < int(rho_of(10.0, 1e-6) / (pooled.rho or 1.0))


def test_a_laplace_spend_already_on_the_ledger_is_counted() -> None:
    bench = BenchmarkPublic.model_construct(id=3, name="brats", version="1")
    spec = ReleaseSpec((Column("dice", 0.0, 1.0),))
    spent = BudgetDebitPublic.model_construct(exact=False, rho=None, laplace=(4.0,))
    line = privacy_cost(bench, spec, _budget((spent,)))
    runs = _count(line, "releases")
    assert _fits(runs, spec.loss, PrivacyLoss(laplace=(4.0,)))
    assert not _fits(runs + 1, spec.loss, PrivacyLoss(laplace=(4.0,)))
    assert runs < 60  # the 60 an untouched budget holds
