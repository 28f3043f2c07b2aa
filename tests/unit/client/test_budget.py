"""A dataset's privacy budget from the client's side: set at registration (``dataset register
--budget-epsilon/--budget-delta/--budget-group``), read with ``dataset budget`` (a table, or
``--json``) and the typed client, and an overspent result reported as such with its own hint."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from sealbench.benchmarks.release import rho_of
from sealbench.client.cli import app
from sealbench.client.errors import PrivacyBudgetExceeded, ResultRejectedError
from sealbench.client.registry.api import RegistryClient
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import DatasetCreate, ResultCreate

Cli = Callable[..., Result]


@pytest.fixture
def cli(runner: CliRunner, cli_home: Path, live_registry: Any) -> Cli:
    for name, token in live_registry.tokens.items():
        added = runner.invoke(app, ["profile", "add", name, "--server", live_registry.url,
                                    "--token", token, "--no-use",
                                    "--log-key", live_registry.log_key])
        assert added.exit_code == 0, added.output

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args))

    return run


@pytest.fixture
def prepared(cli: Cli, tmp_path: Path) -> Path:
    """One small synthetic case, prepared, and the hospital's result key."""
    raw, out = tmp_path / "raw", tmp_path / "prepared"
    assert cli("dataset", "synthesize", str(raw), "--cases", "1", "--definition", "brats-small",
               "--first-seed", "4242").exit_code == 0
    done = cli("dataset", "prepare", str(raw), str(out), "--definition", "brats-small", "--profile",
               "hospital")
    assert done.exit_code == 0, done.output
    assert cli("keys", "init", "--profile", "hospital").exit_code == 0
    return out


def test_register_with_a_budget_group_and_read_the_budget(cli: Cli, prepared: Path) -> None:
    first = cli("dataset", "register", str(prepared), "--name", "cohort-a", "--budget-epsilon",
                "5", "--budget-delta", "1e-7", "--budget-group", "cohort", "--profile",
                "hospital")
    assert first.exit_code == 0, first.output
    assert "privacy budget: epsilon 5 at delta 1e-07 (shared by budget group cohort)" in (
        " ".join(first.output.split()))
    refused = cli("dataset", "register", str(prepared), "--name", "cohort-b",
                  "--budget-epsilon", "6", "--budget-group", "cohort", "--profile", "hospital")
    assert refused.exit_code == 4, refused.output
    assert "budget group cohort has the budget epsilon 5 at delta 1e-07" in (
        " ".join(refused.output.split()))
    joined = cli("dataset", "register", str(prepared), "--name", "cohort-c", "--budget-group",
                 "cohort", "--json", "--profile", "hospital")
    assert joined.exit_code == 0, joined.output
    did = json.loads(joined.stdout)["id"]
    shown = cli("dataset", "budget", str(did), "--json", "--profile", "modelco")
    assert shown.exit_code == 0, shown.output
    budget = json.loads(shown.stdout)
    assert (budget["group"], budget["budget_epsilon"], budget["budget_delta"]) == (
        "cohort", 5.0, 1e-7)
    assert len(budget["datasets"]) == 2 and did in budget["datasets"]
    assert (budget["spent_epsilon"], budget["releases"], budget["debits"]) == (0.0, 0, [])
    assert math.isclose(budget["remaining_rho"], rho_of(5.0, 1e-7))
    table = " ".join(cli("dataset", "budget", str(did), "--profile", "hospital").output.split())
    assert f"privacy budget of dataset {did}, budget group cohort" in table
    for row in ("budget", "spent", "remaining", "releases", "0 releases"):
        assert row in table
    assert "rho" not in table  # a hospital reads epsilon; the zCDP figures are in --json


def test_unusable_budget_refused_before_anything_is_sent(cli: Cli, prepared: Path) -> None:
    bad = cli("dataset", "register", str(prepared), "--name", "bad", "--budget-epsilon", "-1",
              "--profile", "hospital")
    assert bad.exit_code == 3, bad.output
    assert "budget_epsilon" in bad.output
    assert "bad" not in cli("dataset", "ls", "--profile", "hospital").output


def test_register_help_explains_the_budget_options(cli: Cli) -> None:
    shown = cli("dataset", "register", "--help")
    assert shown.exit_code == 0
    text = " ".join(shown.output.split())
    for option in ("--budget-epsilon", "--budget-delta", "--budget-group"):
        assert option in text
    assert "zCDP" in text and "share cases" in text


def test_dataset_budget_through_the_typed_client(api: dict[str, RegistryClient]) -> None:
    created = api["hospital"].register_dataset(DatasetCreate(
        name="typed", digest=sha256_digest(b"typed"), case_count=4, budget_epsilon=2.0))
    budget = api["modelco"].dataset_budget(created.id)
    assert (budget.dataset_id, budget.group, budget.datasets) == (created.id, None,
                                                                  (created.id,))
    assert (budget.budget_epsilon, budget.budget_delta) == (2.0, 1e-6)
    assert math.isclose(budget.remaining_epsilon, 2.0) and budget.costs == ()


def test_overspend_is_reported_as_privacy_budget_exceeded() -> None:
    body = {"code": "privacy_budget_exceeded",
            "message": "this release would overspend dataset 3's privacy budget"}

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json=body)

    http = httpx.Client(base_url="http://registry.test", transport=httpx.MockTransport(refuse))
    client = RegistryClient(http, "tok", sleep=lambda _s: None)
    submission = ResultCreate(benchmark_id=1, dataset_id=3, model_id=1, summary={},
                              sealed_result_digest=sha256_digest(b"r"), attestation_token="t")
    with pytest.raises(PrivacyBudgetExceeded) as info:
        client.submit_result(submission)
    assert isinstance(info.value, ResultRejectedError) and info.value.exit_code == 4
    assert "overspend" in str(info.value) and "dataset budget" in info.value.hint


def test_register_prints_exactly_what_the_registry_receives(cli: Cli, prepared: Path) -> None:
    """The hospital sees the request before it leaves (stderr under --json: stdout stays the
    answer); it holds counts and the grid, no value of a case."""
    done = cli("dataset", "register", str(prepared), "--name", "shown", "--json", "--profile",
               "hospital")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["name"] == "shown"
    shown = done.stderr[done.stderr.index("the registry will receive exactly this:"):]
    body = json.loads(shown[shown.index("{"):shown.rindex("}") + 1])
    assert body["name"] == "shown" and body["case_count"] == 1
    preparation = body["statistics"]["preparation"]
    assert preparation["version"] == 2 and "volumes" not in json.dumps(preparation)


def test_statistics_of_an_old_preparation_are_not_sent(cli: Cli, prepared: Path) -> None:
    """A dataset prepared before statistics were made private (statistics.json version 1 listed
    per-case volumes) is refused before anything is sent, with what to do."""
    stats = prepared / "data" / "statistics.json"
    doc = json.loads(stats.read_text())
    stats.write_text(json.dumps({**doc, "version": 1, "tumour_volumes_mm3": [1234.5]}))
    refused = cli("dataset", "register", str(prepared), "--name", "old", "--profile",
                  "hospital")
    assert refused.exit_code != 0
    text = " ".join(refused.output.split())
    assert "version 1" in text and "prepare the dataset again" in text
    assert "the registry will receive" not in text
