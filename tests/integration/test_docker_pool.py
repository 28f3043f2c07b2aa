"""The benchmark's aggregator as a real Docker image (issue 27), through every role's CLI: the
aggregator image derived from this session's evaluation image is an image of its own (same
layers, its own command and launch policy, its own reproducible digest); a WDBC benchmark
created with ``--tee docker`` names it as its aggregator; three hospitals (the demo's three
disjoint sites, all their cases) run the lab's model in the evaluation image and submit;
``benchmark pool --tee docker`` runs the aggregator image for the model, which is released each
hospital's key by the hospital's own condition, pools every case under one release, and the
registry verifies it as attested by the aggregator image, not the evaluation image.

One model: that the aggregator image pools each model of a benchmark apart (several models,
each its own release, all attested by the aggregator image) is held through Docker by
``test_docker_cli.py::test_demo_on_docker_pins_and_runs_the_session_image`` (the demo's two
models) and the per-model grouping itself, exactly, by ``tests/e2e/test_wdbc_cli_flow.py``; a
second model here ran three more evaluations and one more aggregation in Docker (about a minute
at load) for no property of its own.

The release's noise cannot be switched off in the image (it is never an operator input), so
the pooled figures are checked against the exact ones within the release's own noise scale;
exactness with the noise off is tested in ``tests/unit/enclave/test_aggregate.py``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from sklearn.metrics import roc_auc_score

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import LocalExact, Release
from sealbench.benchmarks.wdbc import summary as wdbc
from sealbench.benchmarks.wdbc.private_auroc import Floor
from sealbench.client.images.build import (
    AGGREGATOR_ENTRYPOINT,
    LABEL_ALLOW_ENV_OVERRIDE,
    LABEL_TITLE,
    build_aggregator_image,
)
from sealbench.contract.pool import AGGREGATE_ENV_NAMES
from tests.cli_world import Cli, cli_world, json_of, ok

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.images.build import ImageBuildResult

pytestmark = pytest.mark.slow

ACCOUNTS = {
    "admin": ("admin@docker-pool.example", True),
    "authority": ("authority@docker-pool.example", False),
    "referral": ("it@referral.docker-pool.example", False),
    "screening": ("it@screening.docker-pool.example", False),
    "general": ("it@general.docker-pool.example", False),
    "lab-lr": ("ml@lab-lr.docker-pool.example", False),
}
#: Hospital profile -> (demo seed of its site, its cases): the demo's disjoint sites, whole.
SITES = {"referral": (0, 100), "screening": (1, 120), "general": (2, 178)}
LABS = {"lab-lr": "wdbc_logreg"}
#: How many noise standard deviations a released figure may lie from the exact one.
NOISE_BOUND = 6.0


@dataclass
class World:
    cli: Cli
    url: str
    tokens: dict[str, str]
    ids: dict[str, int]
    #: model id -> every hospital's per-case results of it (what each hospital opened).
    per_case: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


_json = json_of


def test_aggregator_is_an_image_of_its_own_with_a_reproducible_digest(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult,
    aggregator_image: ImageBuildResult,
) -> None:
    again = build_aggregator_image(docker_engine, evaluation_image.digest)
    assert again.digest == aggregator_image.digest != evaluation_image.digest
    evaluation = docker_engine.images.get(evaluation_image.digest).attrs
    aggregator = docker_engine.images.get(aggregator_image.digest).attrs
    assert aggregator["RootFS"]["Layers"] == evaluation["RootFS"]["Layers"]  # no new layer
    assert aggregator["Config"]["Entrypoint"] == list(AGGREGATOR_ENTRYPOINT)
    assert not aggregator["Config"].get("Cmd")
    labels = aggregator["Config"]["Labels"]
    assert labels[LABEL_ALLOW_ENV_OVERRIDE] == ",".join(AGGREGATE_ENV_NAMES)
    assert labels[LABEL_TITLE] == "sealbench aggregator"


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, source_snapshot: Path,
    evaluation_image: ImageBuildResult, aggregator_image: ImageBuildResult,
) -> Iterator[World]:
    """A registry and a mock TEE; the WDBC benchmark on Docker pooling with the aggregator
    image; the model run on every hospital's cases in the evaluation image and submitted.
    The commands run in the snapshot the images were built from (the checkout ``benchmark
    create --tee docker`` compares the evaluation image with)."""
    tmp = tmp_path_factory.mktemp("docker-pool")
    with cli_world(tmp, ACCOUNTS, cwd=source_snapshot) as base:
        world = World(base.cli, base.url, base.tokens, {})
        _publish_register_seal_approve_sync(world, tmp, evaluation_image, aggregator_image)
        _run_open_submit(world)
        yield world


def _publish_register_seal_approve_sync(world: World, tmp: Path, evaluation: ImageBuildResult,
                                        aggregator: ImageBuildResult) -> None:
    cli, ids = world.cli, world.ids
    plugin = PluginRegistry().get("wdbc")
    created = _json(cli("benchmark", "create", "--tee", "docker", "--definition", "wdbc",
                        "--aggregator-digest", aggregator.digest, "--json",
                        "--profile", "authority"))
    assert created["image_digest"] == evaluation.digest
    assert created["aggregator_image_digest"] == aggregator.digest
    ids["b"] = created["id"]
    b = str(ids["b"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    for lab, name in LABS.items():
        onnx = tmp / f"{name}.onnx"
        onnx.write_bytes(plugin.model_bytes(name))
        ids[lab] = _json(cli("model", "register", str(onnx), "--name", name, "--benchmark", b,
                             "--json", "--profile", lab))["id"]
        ok(cli("model", "seal", str(onnx), "--model", str(ids[lab]), "--profile", lab))
        ok(cli("model", "associate", "--model", str(ids[lab]), "--benchmark", b,
               "--profile", lab))
        ok(cli("association", "approve", "--benchmark", b, "--model", str(ids[lab]),
               "--profile", "authority"))
    for site, (seed, cases) in SITES.items():
        raw, prepared = tmp / site / "raw", tmp / site / "prepared"
        plugin.write_demo_dataset(raw, cases, seed=seed)
        ok(cli("keys", "init", "--profile", site))
        ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
               "--profile", site))
        ids[site] = _json(cli("dataset", "register", str(prepared), "--name", f"{site}-fna",
                              "--benchmark", b, "--json", "--profile", site))["id"]
        d = str(ids[site])
        ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", site))
        ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", site))
        ok(cli("association", "approve", "--benchmark", b, "--dataset", d,
               "--profile", "authority"))
        # per model: the evaluation image's identity and the aggregator image's
        synced = _json(cli("policy", "sync", "--dataset", d, "--json", "--profile", site))
        assert len(synced["workloads"]) == 2 * len(LABS), synced
    for lab in LABS:
        ok(cli("policy", "sync", "--model", str(ids[lab]), "--profile", lab))


def _run_open_submit(world: World) -> None:
    """Each hospital runs the model in the evaluation image, opens its per-case results (kept
    for the exact figures) and submits the attested summaries."""
    cli, ids = world.cli, world.ids
    for site in SITES:
        ran = ok(cli("run", "--benchmark", str(ids["b"]), "--dataset", str(ids[site]),
                     "--all-approved", "--tee", "docker", "--profile", site))
        assert ran.output.count("succeeded") == len(LABS), ran.output
        for record in _json(cli("result", "ls", "--json", "--profile", site)):
            assert record["tee"] == "docker", record
            opened = _json(cli("result", "open", record["run_id"], "--json", "--profile", site))
            cases = opened["per_case"]["cases"]
            world.per_case.setdefault(int(record["model_id"]), []).extend(cases)
            ok(cli("result", "submit", record["run_id"], "--profile", site))


def _sums(release: Release) -> tuple[list[float], list[float]]:
    """Every released sum (columns, then each block's counts) and its noise sd."""
    values = [c.sum for c in release.columns]
    sds = [c.sd for c in release.columns]
    for block in release.categories:
        values += block.counts
        sds += [block.sd] * len(block.counts)
    return values, sds


def _check_within_noise(aggregates: dict[str, Any], per_case: list[dict[str, Any]]) -> None:
    """The noisy pooled release (version 3) against the exact pooled release of every case (what
    the hospitals opened): each sum of the breakdown within :data:`NOISE_BOUND` of its own noise
    sd, all of them together within a chi-square bound, and the headline AUROC (computed over
    every case, released alone by Laplace of scale b) within ``b·ln 1e8`` of scikit-learn's over
    all cases (probability 1e-8 of a false failure). At epsilon 1 a breakdown sum's sd is about
    200 and the AUROC's b about 0.04 here, so this catches a release that is not of these
    results (labels or scores inverted, another model's or dataset's cases), not one missing
    site: the exact case count and the release's datasets, checked by the caller, do."""
    summary = wdbc.parse_pooled_summary(aggregates)
    released = summary.release
    results = [wdbc.parse_case_result(c) for c in per_case]
    exact = wdbc.pooled_summary(results, "wdbc/1", LocalExact())
    assert released.n_cases == exact.n_cases == len(results)
    (noisy, sds), (truth, _) = _sums(released), _sums(exact.release)
    z = [(a - b) / sd for a, b, sd in zip(noisy, truth, sds, strict=True)]
    assert max(abs(v) for v in z) < NOISE_BOUND, z
    # chi-square with len(z) = 43 degrees of freedom: above 120 has probability < 1e-8
    assert sum(v * v for v in z) < 120, z
    # the AUROC: T = Δ·(released sum), Laplace of scale b = Δ·sd/√2 on it
    assert summary.auroc is not None and summary.auroc_floor is not None
    floor = Floor(summary.n_cases, summary.auroc_floor)
    column = summary.auroc.column(wdbc.AUROC)
    delta = float(floor.sensitivity)
    auroc, scale = delta * column.sum, delta * column.sd / math.sqrt(2)
    scores = [r.penalised_score() for r in results]
    assert None not in scores  # every case has a label
    stat = wdbc.auroc_statistic(results)
    assert stat.auroc == stat.value  # both classes reach the floor: T is the AUROC itself
    exact_auroc = roc_auc_score([bool(r.malignant) for r in results], scores)
    assert abs(auroc - exact_auroc) < scale * math.log(1e8), (auroc, exact_auroc, scale)


def test_authority_pools_the_model_in_the_docker_aggregator(
    world: World, evaluation_image: ImageBuildResult, aggregator_image: ImageBuildResult,
) -> None:
    cli, ids = world.cli, world.ids
    b = str(ids["b"])
    outcomes = _json(cli("benchmark", "pool", b, "--tee", "docker", "--json",
                         "--profile", "authority"))
    assert {o["model_id"] for o in outcomes} == {ids[lab] for lab in LABS}, outcomes
    total = sum(cases for _, cases in SITES.values())
    assert all(o["n_sites"] == len(SITES) and o["n_cases"] == total for o in outcomes), outcomes
    # what the registry verified and stored: the release attested by the aggregator image
    with httpx.Client(base_url=world.url, timeout=30) as registry:
        listed = registry.get(f"/api/v1/benchmarks/{b}/pooled-releases",
                              headers={"Authorization": f"Bearer {world.tokens['authority']}"})
    assert listed.status_code == 200, listed.text
    releases = listed.json()
    assert sorted(r["model_id"] for r in releases) == sorted(ids[lab] for lab in LABS)
    for release in releases:
        assert release["image_digest"] == aggregator_image.digest != evaluation_image.digest
        assert release["n_sites"] == len(SITES) and release["n_cases"] == total
        assert {i["dataset_id"] for i in release["inputs"]} == {ids[s] for s in SITES}
        _check_within_noise(release["aggregates"], world.per_case[release["model_id"]])
    board = _json(cli("benchmark", "leaderboard", b, "--json", "--profile", "authority"))
    pooled = {m["model_id"]: m["tee_pooled"] for m in board["standings"] if m.get("tee_pooled")}
    assert set(pooled) == {ids[lab] for lab in LABS}, board
    assert all(p["n_sites"] == len(SITES) for p in pooled.values()), board
