"""A participant's commands through typer's CliRunner against a real registry on a loopback
port: 'sealbench test' (compatibility, plain mode), 'sealbench inbox', 'association withdraw'
and 'benchmark close'."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner, Result

from sealbench.benchmarks.brats.definition import (
    load_definition,
    load_model_bytes,
    shipped_definition,
)
from sealbench.benchmarks.brats.plugin import pin_of
from sealbench.client.cli import app
from sealbench.client.runs.compat import demo_variant, write_demo_dataset
from sealbench.client.runs.records import RunRecord, RunStore
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import BenchmarkPublic

IMAGE = sha256_digest(b"participation evaluation image")
_names = iter(range(10_000))
Cli = Callable[..., Result]


def onnx_file(path: Path, in_channels: int = 4) -> Path:
    """A 1x1x1 convolution to four classes with dynamic spatial axes."""
    weight = np.random.default_rng(1).standard_normal((4, in_channels, 1, 1, 1)).astype(
        np.float32
    )
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                       ["N", in_channels, "D", "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


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


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _benchmark(cli: Cli, tmp_path: Path, *extra: str) -> int:
    # brats-small: the hospitals here prepare small (64x64x48) cases, which the registry
    # refuses in a 240x240x155 benchmark
    definition = shipped_definition("brats-small").model_copy(
        update={"name": f"part-{next(_names)}"})
    path = tmp_path / "definition.json"
    # the definition names the plug-in pin of its grid (brats-small: brats-2023-gli/1-64x64x48)
    path.write_text(json.dumps({**definition.model_dump(mode="json"),
                                "plugin": str(pin_of(definition.contract))}))
    bid = int(_json(cli("benchmark", "create", "--definition", str(path), "--image-reference",
                        f"example/eval@{IMAGE}", "--image-digest", IMAGE, *extra, "--json",
                        "--profile", "authority"))["id"])
    assert cli("benchmark", "approve", str(bid), "--profile", "admin").exit_code == 0
    return bid


def _register_model(cli: Cli, onnx: Path, profile: str = "modelco") -> int:
    return int(_json(cli("model", "register", str(onnx), "--name", f"m{next(_names)}",
                         "--version", "1", "--definition", "brats", "--json", "--profile",
                         profile))["id"])


def _checks(result: Result) -> dict[str, str]:
    return {c["name"]: c["status"] for c in json.loads(result.stdout)["checks"]}


# -- sealbench test ----------------------------------------------------------------------------


def test_reference_model_passes_on_demo_data(cli: Cli, tmp_path: Path) -> None:
    bid = _benchmark(cli, tmp_path)
    result = cli("test", "--benchmark", str(bid), "--cases", "1", "--profile", "hospital")
    assert result.exit_code == 0, result.output
    assert "plain mode: no TEE, nothing uploaded" in result.output
    assert "all checks passed" in result.output
    for name in ("benchmark", "model contract", "data contract", "inference", "metrics",
                 "time per case"):
        assert name in result.output
    assert "FAIL" not in result.output


def test_model_with_wrong_channels_fails_the_contract_and_runs_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    bid = _benchmark(cli, tmp_path)
    bad = onnx_file(tmp_path / "three.onnx", in_channels=3)
    result = cli("test", "--benchmark", str(bid), "--model", str(bad), "--cases", "1", "--json",
                 "--profile", "modelco")
    assert result.exit_code == 9, result.output
    report = json.loads(result.stdout)
    assert report["passed"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["model contract"]["status"] == "fail"
    assert "input channels 3, expected 4" in checks["model contract"]["detail"]
    assert [checks[n]["status"] for n in ("inference", "metrics", "time per case")] == [
        "skip", "skip", "skip"]
    assert "compatibility" in result.stderr or "checks failed" in result.output


def test_file_that_is_not_the_registered_model_fails_the_digest_check(
    cli: Cli, tmp_path: Path
) -> None:
    bid = _benchmark(cli, tmp_path)
    registered = _register_model(cli, onnx_file(tmp_path / "registered.onnx"))
    other = tmp_path / "other.onnx"
    other.write_bytes(load_model_bytes(load_definition().model("brats_unet_weak")))
    result = cli("test", "--benchmark", str(bid), "--model", str(other), "--model-id",
                 str(registered), "--cases", "1", "--json", "--profile", "modelco")
    assert result.exit_code == 9
    checks = _checks(result)
    assert checks["model digest"] == "fail" and checks["inference"] == "pass"
    same = cli("test", "--benchmark", str(bid), "--model", str(tmp_path / "registered.onnx"),
               "--model-id", str(registered), "--cases", "1", "--json", "--profile", "modelco")
    assert _checks(same)["model digest"] == "pass"


def test_registered_reference_model_is_found_by_its_digest(cli: Cli, tmp_path: Path) -> None:
    shipped = tmp_path / "brats_unet.onnx"
    shipped.write_bytes(load_model_bytes(load_definition().reference_model))
    reference = _register_model(cli, shipped, profile="authority")
    bid = _benchmark(cli, tmp_path, "--reference-model", str(reference))
    result = cli("test", "--benchmark", str(bid), "--cases", "1", "--json",
                 "--profile", "hospital")
    report = _json(result)
    assert report["passed"] is True and f"registry model {reference}" in report["model"]
    assert _checks(result)["model digest"] == "pass"
    unknown = _register_model(cli, onnx_file(tmp_path / "vendor.onnx"))
    missing = cli("test", "--benchmark", str(bid), "--model", str(unknown), "--profile",
                  "hospital")
    assert missing.exit_code == 3
    assert f"--model FILE --model-id {unknown}" in missing.output


def _prepared(tmp_path: Path, bid: int) -> Path:
    now = datetime.now(UTC)
    definition = load_definition()
    benchmark = BenchmarkPublic(
        id=bid, owner_id=1, name="x", version="1", description="",
        data_contract=definition.contract.model_dump(mode="json"),
        metrics_spec=definition.metrics.model_dump(mode="json"),
        metrics_version="brats-2023-gli/1",
        image_reference="x", image_digest=IMAGE,
        reference_model_id=None, state="approved", approved_by_id=None, approved_at=None,
        created_at=now, updated_at=now,
    )
    return write_demo_dataset(tmp_path / "hospital", demo_variant(benchmark, "small").benchmark, 2)


def test_hospital_prepared_data_passes_and_a_tampered_case_fails(
    cli: Cli, tmp_path: Path
) -> None:
    bid = _benchmark(cli, tmp_path)
    prepared = _prepared(tmp_path, bid)
    good = cli("test", "--benchmark", str(bid), "--dataset", str(prepared), "--json",
               "--profile", "hospital")
    report = _json(good)
    assert report["passed"] is True and report["data"] == str(prepared)
    assert report["summary"]["n_cases"] == 2
    case = next((prepared / "data" / "cases").rglob("*-t2f.nii.gz"))
    data = bytearray(case.read_bytes())
    data[len(data) // 2] ^= 0xFF
    case.write_bytes(bytes(data))
    tampered = cli("test", "--benchmark", str(bid), "--dataset", str(prepared), "--json",
                   "--profile", "hospital")
    assert tampered.exit_code == 9
    checks = {c["name"]: c for c in json.loads(tampered.stdout)["checks"]}
    assert checks["data contract"]["status"] == "fail"
    assert "1 of 2 cases do not load" in checks["data contract"]["detail"]


def test_folder_that_is_not_prepared_fails_the_data_contract(cli: Cli, tmp_path: Path) -> None:
    bid = _benchmark(cli, tmp_path)
    (tmp_path / "raw").mkdir()
    result = cli("test", "--benchmark", str(bid), "--dataset", str(tmp_path / "raw"), "--json",
                 "--profile", "hospital")
    assert result.exit_code == 9
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["data contract"]["status"] == "fail"
    assert "sealbench dataset prepare" in checks["data contract"]["detail"]


# -- withdraw, close, inbox --------------------------------------------------------------------


def _dataset(cli: Cli, tmp_path: Path, bid: int) -> int:
    assert cli("keys", "init", "--profile", "hospital").exit_code in (0, 3)
    prepared = _prepared(tmp_path / f"d{next(_names)}", bid)
    return int(_json(cli("dataset", "register", str(prepared), "--name", f"d{next(_names)}",
                         "--json", "--profile", "hospital"))["id"])


def test_inbox_lists_decisions_runs_and_submissions(
    cli: Cli, tmp_path: Path, cli_home: Path
) -> None:
    bid = _benchmark(cli, tmp_path)
    model = _register_model(cli, onnx_file(tmp_path / "vendor.onnx"))
    dataset = _dataset(cli, tmp_path, bid)
    assert cli("model", "associate", "--model", str(model), "--benchmark", str(bid),
               "--profile", "modelco").exit_code == 0
    assert cli("dataset", "associate", "--dataset", str(dataset), "--benchmark", str(bid),
               "--profile", "hospital").exit_code == 0
    authority = cli("inbox", "--profile", "authority")
    assert authority.exit_code == 0, authority.output
    assert "- decide: model m" in authority.output and "asks to join" in authority.output
    assert f"    sealbench association approve --benchmark {bid} --model {model}" in (
        authority.output)
    items = _json(cli("inbox", "--json", "--profile", "authority"))["items"]
    assert [i["action"] for i in items] == ["decide", "decide"]
    assert f"sealbench association approve --benchmark {bid} --model {model}" in items[0][
        "command"]
    vendor = _json(cli("inbox", "--json", "--profile", "modelco"))["items"]
    assert [i["action"] for i in vendor] == ["waiting"]
    for kind, asset in (("model", model), ("dataset", dataset)):
        assert cli("association", "approve", "--benchmark", str(bid), f"--{kind}", str(asset),
                   "--profile", "authority").exit_code == 0
    todo = _json(cli("inbox", "--json", "--profile", "hospital"))["items"]
    assert [(i["action"], i["command"]) for i in todo] == [
        ("run", f"sealbench run --benchmark {bid} --dataset {dataset} --model {model}")]
    runs = RunStore(cli_home / "data" / "profiles" / "hospital" / "runs")
    runs.save(RunRecord(run_id="run-test-1", benchmark_id=bid, dataset_id=dataset,
                        model_id=model, tee="mock", image_digest=IMAGE,
                        result_uri="file:///nowhere", status="succeeded",
                        started_at=datetime.now(UTC)))
    todo = _json(cli("inbox", "--json", "--profile", "hospital"))["items"]
    assert [i["action"] for i in todo] == ["submit"]
    assert "sealbench result submit run-test-1" in todo[0]["command"]
    assert "nothing waits for you" in cli("inbox", "--profile", "admin").output


def test_withdraw_then_run_is_refused_and_results_show_the_mark(
    cli: Cli, tmp_path: Path
) -> None:
    bid = _benchmark(cli, tmp_path)
    model = _register_model(cli, onnx_file(tmp_path / "vendor.onnx"))
    assert cli("model", "associate", "--model", str(model), "--benchmark", str(bid),
               "--profile", "modelco").exit_code == 0
    assert cli("association", "approve", "--benchmark", str(bid), "--model", str(model),
               "--profile", "authority").exit_code == 0
    others = cli("association", "withdraw", "--benchmark", str(bid), "--model", str(model),
                 "--profile", "authority")
    assert others.exit_code == 4 and "only the model's owner" in others.output
    done = cli("association", "withdraw", "--benchmark", str(bid), "--model", str(model),
               "--profile", "modelco")
    assert done.exit_code == 0, done.output
    assert f"policy sync --model {model}" in done.output
    rows = _json(cli("association", "ls", "--benchmark", str(bid), "--status", "withdrawn",
                     "--json", "--profile", "hospital"))
    assert [(r["asset_id"], r["status"]) for r in rows] == [(model, "withdrawn")]


def test_closed_benchmark_refuses_a_new_dataset(cli: Cli, tmp_path: Path) -> None:
    bid = _benchmark(cli, tmp_path)
    assert cli("benchmark", "close", str(bid), "--profile", "hospital").exit_code == 4
    closed = cli("benchmark", "close", str(bid), "--profile", "authority")
    assert closed.exit_code == 0, closed.output
    assert "closed to new associations" in cli("benchmark", "show", str(bid),
                                               "--profile", "hospital").output
    dataset = _dataset(cli, tmp_path, bid)
    refused = cli("dataset", "associate", "--dataset", str(dataset), "--benchmark", str(bid),
                  "--profile", "hospital")
    assert refused.exit_code == 4 and "closed to new associations" in refused.output
