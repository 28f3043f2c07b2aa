"""A BraTS 2025 benchmark (metastases, ``brats-2025-met``) through every role's CLI against a
real registry server process and the mock TEE, as BraTS 2023 and WDBC go through it: the
authority publishes a variant of the shipped definition on the small grid (exported, its
contract's shape edited: pin ``brats-2025-met/1-64x64x48``), two labs register and seal the two
shipped models, two hospitals prepare, register and seal the task's demo cases (several
metastases each), the hospitals run both models, open their exact per-case results (the official
2025 keys per group), submit the attested private releases, and the leaderboard pools them.

What it checks beyond the plumbing: the release and the pooling hold on the 2025 metrics. Each
published summary is a differentially private release of the per-case ``pq_dsc`` and global
Dice sums (no case id, no exact figure), and each pooled figure on the board lies within its
noise of the exact mean over all cases, computed here from the hospitals' opened results."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sealbench.benchmarks.registry import load
from sealbench.contract.pin import BenchmarkPin
from tests.cli_world import Cli, cli_world, json_of, ok

ACCOUNTS = {
    "admin": ("admin@met.example", True),
    "authority": ("authority@met.example", False),
    "north": ("it@north.met.example", False),
    "south": ("it@south.met.example", False),
    "lab-ref": ("ml@lab-ref.met.example", False),
    "lab-weak": ("ml@lab-weak.met.example", False),
}
PIN = "brats-2025-met/1-64x64x48"
#: Hospital profile -> demo seed of its site; each holds CASES cases (the small-cell minimum).
SITES = {"north": 0, "south": 1}
CASES = 5
GROUPS = ("et", "rc", "tc", "wt")
LABS = {"lab-ref": "brats25_met_unet", "lab-weak": "brats25_met_unet_weak"}


@dataclass
class World:
    cli: Cli
    tmp: Path
    ids: dict[str, int]
    #: (dataset id, model id) -> the hospital's opened per-case results
    opened: dict[tuple[int, int], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with cli_world(tmp_path_factory.mktemp("met-flow"), ACCOUNTS) as base:
        world = World(base.cli, base.tmp, {}, {})
        _publish_join_run(world)
        yield world


_json = json_of


def _publish_join_run(world: World) -> None:
    cli, tmp, ids = world.cli, world.tmp, world.ids
    exported = _json(cli("benchmark", "definition", "export", "brats-2025-met"))
    assert exported["plugin"] == "brats-2025-met/1"
    definition = tmp / "met-small.json"
    definition.write_text(json.dumps({
        **exported, "name": "brats-met-small", "plugin": PIN,
        "contract": {**exported["contract"], "shape": [64, 64, 48]}}))
    created = _json(cli("benchmark", "create", "--tee", "mock", "--definition", str(definition),
                        "--json", "--profile", "authority"))
    assert created["metrics_version"] == PIN
    ids["b"] = int(created["id"])
    b = str(ids["b"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    plugin = load(BenchmarkPin.parse(PIN))
    for lab, name in LABS.items():
        onnx = tmp / f"{name}.onnx"
        onnx.write_bytes(plugin.model_bytes(name))
        ids[lab] = int(_json(cli("model", "register", str(onnx), "--name", name, "--benchmark",
                                 b, "--json", "--profile", lab))["id"])
        ok(cli("model", "seal", str(onnx), "--model", str(ids[lab]), "--profile", lab))
        ok(cli("model", "associate", "--model", str(ids[lab]), "--benchmark", b,
               "--profile", lab))
        ok(cli("association", "approve", "--benchmark", b, "--model", str(ids[lab]),
               "--profile", "authority"))
    for site, seed in SITES.items():
        raw, prepared = tmp / site / "raw", tmp / site / "prepared"
        plugin.write_demo_dataset(raw, CASES, seed=seed)
        ok(cli("keys", "init", "--profile", site))
        ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
               "--profile", site))
        ids[site] = d = int(_json(cli("dataset", "register", str(prepared), "--name",
                                      f"{site}-mets", "--benchmark", b, "--json",
                                      "--profile", site))["id"])
        ok(cli("dataset", "seal", str(prepared), "--dataset", str(d), "--profile", site))
        ok(cli("dataset", "associate", "--dataset", str(d), "--benchmark", b,
               "--profile", site))
        ok(cli("association", "approve", "--benchmark", b, "--dataset", str(d),
               "--profile", "authority"))
        ok(cli("policy", "sync", "--dataset", str(d), "--profile", site))
    for lab in LABS:  # after the datasets' approvals: the grants name the approved pairs
        ok(cli("policy", "sync", "--model", str(ids[lab]), "--profile", lab))
    for site in SITES:
        ran = ok(cli("run", "--benchmark", b, "--dataset", str(ids[site]), "--all-approved",
                     "--tee", "mock", "--profile", site))
        assert ran.output.count("succeeded") == 2, ran.output
        for record in _json(cli("result", "ls", "--json", "--profile", site)):
            opened = _json(cli("result", "open", record["run_id"], "--json", "--profile", site))
            world.opened[ids[site], int(record["model_id"])] = opened["per_case"]["cases"]
            submitted = ok(cli("result", "submit", record["run_id"], "--profile", site))
            assert "attestation verified" in submitted.output


def test_hospital_opens_the_official_2025_figures_of_each_case(world: World) -> None:
    assert len(world.opened) == len(SITES) * len(LABS)
    for cases in world.opened.values():
        assert len(cases) == CASES
        for case in cases:
            assert case["kind"] == "scores-2025" and case["case_id"].startswith("BraTS-MET-")
            assert set(case["groups"]) == set(GROUPS)
            official = {"tp", "fp", "fn", "rq", "sq_dsc", "pq_dsc", "global_bin_dsc",
                        "global_bin_hd95"}
            assert official <= set(case["groups"]["wt"])


def _exact_sum(cases: list[dict[str, Any]], key: str) -> float:
    """A released column's exact sum over cases (``metric:group``, or ``metric group`` as the
    board names it), as the release scores a case: the group's figure, NaN (nothing in truth
    nor prediction) left out (0); ``defined:group`` counts the cases where it is not NaN."""
    metric, _, group = key.replace(" ", ":").partition(":")
    field = {"pq_dsc": "pq_dsc", "dsc": "global_bin_dsc", "defined": "global_bin_dsc"}[metric]
    values = [float(case["groups"][group][field]) for case in cases]  # NaN may be "NaN"
    if metric == "defined":
        return float(sum(not math.isnan(v) for v in values))
    return math.fsum(0.0 if math.isnan(v) else v for v in values)


def _exact_mean(world: World, model: int, key: str) -> float | None:
    """The official mean of ``metric group`` over both sites' cases (NaN skipped); None when
    no case defines the group."""
    group = key.replace(" ", ":").partition(":")[2]
    total = math.fsum(_exact_sum(world.opened[world.ids[site], model], key) for site in SITES)
    defined = math.fsum(_exact_sum(world.opened[world.ids[site], model], f"defined:{group}")
                        for site in SITES)
    return total / defined if defined else None


def _results(world: World) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = _json(world.cli(
        "benchmark", "results", str(world.ids["b"]), "--json", "--profile", "authority"))
    return results


def test_published_summaries_are_private_releases_of_the_2025_metrics(world: World) -> None:
    """Each summary is an OpenDP release of the per-case sums, within its stated noise of the
    exact sums of the cases the hospital opened, naming no case."""
    results = _results(world)
    assert len(results) == len(SITES) * len(LABS)
    for result in results:
        summary = result["summary"]
        assert summary["metrics_version"] == PIN
        aggregates = summary["aggregates"]
        assert "BraTS-MET" not in json.dumps(aggregates)  # no case is named
        release = aggregates["release"]
        assert release["mechanism"] == "gaussian" and release["library"].startswith("opendp ")
        assert release["n_cases"] == CASES and release["epsilon"] > 0
        cases = world.opened[result["dataset_id"], result["model_id"]]
        keys = {column["key"] for column in release["columns"]}
        assert {f"{m}:{g}" for m in ("pq_dsc", "dsc", "defined") for g in GROUPS} <= keys
        for column in release["columns"]:
            assert column["sd"] > 0
            exact = _exact_sum(cases, column["key"])
            assert abs(column["sum"] - exact) <= 6 * column["sd"], (column, exact)


def test_leaderboard_pools_each_models_releases_near_the_exact_mean(world: World) -> None:
    """The board's pooled figure of a model is the case-weighted mean of its sites' releases:
    within six noise standard errors of the exact mean over all its cases."""
    board = _json(world.cli("benchmark", "leaderboard", str(world.ids["b"]), "--json",
                            "--profile", "authority"))
    assert board["plugin"] == PIN and board["metric"].startswith("pq_dsc")
    assert not board["withheld"]
    sds = {(r["dataset_id"], r["model_id"], c["key"].replace(":", " ")): c["sd"]
           for r in _results(world)
           for c in r["summary"]["aggregates"]["release"]["columns"]}
    assert {row["model_id"] for row in board["standings"]} == {world.ids[lab] for lab in LABS}
    checked = 0
    for row in board["standings"]:
        model = row["model_id"]
        for value in row["values"]:
            assert value["n_sites"] == len(SITES) and value["n_cases"] == CASES * len(SITES)
            if value["pooled"] is None:  # the noise dominates: shown as an interval only
                continue
            key = value["metric"].replace(":", " ")
            if " " not in key:  # a mean over groups: checked exactly by the exact variant
                continue
            exact = _exact_mean(world, model, key)
            assert exact is not None  # shown: some case defines the group
            group = key.partition(" ")[2]
            defined = math.fsum(_exact_sum(world.opened[world.ids[site], model],
                                           f"defined:{group}") for site in SITES)
            # the ratio's noise: the sum's and the count's (at the exact mean), over the count
            noise_se = math.sqrt(math.fsum(
                sds[world.ids[site], model, key] ** 2
                + exact ** 2 * sds[world.ids[site], model, f"defined {group}"] ** 2
                for site in SITES)) / defined
            assert value["ci95_low"] <= value["pooled"] <= value["ci95_high"]
            assert abs(value["pooled"] - exact) <= 6 * noise_se, (value, exact)
            checked += 1
    # At 10 cases and epsilon 1 the noise may dominate every pooled figure (then shown as an
    # interval only, never ranked): the exact variant below checks the pooled values exactly.
    assert checked or all(v["pooled"] is None for row in board["standings"]
                          for v in row["values"])


def test_exact_variant_pools_to_the_exact_mean_of_every_case(world: World) -> None:
    """The same benchmark pinned ``-exact`` (the hospitals consent to exact releases): the
    board's pooled figure of each model and group is the mean over both sites' cases of the
    official per-case figure, to rounding."""
    cli, ids, tmp = world.cli, world.ids, world.tmp
    definition = json.loads((tmp / "met-small.json").read_text())
    exact_file = tmp / "met-small-exact.json"
    exact_file.write_text(json.dumps({**definition, "name": "brats-met-small-exact",
                                      "plugin": f"{PIN}-exact"}))
    created = _json(cli("benchmark", "create", "--tee", "mock", "--definition", str(exact_file),
                        "--json", "--profile", "authority"))
    b = str(created["id"])
    assert created["metrics_version"] == f"{PIN}-exact"
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    for lab in LABS:
        ok(cli("model", "associate", "--model", str(ids[lab]), "--benchmark", b,
               "--profile", lab))
        ok(cli("association", "approve", "--benchmark", b, "--model", str(ids[lab]),
               "--profile", "authority"))
    for site in SITES:
        ok(cli("dataset", "associate", "--dataset", str(ids[site]), "--benchmark", b,
               "--consent-exact-release", "--profile", site))
        ok(cli("association", "approve", "--benchmark", b, "--dataset", str(ids[site]),
               "--profile", "authority"))
        ok(cli("policy", "sync", "--dataset", str(ids[site]), "--profile", site))
    for lab in LABS:
        ok(cli("policy", "sync", "--model", str(ids[lab]), "--profile", lab))
    for site in SITES:
        ran = ok(cli("run", "--benchmark", b, "--dataset", str(ids[site]), "--all-approved",
                     "--tee", "mock", "--profile", site))
        assert ran.output.count("succeeded") == 2, ran.output
        for record in _json(cli("result", "ls", "--json", "--profile", site)):
            if str(record["benchmark_id"]) == b:
                ok(cli("result", "submit", record["run_id"], "--profile", site))
    board = _json(cli("benchmark", "leaderboard", b, "--json", "--profile", "authority"))
    assert len(board["standings"]) == len(LABS)
    for row in board["standings"]:
        for value in row["values"]:
            assert value["n_sites"] == len(SITES)
            metric, _, group = value["metric"].replace(":", " ").partition(" ")
            # each group's official mean (NaN skipped); a metric without a group is the mean of
            # its groups' means, a group no case defines left out
            means = [_exact_mean(world, row["model_id"], f"{metric} {g}")
                     for g in ([group] if group else GROUPS)]
            known = [m for m in means if m is not None]
            if not known:
                assert value["pooled"] is None, value
                continue
            exact = math.fsum(known) / len(known)
            assert value["pooled"] == pytest.approx(exact, abs=1e-9), (value, exact)
