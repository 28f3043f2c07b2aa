"""The WDBC classification benchmark through every role's CLI, exactly as BraTS goes through it
(``test_cli_flow.py``), against a real registry server process and the mock TEE: the authority
publishes the shipped definition (pooling in the TEE), two labs register and seal the two
shipped ONNX models, three hospitals prepare, register and seal their real WDBC cases
(disjoint sites with different case mixes), every party approves and syncs its key-release
policy, the hospitals run every approved model on the mock TEE, open their per-case results,
submit the attested summaries (verified by the registry), the leaderboard ranks the models by
AUROC, and the authority pools every model's results inside the TEE (issue 27)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.contract.pin import BenchmarkPin
from sealbench.mocktee.image import aggregator_image_digest
from tests.cli_world import Cli, cli_world, json_of, ok

ACCOUNTS = {
    "admin": ("admin@wdbc.example", True),
    "authority": ("authority@wdbc.example", False),
    "referral": ("it@referral.wdbc.example", False),
    "screening": ("it@screening.wdbc.example", False),
    "clinic": ("it@clinic.wdbc.example", False),
    "lab-lr": ("ml@lab-lr.wdbc.example", False),
    "lab-mlp": ("ml@lab-mlp.wdbc.example", False),
}
#: Hospital profile -> (demo seed of its site, cases it holds).
SITES = {"referral": (0, 40), "screening": (1, 50), "clinic": (3, 35)}
LABS = {"lab-lr": "wdbc_logreg", "lab-mlp": "wdbc_mlp"}


@dataclass
class World:
    cli: Cli
    tmp: Path
    url: str
    tokens: dict[str, str]
    ids: dict[str, int]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with cli_world(tmp_path_factory.mktemp("wdbc-flow"), ACCOUNTS) as base:
        world = World(base.cli, base.tmp, base.url, base.tokens, {})
        _publish_register_seal_approve_sync(world)
        yield world


_json = json_of


def _publish_register_seal_approve_sync(world: World) -> None:
    cli, tmp, ids = world.cli, world.tmp, world.ids
    plugin = PluginRegistry().get("wdbc")
    # The authority publishes the shipped WDBC definition and the admin approves it; the labs
    # register the two shipped models for it.
    # It pools in the TEE: its aggregator image is the mock backend's (a second workload of the
    # same code, with its own digest). Its sites publish their own releases too, the authority's
    # explicit choice (--site-releases; without it the pooled release is the only figure, issue
    # 41): this flow reads both.
    ids["b"] = int(_json(cli("benchmark", "create", "--tee", "mock", "--definition", "wdbc",
                             "--pool-in-tee", "--site-releases",
                             "--json", "--profile", "authority"))["id"])
    b = str(ids["b"])
    # --pool-in-tee took the mock backend's aggregator image
    shown = _json(cli("benchmark", "show", b, "--json", "--profile", "authority"))
    assert shown["aggregator_image_digest"] == aggregator_image_digest()
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    for lab, name in LABS.items():
        onnx = tmp / f"{name}.onnx"
        onnx.write_bytes(plugin.model_bytes(name))
        ids[lab] = int(_json(cli("model", "register", str(onnx), "--name", name, "--benchmark",
                                 b, "--json", "--profile", lab))["id"])
    for lab, name in LABS.items():
        ok(cli("model", "seal", str(tmp / f"{name}.onnx"), "--model", str(ids[lab]),
               "--profile", lab))
        ok(cli("model", "associate", "--model", str(ids[lab]), "--benchmark", b,
               "--profile", lab))
        ok(cli("association", "approve", "--benchmark", b, "--model", str(ids[lab]),
               "--profile", "authority"))
    # Each hospital holds real cases of its site as CSV, prepares, registers and seals them.
    for site, (seed, cases) in SITES.items():
        raw, prepared = tmp / site / "raw", tmp / site / "prepared"
        plugin.write_demo_dataset(raw, cases, seed=seed)
        ok(cli("keys", "init", "--profile", site))
        ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
               "--profile", site))
        ids[site] = int(_json(cli("dataset", "register", str(prepared), "--name",
                                  f"{site}-fna", "--benchmark", b, "--json",
                                  "--profile", site))["id"])
        d = str(ids[site])
        ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", site))
        ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", site))
        ok(cli("association", "approve", "--benchmark", b, "--dataset", d,
               "--profile", "authority"))
    # The referral hospital brings a second dataset (cases of another site) under the same key.
    second_raw, second = tmp / "referral" / "raw-2", tmp / "referral" / "prepared-2"
    plugin.write_demo_dataset(second_raw, 30, seed=2)
    ok(cli("dataset", "prepare", str(second_raw), str(second), "--benchmark", b,
           "--profile", "referral"))
    ids["referral-2"] = int(_json(cli("dataset", "register", str(second), "--name",
                                      "referral-fna-2", "--benchmark", b, "--json",
                                      "--profile", "referral"))["id"])
    ok(cli("dataset", "seal", str(second), "--dataset", str(ids["referral-2"]),
           "--profile", "referral"))
    ok(cli("dataset", "associate", "--dataset", str(ids["referral-2"]), "--benchmark", b,
           "--profile", "referral"))
    ok(cli("association", "approve", "--benchmark", b, "--dataset", str(ids["referral-2"]),
           "--profile", "authority"))
    for site in SITES:
        synced = _json(cli("policy", "sync", "--dataset", str(ids[site]), "--json",
                           "--profile", site))
        # per model: the evaluation image's identity and the aggregator's (issue 27)
        assert len(synced["workloads"]) == 4 + 4 * (site == "referral")  # type: ignore[arg-type]
    # Syncing the second dataset keeps the first one's grants (the key and the pool provider
    # are shared): syncing the first again changes nothing.
    ok(cli("policy", "sync", "--dataset", str(ids["referral-2"]), "--profile", "referral"))
    again = ok(cli("policy", "sync", "--dataset", str(ids["referral"]), "--profile",
                   "referral"))
    assert "nothing to change" in again.output, again.output
    for lab in LABS:
        ok(cli("policy", "sync", "--model", str(ids[lab]), "--profile", lab))


@pytest.fixture(scope="module")
def evaluated(world: World) -> list[dict[str, object]]:
    """Each hospital runs every approved model on the mock TEE, opens its per-case results and
    submits the attested summaries; returns what the authority then reads (verified)."""
    cli, ids = world.cli, world.ids
    b = str(ids["b"])
    for site in SITES:
        ran = ok(cli("run", "--benchmark", b, "--dataset", str(ids[site]), "--all-approved",
                     "--tee", "mock", "--profile", site))
        assert ran.output.count("succeeded") == 2, ran.output
        runs = json.loads(ok(cli("result", "ls", "--json", "--profile", site)).stdout)
        assert [r["status"] for r in runs] == ["succeeded", "succeeded"]
        for record in runs:
            opened = ok(cli("result", "open", record["run_id"], "--json", "--profile", site))
            # the per-case results (private to the hospital) name its cases
            assert re.search(r"wdbc-\d{4}", opened.stdout)
            submitted = ok(cli("result", "submit", record["run_id"], "--profile", site))
            assert "attestation verified" in submitted.output
    verified: list[dict[str, object]] = json.loads(
        ok(cli("benchmark", "results", b, "--json", "--profile", "authority")).stdout)
    return verified


def _summary(result: dict[str, object]) -> dict[str, object]:
    """The plug-in's summary document inside a registry result (the run's ResultSummary)."""
    summary = result["summary"]
    assert isinstance(summary, dict) and summary["metrics_version"] == "wdbc/1"
    aggregates = summary["aggregates"]
    assert isinstance(aggregates, dict)
    return aggregates


def test_every_result_is_a_verified_dataset_level_summary(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    assert {(r["dataset_id"], r["model_id"]) for r in evaluated} == {  # not referral-2: not run
        (world.ids[site], world.ids[lab]) for site in SITES for lab in LABS}
    for result in evaluated:
        summary = _summary(result)
        assert summary["summary_id"] == "sealbench/wdbc-summary"
        assert not re.search(r"wdbc-\d{4}", json.dumps(summary))  # no case id is published
        # a differentially private release (epsilon 1 per release, OpenDP noise), no exact figure
        release = summary["release"]
        assert isinstance(release, dict)
        assert release["mechanism"] == "gaussian" and release["epsilon"] == 1.0
        assert release["library"].startswith("opendp ")
        assert "auroc" not in summary and "n_malignant" not in summary
        n_cases = summary["n_cases"]
        assert n_cases in {cases for _, cases in SITES.values()}


def test_leaderboard_ranks_by_auroc(world: World, evaluated: list[dict[str, object]]) -> None:
    cli, b = world.cli, str(world.ids["b"])
    assert evaluated
    board = json.loads(ok(cli("benchmark", "leaderboard", b, "--json",
                              "--profile", "authority")).stdout)
    assert {row["model_id"] for row in board["standings"]} == {
        world.ids["lab-lr"], world.ids["lab-mlp"]}
    assert "AUROC" in ok(cli("benchmark", "leaderboard", b, "--profile", "authority")).output


def test_dashboard_leaderboard_shows_each_sites_auroc(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    """The authority's dashboard (signed in with its token) shows the benchmark's leaderboard
    in the plug-in's terms: AUROC, each model's value on each site as that site's release gives
    it (a site of 100 cases at epsilon 1 is too noisy for an AUROC: shown without a value)."""
    with httpx.Client(base_url=world.url, timeout=30, follow_redirects=True) as browser:
        form = browser.get("/ui/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        signed = browser.post("/ui/sign-in", data={
            "csrf": csrf.group(1), "token": world.tokens["authority"], "next": "/ui/"})
        assert signed.status_code == 200, signed.text
        page = browser.get(f"/ui/benchmarks/{world.ids['b']}/leaderboard")
        assert page.status_code == 200, page.text
    assert "AUROC" in page.text
    from sealbench.benchmarks.interface import MetricRef
    from sealbench.benchmarks.registry import load

    plugin = load(BenchmarkPin.parse("wdbc/1"))
    for result in evaluated:
        figures = {f.ref: f for f in plugin.figures(plugin.parse_summary(_summary(result)))}
        auroc = figures[MetricRef("auroc")]
        if auroc.value is not None:
            assert f"{auroc.value:.3f}" in page.text, auroc



def test_exact_release_benchmark_runs_only_for_the_consenting_hospital(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    """A benchmark pinned ``wdbc/1-exact`` (an exported definition with its pin switched): the
    screening hospital joins only with --consent-exact-release; its run on the mock TEE is
    released its key (the exact pin is in its condition), publishes an exact release (no noise,
    no epsilon) that ``result open`` matches to the sealed cases, and the registry accepts it
    charging no privacy budget."""
    cli, ids, tmp = world.cli, world.ids, world.tmp
    assert evaluated  # after the private benchmark's runs, which this one must not disturb
    exported = json.loads(ok(cli("benchmark", "definition", "export", "wdbc")).stdout)
    definition = tmp / "wdbc-exact.json"
    definition.write_text(json.dumps({**exported, "name": "wdbc-exact",
                                      "plugin": "wdbc/1-exact"}))
    created = _json(cli("benchmark", "create", "--tee", "mock", "--definition", str(definition),
                        "--json", "--profile", "authority"))
    assert created["metrics_version"] == "wdbc/1-exact"
    b = str(created["id"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    assert "publishes EXACT figures" in ok(cli("benchmark", "show", b)).output
    model, site = str(ids["lab-lr"]), str(ids["screening"])
    ok(cli("model", "associate", "--model", model, "--benchmark", b, "--profile", "lab-lr"))
    ok(cli("association", "approve", "--benchmark", b, "--model", model,
           "--profile", "authority"))
    join = ("dataset", "associate", "--dataset", site, "--benchmark", b, "--profile", "screening")
    refused = cli(*join)
    assert refused.exit_code != 0 and "--consent-exact-release" in refused.output
    ok(cli(*join, "--consent-exact-release"))
    ok(cli("association", "approve", "--benchmark", b, "--dataset", site,
           "--profile", "authority"))
    for who, kind, asset in (("screening", "--dataset", site), ("lab-lr", "--model", model)):
        ok(cli("policy", "sync", kind, asset, "--profile", who))
    ran = ok(cli("run", "--benchmark", b, "--dataset", site, "--model", model, "--tee", "mock",
                 "--profile", "screening"))
    assert "succeeded" in ran.output, ran.output
    runs = json.loads(ok(cli("result", "ls", "--json", "--profile", "screening")).stdout)
    [record] = [r for r in runs if str(r["benchmark_id"]) == b]
    ok(cli("result", "open", record["run_id"], "--profile", "screening"))
    ok(cli("result", "submit", record["run_id"], "--profile", "screening"))
    [result] = json.loads(ok(cli("benchmark", "results", b, "--json",
                                 "--profile", "authority")).stdout)
    release = result["summary"]["aggregates"]["release"]
    assert release["mechanism"] == "exact" and release["epsilon"] is None
    assert release["sigma"] == 0
    budget = _json(cli("dataset", "budget", site, "--json", "--profile", "screening"))
    assert budget["exact_releases"] == 1 and budget["releases"] == 2  # the private runs only


def test_authority_pools_each_model_inside_the_tee(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    """``benchmark pool`` (issue 27): for each model the benchmark's aggregator image runs on the
    mock TEE, is released the three hospitals' keys by their own conditions (policy sync granted
    it), pools their sealed exact statistics under one release, and the registry verifies and
    stores it, debiting each dataset once; the leaderboard marks the figure TEE-pooled. A second
    pool finds nothing left; a hospital cannot pool."""
    cli, ids = world.cli, world.ids
    b = str(ids["b"])
    assert evaluated
    refused = cli("benchmark", "pool", b, "--profile", "screening")
    assert refused.exit_code != 0, refused.output
    outcomes = json.loads(ok(cli("benchmark", "pool", b, "--json",
                                 "--profile", "authority")).stdout)
    assert {o["model_id"] for o in outcomes} == {ids["lab-lr"], ids["lab-mlp"]}
    total = sum(cases for _, cases in SITES.values())
    for outcome in outcomes:
        assert outcome["n_sites"] == len(SITES) and outcome["n_cases"] == total, outcome
        # the pooled summary (version 3) splits the pin's epsilon 1: the breakdown Gaussian,
        # the headline AUROC computed over every case and released alone by Laplace
        release, headline = outcome["aggregates"]["release"], outcome["aggregates"]["auroc"]
        assert release["mechanism"] == "gaussian" and headline["mechanism"] == "laplace"
        assert release["epsilon"] + headline["epsilon"] == pytest.approx(1.0)
        assert not re.search(r"wdbc-\d{4}", json.dumps(outcome))  # no case id is published
    board = json.loads(ok(cli("benchmark", "leaderboard", b, "--json",
                              "--profile", "authority")).stdout)
    pooled = {m["model_id"]: m["tee_pooled"] for m in board["standings"]
              if m.get("tee_pooled")}
    assert set(pooled) == {ids["lab-lr"], ids["lab-mlp"]}, board
    assert all(p["n_sites"] == len(SITES) for p in pooled.values())
    for site in SITES:
        budget = _json(cli("dataset", "budget", str(ids[site]), "--json", "--profile", site))
        debits = [d for d in budget["debits"] if d.get("pool_authorization_id")]
        assert len(debits) == 2, budget  # one per model's pool authorization
    again = json.loads(ok(cli("benchmark", "pool", b, "--json",
                              "--profile", "authority")).stdout)
    assert all("release_id" not in o for o in again), again
    assert all("nothing new to pool" in o["reason"] for o in again), again


# -- the attacks of issue 40, against the real registry and the mock TEE -----------------------


def _budgets(world: World) -> dict[str, float]:
    return {site: _json(world.cli("dataset", "budget", str(world.ids[site]), "--json",
                                  "--profile", site))["spent_rho"] for site in SITES}


@dataclass
class _Operator:
    """The registry operator: the database (read here through the authority's view of it, which
    holds the same rows) and the pool-release key file, launching the genuine aggregator image
    on the mock TEE by hand, as many times as it likes, submitting nothing."""

    world: World

    def relaunch(self, authorization: Any, name: str) -> tuple[Path, Any]:
        from sealbench.client.cli.common import session
        from sealbench.client.runs.launch import local_routes
        from sealbench.client.runs.launchers.for_profile import (
            CsOptions,
            make_aggregator_launcher,
        )
        from sealbench.client.runs.pool import PoolFolder, aggregate_spec, require_aggregator
        from sealbench.contract.pool import POOL_INPUTS_OBJECT

        b = self.world.ids["b"]
        with session("authority") as s:
            bench = s.client.get_benchmark(b)
            endpoints = local_routes(s.profile, None)
            launcher = make_aggregator_launcher(
                "mock", profile=s.profile, client=s.client, benchmark=bench,
                endpoints=endpoints, mock_tee=None, image=None, cs=CsOptions())
            uri, store, prefix = PoolFolder((self.world.tmp / "operator").as_uri()).create(name)
            store.put_bytes(f"{prefix}/{POOL_INPUTS_OBJECT}".lstrip("/"),
                            authorization.to_bytes())
            spec = aggregate_spec(authorization, require_aggregator(bench).anchor, name, uri,
                                  endpoints.token_destinations)
            workload = launcher.start_aggregator(spec)
            try:
                outcome = workload.wait(300)
            except Exception as exc:  # noqa: BLE001 - the attack's outcome is inspected below
                outcome = exc
        return self.world.tmp / "operator" / name, outcome

    def open(self, folder: Path, pool_id: str) -> bytes:
        from sealbench.crypto.sealing import load_private_key, open_sealed, pooled_release_info

        key = load_private_key(self.world.tmp / "registry" / "pool-release.key")
        aggregator = _json(self.world.cli("benchmark", "show", str(self.world.ids["b"]),
                                          "--json", "--profile", "authority"))
        return open_sealed((folder / "pooled.sealed").read_bytes(), key, pooled_release_info(
            pool_id, str(self.world.ids["b"]), aggregator["aggregator_image_digest"]))


def _authorization(world: World, model: str) -> Any:
    from sealbench.client.cli.common import session

    with session("authority") as s:
        [*_, last] = s.client.pool_authorizations(world.ids["b"], world.ids[model])
        return s.client.pool_authorization(world.ids["b"], last.pool_id)


def test_registry_operator_relaunching_the_aggregator_gets_the_same_release_each_time(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    """The attack that drew 30 free releases: the operator relaunches the genuine aggregator
    image again and again on one (already debited and published) authorization and opens every
    release with the pool-release key. Every release is the same draw; no budget moved. Three
    launches (ten before issue 42's suite cut): the draw is derived from the authorization, so
    a second launch already shows whether a relaunch draws again, and a third that it does not
    depend on the launch's count or folder."""
    authorization = _authorization(world, "lab-lr")
    before = _budgets(world)
    operator = _Operator(world)
    opened = set()
    for attempt in range(3):
        folder, outcome = operator.relaunch(authorization, f"relaunch-{attempt}")
        assert not isinstance(outcome, Exception), outcome
        opened.add(operator.open(folder, authorization.inputs.pool_id))
    assert len(opened) == 1  # the very same release, three times
    assert _budgets(world) == before
    # and submitting one of them publishes nothing new: the authorization has its release
    from sealbench.client.cli.common import session
    from sealbench.client.errors import ConflictError

    folder = world.tmp / "operator" / "relaunch-0"
    with session("authority") as s, pytest.raises(ConflictError, match="already produced"):
        s.client.submit_pooled_release(
            world.ids["b"], sealed=(folder / "pooled.sealed").read_bytes(),
            token=(folder / "pooled.token").read_text(), inputs=authorization.inputs)
    assert _budgets(world) == before


def test_registry_operator_on_its_own_inputs_draws_nothing(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    """The operator writes its own inputs (one site's run) and signs them with a key of its own
    (it holds the database and the pool-release key, not the log key the benchmark pins): the
    aggregator refuses the authorization before any key is released, and draws nothing."""
    from sealbench.contract.errors import AuthorizationRefused
    from sealbench.crypto.note import SignerKey
    from tests.pool_ledger import Ledger

    genuine = _authorization(world, "lab-mlp")
    recipient = _json(world.cli("benchmark", "show", str(world.ids["b"]), "--json",
                                "--profile", "authority"))["pool_recipient_key"]
    # a key of its own under the log's very name
    forger = Ledger(recipient, log=SignerKey.generate(genuine.checkpoint.split("\n")[0]))
    own = forger.authorize(genuine.inputs.model_copy(update={
        "pool_id": "operator-pool", "inputs": genuine.inputs.inputs[:2], "debits": ()}),
        rho=genuine.inputs.rho, laplace=genuine.inputs.laplace)  # the genuine cost, both parts
    before = _budgets(world)
    folder, outcome = _Operator(world).relaunch(own, "own-inputs")
    assert isinstance(outcome, Exception), outcome
    record = json.loads((folder / "failure.json").read_text())
    assert record["error"] == AuthorizationRefused.__name__
    assert "not signed by the benchmark's log key" in record["reason"]
    assert not (folder / "pooled.sealed").exists()
    assert _budgets(world) == before


def test_a_withdrawn_dataset_is_never_pooled_and_a_one_site_pool_is_refused(
    world: World, evaluated: list[dict[str, object]]
) -> None:
    """A hospital withdraws its dataset after a pool was authorized over it: the release is
    refused at submit (nothing published), the next authorization leaves it out, its owner's
    policy sync drops the aggregator's grant, and once only one site is left no pool is
    authorized (that would be the site's own release) and nothing is debited."""
    from sealbench.client.cli.common import session
    from sealbench.client.errors import ConflictError

    cli, ids = world.cli, world.ids
    b = str(ids["b"])
    # a new result at one site makes the pool's inputs new: the authority authorizes it
    ok(cli("run", "--benchmark", b, "--dataset", str(ids["clinic"]), "--model",
           str(ids["lab-lr"]), "--tee", "mock", "--force", "--profile", "clinic"))
    runs = json.loads(ok(cli("result", "ls", "--json", "--profile", "clinic")).stdout)
    latest = max((r for r in runs if str(r["benchmark_id"]) == b
                  and r["model_id"] == ids["lab-lr"]), key=lambda r: r["started_at"])
    ok(cli("result", "open", latest["run_id"], "--profile", "clinic"))
    ok(cli("result", "submit", latest["run_id"], "--profile", "clinic"))
    with session("authority") as s:
        authorized = s.client.authorize_pool(ids["b"], ids["lab-lr"])
        assert sorted(authorized.datasets) == sorted(ids[site] for site in SITES)
        authorization = s.client.pool_authorization(ids["b"], authorized.pool_id)
    # the screening hospital withdraws its dataset (it has not synced its policy yet)
    ok(cli("association", "withdraw", "--benchmark", b, "--dataset", str(ids["screening"]),
           "--profile", "screening"))
    before = _budgets(world)
    operator = _Operator(world)
    folder, outcome = operator.relaunch(authorization, "after-withdrawal")
    assert not isinstance(outcome, Exception), outcome  # its key was still released...
    with session("authority") as s, pytest.raises(ConflictError, match="no longer approved"):
        s.client.submit_pooled_release(  # ...but the registry publishes nothing of it
            ids["b"], sealed=(folder / "pooled.sealed").read_bytes(),
            token=(folder / "pooled.token").read_text(), inputs=authorization.inputs)
    # the owner's sync drops the aggregator's grant with the association
    synced = _json(cli("policy", "sync", "--dataset", str(ids["screening"]), "--json",
                       "--profile", "screening"))
    assert all(w["benchmark"] != ids["b"] for w in synced["workloads"]), synced
    aggregator = _json(cli("benchmark", "show", b, "--json", "--profile", "authority"))
    assert any(aggregator["aggregator_image_digest"] in r for r in synced["removed"]), synced
    # the next pool leaves the withdrawn dataset out, saying why
    outcomes = json.loads(ok(cli("benchmark", "pool", b, "--model", str(ids["lab-lr"]),
                                 "--json", "--profile", "authority")).stdout)
    [outcome] = outcomes
    assert outcome["n_sites"] == 2, outcome
    assert any(f"dataset {ids['screening']}" in line and "not approved" in line
               for line in outcome["left_out"]), outcome
    assert _budgets(world)["screening"] == before["screening"]
    # one site left: no pool is authorized, nothing is debited
    ok(cli("association", "withdraw", "--benchmark", b, "--dataset", str(ids["clinic"]),
           "--profile", "clinic"))
    before = _budgets(world)
    refused = json.loads(ok(cli("benchmark", "pool", b, "--model", str(ids["lab-mlp"]),
                                "--json", "--profile", "authority")).stdout)
    assert "at least 2 sites" in refused[0]["reason"], refused
    assert _budgets(world) == before
