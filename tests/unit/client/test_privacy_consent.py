"""A hospital consents knowingly to what a benchmark's runs will publish (issue 25): before it
asks to join a benchmark with a dataset, or approves the benchmark's invitation, it reads what
each run's release costs of the dataset's privacy budget and how much is left."""

from __future__ import annotations

import json
import math
from pathlib import Path

from sealbench.benchmarks.brats.definition import shipped_definition
from sealbench.benchmarks.brats.plugin import pin_of
from sealbench.benchmarks.release import Column, ReleaseSpec, rho_of
from sealbench.client.runs.inbox import privacy_cost
from sealbench.server.schemas import BenchmarkPublic, DatasetBudget
from tests.unit.client.test_cli_participation import IMAGE, Cli, _benchmark, _dataset, cli

__all__ = ["cli"]  # the fixture, re-used


def test_cost_line_says_epsilon_what_is_left_and_how_many_runs() -> None:
    bench = BenchmarkPublic.model_construct(id=3, name="brats", version="1")
    budget = DatasetBudget.model_construct(
        dataset_id=9, budget_epsilon=10.0, budget_delta=1e-6, remaining_epsilon=10.0,
        remaining_rho=rho_of(10.0, 1e-6))
    line = privacy_cost(bench, ReleaseSpec((Column("dice", 0.0, 1.0),)), budget)
    runs = math.floor(rho_of(10.0, 1e-6) / rho_of(1.0, 1e-6))
    assert "costing epsilon 1 at delta 1e-06" in line and f"about {runs} such releases" in line
    assert "dataset 9 has epsilon 10 of 10 left" in line
    assert "rho" not in line  # a hospital reads epsilon (issue 45 part 3)
    exact = privacy_cost(bench, ReleaseSpec((Column("dice", 0.0, 1.0),), exact=True), budget)
    assert "EXACT (not differentially private)" in exact


def test_hospital_reads_the_cost_before_asking_to_join(cli: Cli, tmp_path: Path) -> None:
    bid = _benchmark(cli, tmp_path)
    dataset = _dataset(cli, tmp_path, bid)
    asked = cli("dataset", "associate", "--dataset", str(dataset), "--benchmark", str(bid),
                "--profile", "hospital")
    assert asked.exit_code == 0, asked.output
    text = " ".join(asked.output.split())
    assert "PRIVACY: each run of benchmark" in text and "costing epsilon 1 at delta 1e-06" in text
    assert text.index("PRIVACY") < text.index("pending")
    # and what the board will read once it joins: its dataset's size, its site counted
    plan = f"before you consent, what the board will read once dataset {dataset} joins:"
    assert plan in text and text.index(plan) < text.index("pending")
    assert "1 site x " in text and "expected 95% interval ±" in text
    # the model owner's consent spends no dataset's budget: no such line
    assert "PRIVACY" not in " ".join(cli("inbox", "--profile", "modelco").output.split())


def test_hospital_reads_the_cost_before_approving_an_invitation(cli: Cli, tmp_path: Path
                                                                 ) -> None:
    bid = _benchmark(cli, tmp_path)
    dataset = _dataset(cli, tmp_path, bid)
    invited = cli("dataset", "associate", "--dataset", str(dataset), "--benchmark", str(bid),
                  "--profile", "authority")
    assert invited.exit_code == 0, invited.output
    approved = cli("association", "approve", "--benchmark", str(bid), "--dataset", str(dataset),
                   "--profile", "hospital")
    assert approved.exit_code == 0, approved.output
    text = " ".join(approved.output.split())
    assert "PRIVACY: each run of benchmark" in text and text.index("PRIVACY") < text.index(
        "approved")
    assert "what the board will read once dataset" in text
    assert text.index("what the board will read") < text.index("approved")


def _exact_benchmark(cli: Cli, tmp_path: Path) -> int:
    """A benchmark of the small grid whose pin publishes exact figures."""
    definition = shipped_definition("brats-small").model_copy(
        update={"name": f"exact-{tmp_path.name}"})
    path = tmp_path / "exact.json"
    path.write_text(json.dumps({**definition.model_dump(mode="json"),
                                "plugin": f"{pin_of(definition.contract)}-exact"}))
    created = cli("benchmark", "create", "--definition", str(path), "--image-reference",
                  f"example/eval@{IMAGE}", "--image-digest", IMAGE, "--json",
                  "--profile", "authority")
    assert created.exit_code == 0, created.output
    bid = int(json.loads(created.stdout)["id"])
    assert cli("benchmark", "approve", str(bid), "--profile", "admin").exit_code == 0
    return bid


def _links(cli: Cli, bid: int) -> list[dict[str, object]]:
    listed = cli("association", "ls", "--benchmark", str(bid), "--json", "--profile", "authority")
    assert listed.exit_code == 0, listed.output
    return list(json.loads(listed.stdout))


def test_exact_benchmark_joined_only_with_explicit_consent(cli: Cli, tmp_path: Path) -> None:
    bid = _exact_benchmark(cli, tmp_path)
    dataset = _dataset(cli, tmp_path, bid)
    ask = ("dataset", "associate", "--dataset", str(dataset), "--benchmark", str(bid),
           "--profile", "hospital")
    refused = cli(*ask)
    text = " ".join(refused.output.split())
    assert refused.exit_code != 0
    assert "EXACT (not differentially private)" in text and "--consent-exact-release" in text
    assert "Nothing was sent" in text and _links(cli, bid) == []
    asked = cli(*ask, "--consent-exact-release")
    assert asked.exit_code == 0, asked.output
    [link] = _links(cli, bid)
    assert link["status"] == "pending" and link["exact_release_consent"] is True
    decide = " ".join(cli("inbox", "--profile", "authority").output.split())
    assert "each run publishes EXACT figures, with no privacy bound" in decide


def test_invitation_to_an_exact_benchmark_approved_only_with_consent(
    cli: Cli, tmp_path: Path
) -> None:
    bid = _exact_benchmark(cli, tmp_path)
    dataset = _dataset(cli, tmp_path, bid)
    invited = cli("dataset", "associate", "--dataset", str(dataset), "--benchmark", str(bid),
                  "--profile", "authority")
    assert invited.exit_code == 0, invited.output
    inbox = " ".join(cli("inbox", "--profile", "hospital").output.split())
    assert "approve with --consent-exact-release only if you accept that" in inbox
    approve = ("association", "approve", "--benchmark", str(bid), "--dataset", str(dataset),
               "--profile", "hospital")
    refused = cli(*approve)
    assert refused.exit_code != 0 and "--consent-exact-release" in refused.output
    assert [link["status"] for link in _links(cli, bid)] == ["pending"]
    approved = cli(*approve, "--consent-exact-release")
    assert approved.exit_code == 0, approved.output
    [link] = _links(cli, bid)
    assert link["status"] == "approved" and link["exact_release_consent"] is True
