"""Real commands through typer's CliRunner, in-process: every session's registry client goes
over the FastAPI ``TestClient`` transport of the real registry app (SQLite in ``tmp_path``)
instead of a server process (:func:`~sealbench.client.cli.common.using_client_factory`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.client.cli.common import using_client_factory
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import Profile, ProfileStore, ResolvedProfile
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import BenchmarkCreate

Cli = Callable[..., Result]
SERVER = "http://testserver"


def _tiny_onnx(path: Path) -> Path:
    """A 1x1x1 convolution from four modalities to four classes, dynamic spatial axes."""
    weight = np.random.default_rng(7).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
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


@pytest.fixture
def connected() -> list[str]:
    """The profiles whose sessions built a client (over the in-process transport)."""
    return []


@pytest.fixture
def cli(
    runner: CliRunner, cli_home: Path, http: TestClient, registry: Any, connected: list[str]
) -> Iterator[Cli]:
    """``sealbench ARGS`` with a profile per test account (hospital current), each session's
    client over the in-process app."""
    store = ProfileStore.from_environment(os.environ)
    for name, token in registry.tokens.items():
        store.add(name, Profile(server=SERVER, token=token), make_current=name == "hospital")
    transport = http._transport

    def in_process(profile: ResolvedProfile) -> RegistryClient:
        connected.append(profile.name)
        return RegistryClient.connect(profile.server, profile.token, transport=transport)

    with using_client_factory(in_process):
        yield lambda *args: runner.invoke(app, list(args))


def test_benchmark_ls_lists_the_registered_benchmark(
    cli: Cli, api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate],
    connected: list[str],
) -> None:
    created = api["authority"].create_benchmark(benchmark_body("in-process"))
    listed = cli("benchmark", "ls", "--json", "--profile", "authority")
    assert listed.exit_code == 0, listed.output
    assert [b["id"] for b in json.loads(listed.stdout)] == [created.id]
    shown = cli("benchmark", "ls", "--profile", "authority")
    assert shown.exit_code == 0, shown.output
    assert "in-process" in shown.stdout and "(you)" in shown.stdout
    assert connected == ["authority", "authority"]


def test_model_register_then_show(cli: Cli, tmp_path: Path) -> None:
    onnx = _tiny_onnx(tmp_path / "m.onnx")
    registered = cli("model", "register", str(onnx), "--name", "tiny", "--json",
                     "--definition", "brats", "--profile", "modelco")
    assert registered.exit_code == 0, registered.output
    body = json.loads(registered.stdout)
    assert body["digest"] == sha256_digest(onnx.read_bytes())
    again = cli("model", "register", str(onnx), "--name", "again", "--definition", "brats",
                "--profile", "modelco")
    assert again.exit_code == 0, again.output
    assert f"already registered as {body['id']} 'tiny' (yours)" in " ".join(again.output.split())


def test_result_ls_without_runs(cli: Cli) -> None:
    listed = cli("result", "ls", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []
    table = cli("result", "ls")
    assert table.exit_code == 0, table.output
    assert "runs" in table.stdout


def test_errors_keep_their_exit_codes(cli: Cli) -> None:
    missing = cli("benchmark", "show", "999999")
    assert missing.exit_code == 4, missing.output
    assert "error:" in missing.stderr
    no_key = cli("keys", "show")  # no 'keys init' yet: a configuration error
    assert no_key.exit_code == 3, no_key.output
    made = cli("keys", "init")
    assert made.exit_code == 0, made.output
    digest = made.stdout.split("recipient digest ")[1].strip()
    assert json.loads(cli("keys", "show", "--json").stdout)["recipient_digest"] == digest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("policy", "sync"), "name exactly one of --dataset and --model (or use --watch)"),
        (("policy", "sync", "--dataset", "1", "--once"), "--once goes with --watch"),
        (("policy", "sync", "--model", "1", "--result-bucket", "b"),
         "--result-bucket goes with --dataset: results belong to the data owner"),
        (("run", "--benchmark", "1", "--dataset", "1"),
         "name --model ID or --all-approved (not both)"),
        (("run", "--benchmark", "1", "--model", "1"),
         "name --dataset ID (or --all-approved for each of your datasets)"),
        (("run", "--benchmark", "1", "--all-approved", "--tee", "nowhere"),
         "unknown TEE backend 'nowhere'"),
    ],
)
def test_the_split_commands_refuse_as_before(cli: Cli, args: tuple[str, ...],
                                             message: str) -> None:
    refused = cli(*args)
    assert refused.exit_code == 3, refused.output
    assert message in " ".join(refused.stderr.split())
