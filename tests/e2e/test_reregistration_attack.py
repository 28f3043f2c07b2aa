"""Attack (issue 40, part 3): a hospital registers the cases it already registered again, under
other case ids and a new name, to get a fresh lifetime privacy budget for the same patients.

End to end through every role's CLI against a real registry process and the mock TEE, on real
WDBC cases: the hospital's first dataset runs the model and submits one release (one debit);
the same cases prepared again under renamed ids (another dataset digest) are refused when the
registration asks for a fresh budget, with the reason and nothing registered; registered
without one they land on the first dataset's ledger, spend included, and the CLI says so; a
release of the new dataset is charged to that one ledger, once, and the ledger is then spent
for both datasets; a third registration of some of the cases gets nothing either."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import epsilon_of
from tests.cli_world import Cli, cli_world, json_of, ok

ACCOUNTS = {
    "admin": ("admin@rereg.example", True),
    "authority": ("authority@rereg.example", False),
    "hospital": ("it@hospital.rereg.example", False),
    "lab": ("ml@lab.rereg.example", False),
}
MODEL = "wdbc_logreg"


@dataclass
class World:
    cli: Cli
    tmp: Path
    ids: dict[str, int]
    #: epsilon (at delta 1e-6) holding exactly two releases of the WDBC pin
    budget: float


def _renamed(raw: Path, out: Path, *, keep: int | None = None) -> Path:
    """``raw``'s cases with every case id renamed (the first ``keep`` rows only, when given)."""
    with (raw / "cases.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    body = rows[1:] if keep is None else rows[1:keep + 1]
    for i, row in enumerate(body):
        row[0] = f"again-{i:04d}"
    out.mkdir(parents=True)
    with (out / "cases.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([rows[0], *body])
    return out


def _enrol(world: World, prepared: Path, dataset: int) -> None:
    """Seal the dataset, have the authority approve it, sync both owners' key policies."""
    cli, b, d = world.cli, str(world.ids["b"]), str(dataset)
    ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", "hospital"))
    ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", "hospital"))
    ok(cli("association", "approve", "--benchmark", b, "--dataset", d, "--profile",
           "authority"))
    ok(cli("policy", "sync", "--dataset", d, "--profile", "hospital"))
    ok(cli("policy", "sync", "--model", str(world.ids["model"]), "--profile", "lab"))


def _run_and_submit(world: World, dataset: int) -> None:
    cli, b = world.cli, str(world.ids["b"])
    ran = ok(cli("run", "--benchmark", b, "--dataset", str(dataset), "--all-approved",
                 "--tee", "mock", "--profile", "hospital"))
    assert ran.output.count("succeeded") == 1, ran.output
    runs = json_of(cli("result", "ls", "--json", "--profile", "hospital"))
    [record] = [r for r in runs if r["dataset_id"] == dataset]
    submitted = ok(cli("result", "submit", record["run_id"], "--profile", "hospital"))
    assert "attestation verified" in submitted.output, submitted.output


def _budget(world: World, dataset: int) -> dict[str, object]:
    shown: dict[str, object] = json_of(world.cli("dataset", "budget", str(dataset), "--json",
                                                 "--profile", "authority"))
    return shown


def _datasets(world: World) -> list[object]:
    listed: list[object] = json_of(world.cli("dataset", "ls", "--json", "--profile", "admin"))
    return listed


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    plugin = PluginRegistry().get("wdbc")
    rho = plugin.release_spec.rho
    assert rho is not None
    with cli_world(tmp_path_factory.mktemp("rereg"), ACCOUNTS) as base:
        world = World(base.cli, base.tmp, {}, epsilon_of(2 * rho, 1e-6))
        cli, tmp, ids = world.cli, world.tmp, world.ids
        ids["b"] = int(json_of(cli("benchmark", "create", "--tee", "mock", "--definition",
                                   "wdbc", "--json", "--profile", "authority"))["id"])
        b = str(ids["b"])
        ok(cli("benchmark", "approve", b, "--profile", "admin"))
        onnx = tmp / f"{MODEL}.onnx"
        onnx.write_bytes(plugin.model_bytes(MODEL))
        ids["model"] = int(json_of(cli("model", "register", str(onnx), "--name", MODEL,
                                       "--benchmark", b, "--json", "--profile", "lab"))["id"])
        ok(cli("model", "seal", str(onnx), "--model", str(ids["model"]), "--profile", "lab"))
        ok(cli("model", "associate", "--model", str(ids["model"]), "--benchmark", b,
               "--profile", "lab"))
        ok(cli("association", "approve", "--benchmark", b, "--model", str(ids["model"]),
               "--profile", "authority"))
        raw, prepared = tmp / "raw", tmp / "prepared"
        plugin.write_demo_dataset(raw, 40, seed=0)
        ok(cli("keys", "init", "--profile", "hospital"))
        ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
               "--profile", "hospital"))
        ids["first"] = int(json_of(cli(
            "dataset", "register", str(prepared), "--name", "site-a", "--benchmark", b,
            "--budget-epsilon", repr(world.budget), "--json", "--yes",
            "--profile", "hospital"))["id"])
        _enrol(world, prepared, ids["first"])
        _run_and_submit(world, ids["first"])
        yield world


