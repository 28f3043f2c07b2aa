"""The Docker backend through the ``sealbench`` CLI (typer's CliRunner), on this session's one
evaluation image: ``image build --no-cache`` of unchanged sources reports that very image; a
benchmark created with ``--tee docker`` pins its digest; ``run --tee docker`` evaluates in it
and the registry verifies the result's attestation of that digest; the same run launched as a
debug image is refused its keys; and ``demo --tee docker`` plays every role through Docker."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.client.registry.local import create_accounts, publish_log_key, registry_process
from sealbench.mocktee import MockCloud

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.images.build import ImageBuildResult

pytestmark = pytest.mark.slow

ACCOUNTS = {
    "admin": ("admin@docker-cli.example", True),
    "authority": ("authority@docker-cli.example", False),
    "hospital": ("it@hospital.docker-cli.example", False),
    "lab": ("ml@lab.docker-cli.example", False),
}
Cli = Callable[..., Result]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def _tiny_onnx(path: Path) -> Path:
    weight = np.random.default_rng(0).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


@dataclass
class CliWorld:
    cli: Cli
    benchmark: int
    dataset: int
    model: int


def _cli() -> Cli:
    runner = CliRunner()

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args))

    return cli


@pytest.fixture(scope="module")
def cli_world(
    tmp_path_factory: pytest.TempPathFactory,
    evaluation_image: ImageBuildResult,
    source_snapshot: Path,
) -> Iterator[CliWorld]:
    """A registry and a mock TEE with one hospital and one model owner, everything approved and
    both policies synced for a benchmark created with ``--tee docker``. The commands run in the
    snapshot the session image was built from (the checkout they compare the image with), so an
    edit of the checkout meanwhile does not make the image stale."""
    tmp = tmp_path_factory.mktemp("docker-cli")
    patch = pytest.MonkeyPatch()
    patch.chdir(source_snapshot)
    patch.setenv("SEALBENCH_CONFIG_DIR", str(tmp / "home"))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER", "SEALBENCH_TOKEN"):
        patch.delenv(name, raising=False)
    cli = _cli()
    try:
        with MockCloud(tmp / "mock") as cloud:
            tokens = create_accounts(tmp / "registry", ACCOUNTS)
            log_key = publish_log_key(tmp / "registry")  # the operator's, given out of band
            with registry_process(tmp / "registry", cloud.endpoints, tmp / "server.log") as url:
                for name, token in tokens.items():
                    ok(cli("profile", "add", name, "--server", url, "--token", token,
                           "--mock-tee", str(tmp / "mock"), "--log-key", log_key))
                created = json.loads(ok(cli("benchmark", "create", "--tee", "docker",
                                            "--definition", "brats-small", "--json",
                                            "--profile", "authority")).stdout)
                assert created["image_digest"] == evaluation_image.digest
                b = str(created["id"])
                ok(cli("benchmark", "approve", b, "--profile", "admin"))
                onnx = _tiny_onnx(tmp / "tiny.onnx")
                m = str(json.loads(ok(cli("model", "register", str(onnx), "--name", "tiny",
                                          "--benchmark", b, "--json", "--profile", "lab")
                                      ).stdout)["id"])
                ok(cli("model", "seal", str(onnx), "--model", m, "--profile", "lab"))
                ok(cli("model", "associate", "--model", m, "--benchmark", b, "--profile", "lab"))
                ok(cli("keys", "init", "--profile", "hospital"))
                raw, prepared = tmp / "raw", tmp / "prepared"
                ok(cli("dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b,
                       "--profile", "hospital"))
                ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
                       "--profile", "hospital"))
                d = str(json.loads(ok(cli("dataset", "register", str(prepared), "--name", "h",
                                          "--benchmark", b, "--json", "--profile", "hospital")
                                      ).stdout)["id"])
                ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", "hospital"))
                ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b,
                       "--profile", "hospital"))
                for kind, asset in (("--dataset", d), ("--model", m)):
                    ok(cli("association", "approve", "--benchmark", b, kind, asset,
                           "--profile", "authority"))
                ok(cli("policy", "sync", "--dataset", d, "--profile", "hospital"))
                ok(cli("policy", "sync", "--model", m, "--profile", "lab"))
                yield CliWorld(cli, int(b), int(d), int(m))
    finally:
        patch.undo()


def test_no_cache_image_build_of_unchanged_sources_reports_the_session_image(
    docker_engine: DockerClient, source_snapshot: Path, evaluation_image: ImageBuildResult,
    aggregator_image: ImageBuildResult,
) -> None:
    """``image build --no-cache`` of the sources the session image was built from: every step
    runs again (a new wheelhouse, new build containers, new times), and the layers come out
    byte-identical, so the command prints the session image's reference and digest, and the
    aggregator's. (A cached rebuild gives them too, a fortiori: it reuses those layers.)"""
    built = CliRunner().invoke(app, ["image", "build", "--source", str(source_snapshot),
                                     "--no-cache"])
    assert built.exit_code == 0, built.output
    assert f"digest {evaluation_image.digest}" in built.stdout
    assert f"image {evaluation_image.reference}" in built.stdout
    assert f"aggregator digest {aggregator_image.digest}" in built.stdout
    layers = docker_engine.images.get(evaluation_image.digest).attrs["RootFS"]["Layers"]
    assert len(layers) == 2  # the base and the one layer sealbench adds


