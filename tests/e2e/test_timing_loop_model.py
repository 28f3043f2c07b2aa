"""The timing-loop model (issue 40, part 3): a WDBC model whose probabilities are the shipped
logistic regression's, unchanged, plus a ``Loop`` that spins only when its input is one target
patient's record. Before, its owner read ``step_seconds.infer`` of its runs from
``GET /api/v1/runs`` (2.49 s at the site holding the target, 0.06 s elsewhere) and learned
where that patient is treated, outside any release and any budget.

Here it is registered, approved and run as usual, against a real registry process and the mock
TEE, at a site that holds the target and at one that does not. The spinning case is cut at the
plug-in's per-case limit (WDBC: 10 s, part of the attested pin, no operator input) and scored
as a failed case; both runs succeed. Everything the model's owner can read about the two runs
apart from the release (the runs API, the progress matrix through the API and the CLI, the
runs' audit events) is the same but for which run and dataset it names: no timing, no time
finer than the day, no failure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.wdbc.data import WdbcCase, read_raw_csv
from tests.cli_world import Cli, cli_world, json_of, ok

ACCOUNTS = {
    "admin": ("admin@timing.example", True),
    "authority": ("authority@timing.example", False),
    "holder": ("it@holder.timing.example", False),
    "other": ("it@other.timing.example", False),
    "spy": ("ml@spy.timing.example", False),
}
#: Hospital profile -> (demo seed of its site, cases it holds): disjoint sites.
SITES = {"holder": (0, 12), "other": (1, 12)}
#: How close (sum of absolute differences) an input must be to the target to make the model spin.
TOLERANCE = 1e-3
#: Fields of a run or progress cell that name which run, dataset or account it is.
IDENTITY = frozenset({"id", "run_id", "reporter_id", "reported_by_id", "dataset_id",
                      "dataset_name", "result_id"})
DAY_ENDINGS = ("T00:00:00Z", "T00:00:00+00:00", "T00:00:00.000000+00:00")


def timing_loop_model(honest: bytes, target: tuple[float, ...]) -> bytes:
    """``honest`` (a WDBC classifier) with its ``probabilities`` output passed through
    ``+ spun``, where ``spun`` is 0.0 carried through a ``Loop`` of 2^40 iterations when the
    input is within :data:`TOLERANCE` of ``target`` and of none otherwise: the probabilities
    are exactly the honest model's (x + 0.0 == x), and only the target's case takes long."""
    model = onnx.load_from_string(honest)
    graph = model.graph
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name == "probabilities":
                node.output[i] = "probabilities_honest"
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "body_zero"], ["v_out"])],
        "spin",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(0.0, np.float32), "body_zero")])
    graph.initializer.extend([
        numpy_helper.from_array(np.asarray([target], np.float32), "target"),
        numpy_helper.from_array(np.array(TOLERANCE, np.float32), "tolerance"),
        numpy_helper.from_array(np.array(1 << 40, np.int64), "forever"),
        numpy_helper.from_array(np.array(0, np.int64), "never"),
        numpy_helper.from_array(np.array(True, np.bool_), "go"),
        numpy_helper.from_array(np.array(0.0, np.float32), "nothing"),
    ])
    input_name = graph.input[0].name
    graph.node.extend([
        helper.make_node("Sub", [input_name, "target"], ["difference"]),
        helper.make_node("Abs", ["difference"], ["distance"]),
        helper.make_node("ReduceSum", ["distance"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "tolerance"], ["is_target"]),
        helper.make_node("Where", ["is_target", "forever", "never"], ["trips"]),
        helper.make_node("Loop", ["trips", "go", "nothing"], ["spun"], body=body),
        helper.make_node("Add", ["probabilities_honest", "spun"], ["probabilities"]),
    ])
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


@dataclass
class World:
    cli: Cli
    tmp: Path
    url: str
    tokens: dict[str, str]
    ids: dict[str, int]
    target: WdbcCase


def _site_cases(raw: Path) -> tuple[WdbcCase, ...]:
    return read_raw_csv((raw / "cases.csv").read_bytes())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    plugin = PluginRegistry().get("wdbc")
    with cli_world(tmp_path_factory.mktemp("timing-loop"), ACCOUNTS) as base:
        cli, tmp = base.cli, base.tmp
        ids: dict[str, int] = {}
        for site, (seed, n_cases) in SITES.items():
            plugin.write_demo_dataset(tmp / site / "raw", n_cases, seed=seed)
        target = _site_cases(tmp / "holder" / "raw")[0]
        distances = [sum(abs(a - b) for a, b in zip(case.features, target.features, strict=True))
                     for case in _site_cases(tmp / "other" / "raw")]
        assert min(distances) > 100 * TOLERANCE  # the other site does not hold the target
        ids["b"] = int(json_of(cli("benchmark", "create", "--tee", "mock", "--definition",
                                   "wdbc", "--json", "--profile", "authority"))["id"])
        b = str(ids["b"])
        ok(cli("benchmark", "approve", b, "--profile", "admin"))
        onnx_path = tmp / "timing_loop.onnx"
        onnx_path.write_bytes(timing_loop_model(plugin.model_bytes("wdbc_logreg"),
                                                target.features))
        ids["model"] = int(json_of(cli("model", "register", str(onnx_path), "--name",
                                       "timing-loop", "--benchmark", b, "--json",
                                       "--profile", "spy"))["id"])
        model = str(ids["model"])
        ok(cli("model", "seal", str(onnx_path), "--model", model, "--profile", "spy"))
        ok(cli("model", "associate", "--model", model, "--benchmark", b, "--profile", "spy"))
        ok(cli("association", "approve", "--benchmark", b, "--model", model,
               "--profile", "authority"))
        for site in SITES:
            raw, prepared = tmp / site / "raw", tmp / site / "prepared"
            ok(cli("keys", "init", "--profile", site))
            ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
                   "--profile", site))
            ids[site] = int(json_of(cli("dataset", "register", str(prepared), "--name",
                                        f"{site}-fna", "--benchmark", b, "--json",
                                        "--profile", site))["id"])
            d = str(ids[site])
            ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", site))
            ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b,
                   "--profile", site))
            ok(cli("association", "approve", "--benchmark", b, "--dataset", d,
                   "--profile", "authority"))
            ok(cli("policy", "sync", "--dataset", d, "--profile", site))
        ok(cli("policy", "sync", "--model", model, "--profile", "spy"))
        for site in SITES:
            ran = ok(cli("run", "--benchmark", b, "--dataset", str(ids[site]), "--model", model,
                         "--tee", "mock", "--profile", site))
            assert "succeeded" in ran.output, ran.output
            [record] = json.loads(ok(cli("result", "ls", "--json", "--profile", site)).stdout)
            submitted = ok(cli("result", "submit", record["run_id"], "--profile", site))
            assert "attestation verified" in submitted.output
        yield World(cli, tmp, base.url, base.tokens, ids, target)


def _get(world: World, who: str, path: str) -> Any:
    with httpx.Client(base_url=world.url, timeout=30) as http:
        answer = http.get(f"/api/v1{path}",
                          headers={"Authorization": f"Bearer {world.tokens[who]}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _without_identity(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in IDENTITY}


def _of_site(world: World, views: list[dict[str, Any]], site: str) -> dict[str, Any]:
    [view] = [v for v in views if v["dataset_id"] == world.ids[site]]
    return view


def test_spinning_case_is_cut_and_failed_and_the_run_succeeds(world: World) -> None:
    """At the site holding the target: the run succeeded, the target's case is a failed case
    (the per-case limit stopped it, reason ``timeout``), every other case scored. The hospital
    keeps the timings in its own record: the spin is there, on its machine only."""
    cli = world.cli
    [record] = json.loads(ok(cli("result", "ls", "--json", "--profile", "holder")).stdout)
    assert record["status"] == "succeeded"
    assert record["step_seconds"]["infer"] >= 10.0  # the per-case limit, in the hospital's record
    opened = json.loads(ok(cli("result", "open", record["run_id"], "--json",
                               "--profile", "holder")).stdout)
    cases = {c["case_id"]: c for c in opened["per_case"]["cases"]}
    assert len(cases) == SITES["holder"][1]
    spun = cases[world.target.case_id]
    assert spun["score"] is None and spun["reason"] == "timeout", spun  # a failed case
    assert all(c["score"] is not None for cid, c in cases.items() if cid != world.target.case_id)
    [other] = json.loads(ok(cli("result", "ls", "--json", "--profile", "other")).stdout)
    opened_other = json.loads(ok(cli("result", "open", other["run_id"], "--json",
                                     "--profile", "other")).stdout)
    assert all(c["score"] is not None for c in opened_other["per_case"]["cases"])


def test_model_owner_sees_nothing_that_varies_with_the_cases(world: World) -> None:
    """The spy's view of its two runs, API and CLI, differs only in which run and dataset it
    names: same state, no reason, no timing, times to the day."""
    runs = _get(world, "spy", f"/runs?benchmark_id={world.ids['b']}")["items"]
    assert len(runs) == 2
    for run in runs:
        assert "step_seconds" not in run and run["state"] == "succeeded" and run["reason"] is None
        assert run["created_at"].endswith(DAY_ENDINGS) and run["updated_at"].endswith(DAY_ENDINGS)
    holder, other = (_of_site(world, runs, site) for site in ("holder", "other"))
    assert _without_identity(holder) == _without_identity(other)

    progress = _get(world, "spy", f"/benchmarks/{world.ids['b']}/progress")["cells"]
    holder_cell, other_cell = (_of_site(world, progress, site) for site in ("holder", "other"))
    assert _without_identity(holder_cell) == _without_identity(other_cell)
    assert holder_cell["updated_at"].endswith(DAY_ENDINGS)

    shown = json.loads(ok(world.cli("benchmark", "progress", str(world.ids["b"]), "--json",
                                    "--profile", "spy")).stdout)
    cli_cells = shown["cells"]
    assert _without_identity(_of_site(world, cli_cells, "holder")) == _without_identity(
        _of_site(world, cli_cells, "other"))
    # the leaderboard (the authority's, here) dates each site's result, which arrives when
    # its run ends, to the day
    board = _get(world, "authority", f"/benchmarks/{world.ids['b']}/leaderboard")
    entries = board["entries"]
    assert len(entries) == 2 and all(e["created_at"].endswith(DAY_ENDINGS) for e in entries)
    table = ok(world.cli("benchmark", "progress", str(world.ids["b"]), "--profile", "spy"))
    assert not re.search(r"\b\d\d:\d\d\b", table.output), table.output  # the day, no time
    assert re.search(r"\b\d{4}-\d\d-\d\d\b", table.output), table.output


def test_runs_audit_events_carry_only_the_day(world: World) -> None:
    """The audit log: the two runs' events are the same actions, of the same states, at a day's
    precision; so is the submission event of each result, which the authority reads in the
    result's receipt (a result arrives when its run ends)."""
    results = _get(world, "authority", f"/results?benchmark_id={world.ids['b']}")["items"]
    assert len(results) == 2
    for result in results:
        assert result["created_at"].endswith(DAY_ENDINGS), result["created_at"]
        receipt = _get(world, "authority", f"/audit/receipts/{result['id']}")
        assert receipt["event"]["occurred_at"].endswith("T00:00:00.000000+00:00"), receipt
    events = [e for e in _get(world, "admin", "/audit?limit=200")["items"]
              if e["entity_type"] == "run"]
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        payload = json.loads(event["payload"])
        by_run.setdefault(str(payload["dataset_id"]), []).append(
            {"action": event["action"], "state": payload["state"], "reason": payload["reason"]})
        assert event["occurred_at"].endswith("T00:00:00.000000+00:00"), event
    holder, other = by_run[str(world.ids["holder"])], by_run[str(world.ids["other"])]
    assert holder == other
    assert [e["action"] for e in holder][-2:] == ["run.succeeded", "run.result"]
