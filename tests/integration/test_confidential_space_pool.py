"""Pooling inside the TEE on Confidential Space (issue 27), through the mock's Compute stand-in:
two hospitals evaluate one WDBC model on the mock TEE and submit; the authority's ``sealbench
benchmark pool B --tee confidential-space`` creates a confidential VM of the benchmark's
aggregator image (the production launcher over REST), whose mock launcher runs the image's own
command under its own launch policy; the sites' keys are released to it by their own
conditions, and the registry accepts its release over both sites. An operator who adds one
``tee-env`` to the aggregator's VM gets nothing: the launcher refuses the launch spec before
the workload starts, so no key is asked for and nothing is released."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import Result

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import ProfileStore
from sealbench.client.runs.launch import local_routes
from sealbench.client.runs.launchers.for_profile import CsOptions, make_aggregator_launcher
from sealbench.client.runs.pool import PoolFolder, aggregate_spec, require_aggregator
from sealbench.contract.pool import POOL_INPUTS_OBJECT, POOLED_RELEASE_OBJECT, POOLED_TOKEN_OBJECT
from sealbench.gcp.confidential_space import ConfidentialSpacePlatform
from sealbench.gcp.launcher import ConfidentialSpaceLauncher
from sealbench.mocktee.image import aggregator_image_digest
from sealbench.platforms.launcher import EnclaveRunFailed
from tests.cli_world import cli_world, ok

ACCOUNTS = {
    "admin": ("admin@cs-pool.example", True),
    "authority": ("authority@cs-pool.example", False),
    "referral": ("it@referral.cs-pool.example", False),
    "screening": ("it@screening.cs-pool.example", False),
    "lab": ("ml@lab.cs-pool.example", False),
}
#: Hospital profile -> (demo seed of its site, cases it holds).
SITES = {"referral": (0, 24), "screening": (1, 30)}
MODEL = "wdbc_logreg"
#: An operator's endpoint override: every connection of the workload through its proxy.
OVERRIDE = {"tee-env-HTTPS_PROXY": "http://127.0.0.1:9"}


@dataclass
class World:
    cli: Callable[..., Result]
    tmp: Path
    ids: dict[str, int]
    #: The benchmark's aggregator digest (of the code as it was when the mock started).
    aggregator: str = ""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("cs-pool")
    with cli_world(tmp, ACCOUNTS, data_dir=tmp / "data") as base:
        world = World(base.cli, tmp, {})
        _evaluate_and_submit(world)
        yield world


def _id(result: Result) -> int:
    return int(json.loads(ok(result).stdout)["id"])


def _evaluate_and_submit(world: World) -> None:
    """The benchmark pools in the TEE with the mock's aggregator image; each hospital runs the
    one model on the mock TEE and submits its attested summary."""
    cli, tmp, ids = world.cli, world.tmp, world.ids
    plugin = PluginRegistry().get("wdbc")
    world.aggregator = aggregator_image_digest()
    ids["b"] = _id(cli("benchmark", "create", "--tee", "mock", "--definition", "wdbc",
                       "--aggregator-digest", world.aggregator, "--json",
                       "--profile", "authority"))
    b = str(ids["b"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    onnx = tmp / f"{MODEL}.onnx"
    onnx.write_bytes(plugin.model_bytes(MODEL))
    ids["model"] = _id(cli("model", "register", str(onnx), "--name", MODEL, "--benchmark", b,
                           "--json", "--profile", "lab"))
    m = str(ids["model"])
    ok(cli("model", "seal", str(onnx), "--model", m, "--profile", "lab"))
    ok(cli("model", "associate", "--model", m, "--benchmark", b, "--profile", "lab"))
    ok(cli("association", "approve", "--benchmark", b, "--model", m, "--profile", "authority"))
    for site, (seed, cases) in SITES.items():
        raw, prepared = tmp / site / "raw", tmp / site / "prepared"
        plugin.write_demo_dataset(raw, cases, seed=seed)
        ok(cli("keys", "init", "--profile", site))
        ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
               "--profile", site))
        ids[site] = _id(cli("dataset", "register", str(prepared), "--name", f"{site}-fna",
                            "--benchmark", b, "--json", "--profile", site))
        d = str(ids[site])
        ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", site))
        ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", site))
        ok(cli("association", "approve", "--benchmark", b, "--dataset", d,
               "--profile", "authority"))
        ok(cli("policy", "sync", "--dataset", d, "--profile", site))  # grants the aggregator too
    ok(cli("policy", "sync", "--model", m, "--profile", "lab"))
    for site in SITES:
        ok(cli("run", "--benchmark", b, "--dataset", str(ids[site]), "--model", m,
               "--tee", "mock", "--profile", site))
        for record in json.loads(ok(cli("result", "ls", "--json", "--profile", site)).stdout):
            ok(cli("result", "submit", record["run_id"], "--profile", site))


def _tee_pooled(world: World) -> dict[int, dict[str, object]]:
    board = json.loads(ok(world.cli("benchmark", "leaderboard", str(world.ids["b"]), "--json",
                                    "--profile", "authority")).stdout)
    return {m["model_id"]: m["tee_pooled"] for m in board["standings"] if m.get("tee_pooled")}


class OperatorOverride(ConfidentialSpacePlatform):
    """The Confidential Space platform as an operator would tamper with it: one more
    ``tee-env`` item in every VM it launches."""

    def launch_environment(self, run_spec: Mapping[str, str]) -> dict[str, str]:
        return {**super().launch_environment(run_spec), **OVERRIDE}


def test_an_aggregator_launched_with_an_operator_override_releases_nothing(
    world: World,
) -> None:
    """The authority's own aggregator launcher (what ``benchmark pool`` builds), on real pool
    inputs, with one extra ``tee-env``: the aggregator image's launch policy allows only the
    aggregate spec's names, so the launcher refuses the launch and no workload ever runs."""
    store = ProfileStore.from_environment(os.environ)
    profile = store.resolve("authority")
    client = RegistryClient.connect(profile.server, profile.token)
    b = world.ids["b"]
    endpoints = local_routes(profile, None)
    benchmark = client.get_benchmark(b)
    genuine = make_aggregator_launcher(
        "confidential-space", profile=profile, client=client, benchmark=benchmark,
        endpoints=endpoints, mock_tee=None, image=None, cs=CsOptions())
    assert isinstance(genuine, ConfidentialSpaceLauncher)
    tampered = ConfidentialSpaceLauncher(
        genuine.settings, clients=(genuine.instances, None),  # type: ignore[arg-type]
        platform=OperatorOverride(), result_store=genuine.result_store, poll_interval=0.2)
    authorized = client.authorize_pool(b, world.ids["model"])
    authorization = client.pool_authorization(b, authorized.pool_id)
    inputs = authorization.inputs
    assert len(inputs.inputs) == len(SITES)
    uri, pool, prefix = PoolFolder((world.tmp / "operator").as_uri()).create(inputs.pool_id)
    pool.put_bytes(f"{prefix}{POOL_INPUTS_OBJECT}", authorization.to_bytes())
    lines: list[str] = []
    spec = aggregate_spec(authorization, require_aggregator(benchmark).anchor, inputs.pool_id,
                          uri, endpoints.token_destinations)
    vm = tampered.start_aggregator(spec, on_output=lines.append)
    with pytest.raises(EnclaveRunFailed) as info:
        vm.wait(timeout=300)
    assert "env var HTTPS_PROXY is not allowed to be overridden" in info.value.reason
    assert not any("workload started" in x for x in lines), lines
    assert sorted(pool.list(prefix)) == [f"{prefix}{POOL_INPUTS_OBJECT}"]
    assert _tee_pooled(world) == {}


def test_the_authority_pools_through_a_confidential_space_vm(world: World) -> None:
    """The authorization the refused launch above never used is run again by ``benchmark
    pool`` (no new debit) in a Confidential Space VM, and published."""
    b, m = str(world.ids["b"]), world.ids["model"]
    pooled = ok(world.cli("benchmark", "pool", b, "--tee", "confidential-space",
                          "--profile", "authority"))
    # the aggregator's launch spec, as the VM's launcher logs it on the serial port
    spec = next(x for x in pooled.output.splitlines() if "Launch Spec:" in x)
    assert f"ImageRef:sealbench.local/evaluation@{world.aggregator}" in spec
    assert "SEALBENCH_POOL_INPUTS_URI" in spec and "SEALBENCH_DATASET_URI" not in spec
    assert "workload finished" not in pooled.output  # it succeeded
    release = _tee_pooled(world)[m]
    assert release["n_sites"] == len(SITES), release  # accepted over every site
    folders = list((world.tmp / "data" / "pools").iterdir())
    assert len(folders) == 1
    assert {p.name for p in folders[0].iterdir()} >= {POOLED_RELEASE_OBJECT, POOLED_TOKEN_OBJECT}
