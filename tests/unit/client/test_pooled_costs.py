"""What a hospital reads of a benchmark that pools in the TEE (issue 41, part 7's budget items):
the cost stated before it consents includes the pooled release each run joins, and its budget
table names each debit's release, per-site (the result) or pooled (pool and release ids), so
that '2 runs cost 4 releases' reads as the arithmetic it is."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from sealbench.benchmarks.release import Column, ReleaseSpec, epsilon_of, rho_of
from sealbench.client.cli.budget import _budget_tables, release_of
from sealbench.client.runs.inbox import privacy_cost
from sealbench.server.schemas import BenchmarkPublic, BudgetDebitPublic, DatasetBudget

SPEC = ReleaseSpec((Column("dice", 0.0, 1.0),))
AT = datetime(2026, 12, 7, 21, 0, tzinfo=UTC)


def _budget(**fields: Any) -> DatasetBudget:
    return DatasetBudget.model_construct(
        dataset_id=9, group=None, datasets=(9,), budget_epsilon=10.0, budget_delta=1e-6,
        remaining_epsilon=10.0, remaining_rho=rho_of(10.0, 1e-6), **fields)


def test_the_cost_before_consent_includes_the_pooled_release_a_run_joins() -> None:
    bench = BenchmarkPublic.model_construct(id=3, name="wdbc", version="1")
    alone = privacy_cost(bench, SPEC, _budget())
    assert "pooled" not in alone and "costing epsilon 1 at delta 1e-06" in alone
    line = privacy_cost(bench, SPEC, _budget(), SPEC)
    rho = 2 * rho_of(1.0, 1e-6)
    assert "joins the benchmark's pooled release inside the TEE" in line
    assert "charged again each time a pool covers it" in line
    assert f"a run pooled once costs epsilon {epsilon_of(rho, 1e-6):.3g}" in line
    assert "2 releases charged" in line
    assert f"about {math.floor(rho_of(10.0, 1e-6) / rho + 1e-9)} such runs" in line
    # fewer runs than a per-site release alone would allow: the pooled release is counted
    assert math.floor(rho_of(10.0, 1e-6) / rho + 1e-9) < math.floor(
        rho_of(10.0, 1e-6) / rho_of(1.0, 1e-6))
    exact = privacy_cost(bench, SPEC, _budget(), ReleaseSpec(SPEC.columns, exact=True))
    assert exact.startswith("PRIVACY: EXACT") and "EXACT (not differentially private)" in exact


def _debit(**fields: Any) -> BudgetDebitPublic:
    base = {"result_id": None, "dataset_id": 9, "benchmark_id": 3, "exact": False,
            "rho": rho_of(1.0, 1e-6), "epsilon": 1.0, "delta": 1e-6, "audit_seq": 1,
            "created_at": AT}
    return BudgetDebitPublic.model_validate({**base, **fields})


def test_the_budget_table_names_each_debit_s_release(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a table row per debit, no wrapped cells
    debits = (
        _debit(release="per-site", result_id=11, audit_seq=5),
        _debit(release="per-site", result_id=12, audit_seq=6),
        _debit(release="pooled", pool_authorization_id=1, pool_id="pool-3-1-00aa",
               pooled_release_id=4, audit_seq=7),
        _debit(release="pooled", pool_authorization_id=2, pool_id="pool-3-2-00bb",
               audit_seq=8),
    )
    assert [release_of(d) for d in debits] == [
        "per-site: result 11", "per-site: result 12", "pooled: release 4 (pool-3-1-00aa)",
        "pooled: not released yet (pool-3-2-00bb)"]
    _budget_tables(_budget(budget_rho=rho_of(10.0, 1e-6), spent_rho=4 * rho_of(1.0, 1e-6),
                           spent_epsilon=2.0, releases=4, exact_releases=0, debits=debits,
                           costs=()))
    text = " ".join(capsys.readouterr().out.split())
    assert "2 per-site releases and 2 pooled releases (4 in all)" in text
    for cell in ("per-site: result 11", "pooled: release 4 (pool-3-1-00aa)",
                 "pooled: not released yet (pool-3-2-00bb)"):
        assert cell in text, text


def _body(pin: str, aggregator: bool) -> Any:
    from sealbench.server.schemas import BenchmarkCreate

    return BenchmarkCreate.model_validate({
        "name": "b", "version": "1", "description": "d", "data_contract": {},
        "metrics_spec": {}, "metrics_version": pin,
        "image_reference": "registry.test/eval", "image_digest": "sha256:" + "1" * 64,
        **({"aggregator_image_digest": "sha256:" + "2" * 64} if aggregator else {})})


@pytest.mark.parametrize(("pin", "aggregator", "asked", "pinned"), [
    ("wdbc/1", True, None, "wdbc/1-pool"),  # pooling in the TEE: no per-site release
    ("wdbc/1", True, True, "wdbc/1"),  # the authority's explicit choice
    ("wdbc/1", False, None, "wdbc/1"),  # without an aggregator, per-site is all there is
    ("wdbc/1-exact", True, None, "wdbc/1-exact"),  # exact releases spend no budget
    ("wdbc/1-exact", True, False, "wdbc/1-exact-pool"),
    ("wdbc/1-pool", True, None, "wdbc/1-pool"),
])
def test_benchmark_create_pins_the_choice_of_per_site_releases(
        pin: str, aggregator: bool, asked: bool | None, pinned: str) -> None:
    from sealbench.client.registry.governance import with_site_releases

    assert str(with_site_releases(_body(pin, aggregator), asked).metrics_version) == pinned


@pytest.mark.parametrize(("pin", "aggregator", "asked", "words"), [
    ("wdbc/1", False, False, "needs a benchmark that pools in the TEE"),
    ("wdbc/1-pool", True, True, "publishes no per-site release"),
    ("brats-2023-gli/1-64x64x48-exact", True, False, "longer than a pin's version may be"),
])
def test_a_choice_that_cannot_hold_is_refused_before_anything_is_sent(
        pin: str, aggregator: bool, asked: bool, words: str) -> None:
    from sealbench.client.errors import ConfigError
    from sealbench.client.registry.governance import with_site_releases

    with pytest.raises(ConfigError, match=words):
        with_site_releases(_body(pin, aggregator), asked)


def test_the_cost_of_a_pooled_only_benchmark_names_only_its_pooled_release() -> None:
    bench = BenchmarkPublic.model_construct(id=3, name="wdbc", version="1")
    line = privacy_cost(bench, None, _budget(), SPEC)
    assert "publishes no release of its own" in line and "'result open'" in line
    assert "charged each time a pool covers it: epsilon 1 at delta 1e-06" in line
    assert f"about {math.floor(rho_of(10.0, 1e-6) / rho_of(1.0, 1e-6) + 1e-9)} such pools" in line


def _opened(pin: str, rule: str) -> Any:
    from sealbench.benchmarks.registry import load
    from sealbench.benchmarks.wdbc.data import load_wdbc
    from sealbench.benchmarks.wdbc.model import Prediction
    from sealbench.client.runs.result_open import _check_consistent
    from sealbench.contract.pin import BenchmarkPin
    from sealbench.contract.result import PerCaseResults, ResultSummary, WithheldSummary

    plugin = load(BenchmarkPin.parse(pin))
    cases = [plugin.score(c, Prediction(0.7)) for c in load_wdbc()[:40]]
    summary = ResultSummary(
        run_id="run-1", benchmark_id="1", metrics_version=plugin.ref, aggregates={},
        withheld=WithheldSummary(rule=rule, n_cases=40,  # type: ignore[arg-type]
                                 minimum=plugin.small_cell_minimum))
    per_case = PerCaseResults(
        run_id="run-1", benchmark_id="1", dataset_id="1", model_id="1", metrics_version=plugin.ref,
        image_digest="sha256:" + "1" * 64, cases=tuple(c.to_json() for c in cases))
    return _check_consistent(summary, per_case)


def test_result_open_reads_a_pooled_only_run_and_refuses_the_rule_elsewhere() -> None:
    """A hospital opening its run under a -pool pin sees its exact figures and a summary withheld
    for pooling; the same 'pooled' summary under a pin with per-site releases is not what its
    enclave writes (an operator who dropped the release), and 'result open' says so."""
    from sealbench.client.runs.result_open import ResultVerificationError

    benchmark, local, cases = _opened("wdbc/1-pool", "pooled")
    assert str(benchmark.ref) == "wdbc/1-pool" and len(cases) == 40 and local.n_cases == 40
    with pytest.raises(ResultVerificationError, match="withheld"):
        _opened("wdbc/1", "pooled")