def test_run_on_docker_yields_a_result_the_registry_verifies_for_the_image(
    cli_world: CliWorld, evaluation_image: ImageBuildResult
) -> None:
    cli, w = cli_world.cli, cli_world
    ran = ok(cli("run", "--benchmark", str(w.benchmark), "--dataset", str(w.dataset),
                 "--model", str(w.model), "--tee", "docker", "--profile", "hospital"))
    assert "succeeded" in ran.output
    record = json.loads(ok(cli("result", "ls", "--json", "--profile", "hospital")).stdout)[-1]
    assert record["tee"] == "docker" and record["image_digest"] == evaluation_image.digest
    submitted = json.loads(ok(cli("result", "submit", record["run_id"], "--json",
                                  "--profile", "hospital")).stdout)
    assert submitted["image_digest"] == evaluation_image.digest  # verified by the registry


def test_docker_run_as_a_debug_image_is_denied_its_keys(cli_world: CliWorld) -> None:
    cli, w = cli_world.cli, cli_world
    result = cli("run", "--benchmark", str(w.benchmark), "--dataset", str(w.dataset),
                 "--model", str(w.model), "--tee", "docker", "--insecure-debug-image", "--force",
                 "--profile", "hospital")
    assert result.exit_code == 7, result.output
    assert "KeyReleaseDenied" in result.output, result.output  # the run's line says it once


def test_docker_run_of_an_absent_image_says_how_to_build_it(cli_world: CliWorld) -> None:
    cli, w = cli_world.cli, cli_world
    result = cli("run", "--benchmark", str(w.benchmark), "--dataset", str(w.dataset),
                 "--model", str(w.model), "--tee", "docker", "--image",
                 "sealbench-eval:no-such-tag", "--force", "--profile", "hospital")
    assert result.exit_code == 3, result.output
    assert "not present" in result.output and "sealbench image build" in result.output


def test_benchmark_refuses_an_image_built_from_other_sources(
    cli_world: CliWorld, source_snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a checkout edited after the session image was built: ``benchmark create --tee
    docker`` says the image is stale and how to rebuild it, instead of pinning it."""
    edited = tmp_path / "checkout"
    shutil.copytree(source_snapshot, edited)
    with (edited / "enclave" / "run.py").open("a") as handle:
        handle.write("\n# edited after the image was built\n")
    monkeypatch.chdir(edited)
    result = cli_world.cli("benchmark", "create", "--definition", "brats",
                           "--tee", "docker", "--profile", "authority")
    assert result.exit_code == 3, result.output
    assert "was built from other sources" in result.output
    assert "sealbench image build" in result.output


def test_demo_on_docker_pins_and_runs_the_session_image(
    tmp_path: Path,
    evaluation_image: ImageBuildResult,
    aggregator_image: ImageBuildResult,
    source_snapshot: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    monkeypatch.chdir(source_snapshot)  # the checkout the session image was built from
    workdir = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--tee", "docker", "--cases", "1", "--size",
                                      "small", "--workdir", str(workdir)])
    assert result.exit_code == 0, result.output[-4000:]
    assert f"({evaluation_image.digest}), reused: built from this checkout" in result.stdout
    assert "refused, as it must be" in result.stdout and "key release denied" in result.stdout
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        (digest,) = db.execute("SELECT image_digest FROM benchmarks").fetchone()
        pinned = db.execute("SELECT DISTINCT image_digest FROM results").fetchall()
    assert digest == evaluation_image.digest
    assert pinned == [(evaluation_image.digest,)]  # four verified results, all from the image
    # and it pools inside the TEE with the aggregator image built beside it (issue 27)
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        (aggregator,) = db.execute("SELECT aggregator_image_digest FROM benchmarks").fetchone()
        pooled = db.execute("SELECT DISTINCT image_digest FROM pooled_releases").fetchall()
    assert aggregator == aggregator_image.digest != evaluation_image.digest
    assert pooled == [(aggregator_image.digest,)]
    log = (workdir / "demo.log").read_text()
    assert "benchmark pool 1 --tee docker" in log
    assert "inside the TEE; attestation verified" in log
    runs = [json.loads(p.read_bytes()) for p in workdir.glob("config/**/runs/*.json")]
    assert runs and all(r["tee"] == "docker" for r in runs)