def test_reregistering_same_cases_gets_no_fresh_budget(world: World) -> None:
    cli, tmp, ids = world.cli, world.tmp, world.ids
    b, first = str(ids["b"]), ids["first"]
    spent_once = _budget(world, first)
    assert spent_once["releases"] == 1 and spent_once["group"] is None
    # The same 40 cases under other ids: another prepared dataset, another digest.
    again = tmp / "prepared-again"
    ok(cli("dataset", "prepare", str(_renamed(tmp / "raw", tmp / "raw-again")), str(again),
           "--benchmark", b, "--profile", "hospital"))
    before = _datasets(world)

    # Asking for a fresh (larger) budget for them: refused, the reason named, nothing stored.
    fresh = cli("dataset", "register", str(again), "--name", "site-a-fresh", "--benchmark", b,
                "--budget-epsilon", "100", "--yes", "--profile", "hospital")
    assert fresh.exit_code == 4, fresh.output
    said = " ".join(fresh.output.split())
    assert f"these cases were registered before as dataset {first} (site-a)" in said
    assert "never gives them a fresh budget" in said and "nothing was registered" in said
    assert _datasets(world) == before and _budget(world, first) == spent_once

    # Without a budget: registered, on the first dataset's ledger with its spend, and told so.
    joined = cli("dataset", "register", str(again), "--name", "site-a-again", "--benchmark", b,
                 "--yes", "--profile", "hospital")
    assert joined.exit_code == 0, joined.output
    said = " ".join(joined.output.split())
    second = int(said.split("dataset ", 1)[1].split(" registered", 1)[0])
    assert (f"these cases were registered before as dataset {first} (site-a): they share its "
            f"privacy budget, spent epsilon {spent_once['spent_epsilon']:.4g} of "
            f"{world.budget:g}") in said
    shared = _budget(world, second)
    assert shared["datasets"] == [first, second] and shared["spent_rho"] == spent_once["spent_rho"]
    assert shared["debits"] == spent_once["debits"] and shared["releases"] == 1
    assert shared["budget_epsilon"] == world.budget

    # A release of the new dataset is charged once, to the one ledger both datasets read.
    _enrol(world, again, second)
    _run_and_submit(world, second)
    after = [_budget(world, d) for d in (first, second)]
    assert after[0]["debits"] == after[1]["debits"] and after[0]["releases"] == 2
    assert [d["dataset_id"] for d in after[0]["debits"]] == [first, second]  # type: ignore[index,union-attr]
    [cost] = after[1]["costs"]  # type: ignore[misc]
    assert cost["releases_left"] == 0  # type: ignore[index]

    # Some of the same cases once more: nothing left for them either.
    part = tmp / "prepared-part"
    ok(cli("dataset", "prepare", str(_renamed(tmp / "raw", tmp / "raw-part", keep=20)),
           str(part), "--benchmark", b, "--profile", "hospital"))
    third = json_of(cli("dataset", "register", str(part), "--name", "site-a-part",
                        "--benchmark", b, "--json", "--yes", "--profile", "hospital"))["id"]
    last = _budget(world, third)
    assert last["datasets"] == [first, second, third] and last["releases"] == 2
    assert last["remaining_rho"] == after[0]["remaining_rho"]
    assert json.dumps(last["debits"]) == json.dumps(after[0]["debits"])
