"""The registry-facing commands through typer's CliRunner, against a real registry served by
uvicorn on a loopback port: profile, login, whoami, benchmark, dataset, model, association,
keys, audit, and the error boundary (exit codes, hints, -v)."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner, Result

from sealbench.benchmarks.brats.definition import load_definition, shipped_definition
from sealbench.benchmarks.brats.plugin import pin_of
from sealbench.client.cli import app
from sealbench.client.processes import process_identity
from sealbench.crypto.digest import sha256_digest

IMAGE = sha256_digest(b"cli evaluation image")
_names = iter(range(10_000))
Cli = Callable[..., Result]


def tiny_onnx(path: Path, in_channels: int = 4, seed: int = 0) -> Path:
    """A 1x1x1 convolution from the modalities to four classes, dynamic spatial axes."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((4, in_channels, 1, 1, 1)).astype(np.float32)
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


def _invoke(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, list(args))


@pytest.fixture
def cli(runner: CliRunner, cli_home: Path, live_registry: Any) -> Cli:
    """``sealbench ARGS`` with one profile per test account (the first added is current)."""
    for name, token in live_registry.tokens.items():
        result = _invoke(runner, "profile", "add", name, "--server", live_registry.url,
                         "--token", token, "--no-use", "--log-key", live_registry.log_key)
        assert result.exit_code == 0, result.output

    def run(*args: str) -> Result:
        return _invoke(runner, *args)

    return run


def _created_benchmark(cli: Cli, tmp_path: Path, name: str = "bench",
                       shipped: str = "brats") -> int:
    """A pending benchmark of the authority, from a shipped definition under a new name."""
    definition = shipped_definition(shipped).model_copy(
        update={"name": f"{name}-{next(_names)}"})
    path = tmp_path / "definition.json"
    # the definition names the plug-in pin of its grid (brats-small: brats-2023-gli/1-64x64x48)
    path.write_text(json.dumps({**definition.model_dump(mode="json"),
                                "plugin": str(pin_of(definition.contract))}))
    created = cli("benchmark", "create", "--definition", str(path), "--image-reference",
                  f"example/eval@{IMAGE}", "--image-digest", IMAGE, "--json",
                  "--profile", "authority")
    assert created.exit_code == 0, created.output
    return int(json.loads(created.stdout)["id"])


def _approved_benchmark(cli: Cli, tmp_path: Path, shipped: str = "brats") -> int:
    bid = _created_benchmark(cli, tmp_path, shipped=shipped)
    approved = cli("benchmark", "approve", str(bid), "--profile", "admin")
    assert approved.exit_code == 0, approved.output
    assert f"benchmark {bid} is approved" in approved.output
    return bid


# -- profiles, login, whoami -----------------------------------------------------------------


def test_profiles_are_private_and_tokens_never_printed(cli: Cli, cli_home: Path,
                                                       live_registry: Any) -> None:
    listing = cli("profile", "ls")
    assert listing.exit_code == 0
    assert "hospital" in listing.output and "set" in listing.output
    for token in live_registry.tokens.values():
        assert token not in listing.output
    path = cli_home / "profiles.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli_home.stat().st_mode) == 0o700
    assert cli("profile", "use", "hospital").exit_code == 0
    rows = {r["name"]: r for r in json.loads(cli("profile", "ls", "--json").stdout)}
    assert rows["hospital"]["current"] is True and rows["admin"]["current"] is False
    assert cli("profile", "rm", "modelco").exit_code == 0
    assert "modelco" not in cli("profile", "ls").output


def test_whoami_shows_account_and_server(cli: Cli, live_registry: Any) -> None:
    result = cli("whoami", "--profile", "hospital")
    assert result.exit_code == 0, result.output
    assert "hospital@test.example" in result.output
    data = json.loads(cli("whoami", "--profile", "admin", "--json").stdout)
    assert data["user"]["is_admin"] is True
    assert data["server"] == live_registry.url


def test_login_checks_the_token_before_saving(runner: CliRunner, cli_home: Path,
                                              live_registry: Any) -> None:
    bad = _invoke(runner, "login", "--server", live_registry.url, "--token", "sbt_wrong",
                  "--profile", "lab")
    assert bad.exit_code == 6
    assert "sealbench login" in bad.output
    assert not (cli_home / "profiles.json").exists()
    good = _invoke(runner, "login", "--server", live_registry.url, "--token",
                   live_registry.tokens["modelco"], "--profile", "lab")
    assert good.exit_code == 0, good.output
    assert "modelco@test.example" in good.output
    assert "modelco@test.example" in _invoke(runner, "whoami").output


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ("127.0.0.1:50057", "needs http:// or https://"),
        ("registry.example.org", "needs http:// or https://"),
        ("http://127.0.0.1:50057/api/v1", "does not look like a registry root"),
        ("https://registry.example.org/api/v1/", "use https://registry.example.org"),
        ("https://registry example.org", "is not a URL"),
    ],
)
def test_profile_add_with_a_bad_server_url_is_a_usage_error(
    runner: CliRunner, cli_home: Path, server: str, says: str
) -> None:
    result = _invoke(runner, "profile", "add", "lab", "--server", server, "--token", "sbt_x")
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())
    assert "traceback" not in result.output.lower()
    assert not (cli_home / "profiles.json").exists()


def test_profile_add_warns_when_the_registry_refuses_the_token(
    runner: CliRunner, cli_home: Path, live_registry: Any
) -> None:
    bad = _invoke(runner, "profile", "add", "lab", "--server", live_registry.url + "/",
                  "--token", "sbt_wrong")
    assert bad.exit_code == 0, bad.output
    assert "did not accept this token" in bad.output and "sealbench login" in bad.output
    saved = json.loads((cli_home / "profiles.json").read_text())["profiles"]["lab"]
    assert saved["server"] == live_registry.url
    good = _invoke(runner, "profile", "add", "lab", "--server", live_registry.url,
                   "--token", live_registry.tokens["modelco"])
    assert good.exit_code == 0, good.output
    assert "signed in as modelco@test.example" in good.output
    assert "did not accept" not in good.output


def test_listing_at_80_columns_keeps_ids_and_digests_whole_and_marks_the_caller(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _created_benchmark(cli, tmp_path, name="a-benchmark-with-a-rather-long-name")
    me = json.loads(cli("whoami", "--json", "--profile", "authority").stdout)["user"]["id"]
    monkeypatch.setenv("COLUMNS", "80")
    listing = cli("benchmark", "ls", "--profile", "authority")
    assert listing.exit_code == 0, listing.output
    lines = listing.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(IMAGE[:19] + "…" in line for line in lines)  # the digest on one line
    assert any(f"{me} (you)" in line for line in lines)
    other = cli("benchmark", "ls", "--profile", "hospital")
    assert "(you)" not in other.output


def test_registering_the_same_digest_again_warns_and_names_it(cli: Cli, tmp_path: Path) -> None:
    onnx = tiny_onnx(tmp_path / "m.onnx", seed=1234)  # bytes no other test registers
    first = cli("model", "register", str(onnx), "--name", "original", "--json",
                "--definition", "brats", "--profile", "modelco")
    assert first.exit_code == 0, first.output
    assert "already registered" not in first.output
    mid = json.loads(first.stdout)["id"]
    owner = json.loads(first.stdout)["owner_id"]
    mine = cli("model", "register", str(onnx), "--name", "again", "--definition", "brats",
               "--profile", "modelco")
    assert mine.exit_code == 0, mine.output
    assert f"already registered as {mid} 'original' (yours)" in " ".join(mine.output.split())
    theirs = cli("model", "register", str(onnx), "--name", "copy", "--definition", "brats",
                 "--profile", "hospital")
    assert theirs.exit_code == 0, theirs.output
    assert f"{mid} 'original' (user {owner})" in " ".join(theirs.output.split())


def test_authority_publishes_a_variant_without_python(cli: Cli, tmp_path: Path) -> None:
    exported = cli("benchmark", "definition", "export", "brats")
    assert exported.exit_code == 0, exported.output
    # The shipped definition, naming the benchmark plug-in that scores it.
    assert json.loads(exported.stdout) == {**load_definition().model_dump(mode="json"),
                                           "plugin": "brats-2023-gli/1"}
    variant = json.loads(exported.stdout)
    variant["description"] = "BraTS with a site-specific note"
    path = tmp_path / "variant.json"
    path.write_text(json.dumps(variant))
    n = next(_names)
    created = cli("benchmark", "create", "--definition", str(path), "--name", f"brats-site-{n}",
                  "--version", "2.0.0", "--image-reference", f"example/eval@{IMAGE}",
                  "--image-digest", IMAGE, "--json", "--profile", "authority")
    assert created.exit_code == 0, created.output
    row = json.loads(created.stdout)
    assert (row["name"], row["version"]) == (f"brats-site-{n}", "2.0.0")
    assert row["description"] == "BraTS with a site-specific note"
    renamed = cli("benchmark", "create", "--definition", "brats", "--name", f"brats-copy-{n}",
                  "--image-reference", f"example/eval@{IMAGE}", "--image-digest", IMAGE,
                  "--json", "--profile", "authority")
    assert renamed.exit_code == 0, renamed.output
    assert json.loads(renamed.stdout)["version"] == load_definition().version


def test_definitions_of_every_installed_pin_listed_and_published(cli: Cli) -> None:
    listed = cli("benchmark", "definition", "ls", "--json")
    assert listed.exit_code == 0, listed.output
    pins = {row["definition"]: row["plugin"] for row in json.loads(listed.stdout)}
    assert pins == {"brats": "brats-2023-gli/1", "brats-small": "brats-2023-gli/1-64x64x48",
                    "brats-2025-gli": "brats-2025-gli/1", "brats-2025-met": "brats-2025-met/1",
                    "wdbc": "wdbc/1"}
    n = next(_names)
    created = cli("benchmark", "create", "--definition", "brats-2025-met",
                  "--name", f"brats-met-{n}", "--image-reference", f"example/eval@{IMAGE}",
                  "--image-digest", IMAGE, "--json", "--profile", "authority")
    assert created.exit_code == 0, created.output
    row = json.loads(created.stdout)
    assert row["metrics_version"] == "brats-2025-met/1"
    assert row["metrics_spec"]["metrics_id"] == "sealbench/brats-2025"


def test_input_error_gets_its_own_hint_or_none(cli: Cli) -> None:
    result = cli("benchmark", "ls", "--state", "bogus", "--profile", "authority")
    assert result.exit_code == 3, result.output
    assert "--state must be one of" in result.output
    assert "profile ls" not in result.output  # the profile is fine: no generic profile advice


def test_no_profile_exits_3_and_says_how_to_add_one(runner: CliRunner, cli_home: Path) -> None:
    result = _invoke(runner, "benchmark", "ls")
    assert result.exit_code == 3
    assert "sealbench profile add" in result.output


def test_environment_overrides_need_no_profile_file(runner: CliRunner, cli_home: Path,
                                                    live_registry: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEALBENCH_SERVER", live_registry.url)
    monkeypatch.setenv("SEALBENCH_TOKEN", live_registry.tokens["authority"])
    result = _invoke(runner, "whoami")
    assert result.exit_code == 0, result.output
    assert "profile env: authority@test.example" in result.output


def test_unreachable_server_exits_5(runner: CliRunner, cli_home: Path) -> None:
    added = _invoke(runner, "profile", "add", "gone", "--server", "http://127.0.0.1:9",
                    "--token", "x")
    assert added.exit_code == 0
    result = _invoke(runner, "benchmark", "ls")
    assert result.exit_code == 5
    assert "cannot reach the registry at http://127.0.0.1:9" in result.output


def test_verbose_shows_the_traceback(runner: CliRunner, cli_home: Path) -> None:
    _invoke(runner, "profile", "add", "gone", "--server", "http://127.0.0.1:9", "--token", "x")
    quiet = _invoke(runner, "benchmark", "ls")
    loud = _invoke(runner, "-v", "benchmark", "ls")
    assert "Traceback" not in quiet.output
    assert "Traceback" in loud.output
    assert loud.exit_code == quiet.exit_code == 5


# -- benchmark, association, audit ---------------------------------------------------------------


def test_benchmark_create_approve_ls_show(cli: Cli, tmp_path: Path) -> None:
    bid = _approved_benchmark(cli, tmp_path)
    listing = cli("benchmark", "ls", "--state", "approved", "--profile", "hospital")
    assert listing.exit_code == 0 and str(bid) in listing.output
    shown = json.loads(cli("benchmark", "show", str(bid), "--json", "--profile", "hospital")
                       .stdout)
    assert shown["image_digest"] == IMAGE
    assert shown["metrics_version"] == "brats-2023-gli/1"
    assert shown["data_contract"]["shape"] == [240, 240, 155]
    text = cli("benchmark", "show", str(bid), "--profile", "hospital").output
    assert "t1n" in text


def test_docker_benchmark_without_an_engine_says_how_to_start_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    result = cli("benchmark", "create", "--definition", "brats",
                 "--tee", "docker", "--profile", "authority")
    assert result.exit_code == 3, result.output
    assert "cannot reach a Docker engine" in result.output and "dockerd" in result.output


def test_confidential_space_benchmark_must_name_its_pushed_image(cli: Cli) -> None:
    result = cli("benchmark", "create", "--definition", "brats",
                 "--tee", "confidential-space", "--profile", "authority")
    assert result.exit_code == 3
    assert "--image-reference" in result.output and "--image-digest" in result.output


def test_benchmark_create_with_mock_tee_pins_the_enclave_code_digest(cli: Cli) -> None:
    from sealbench.mocktee.image import mock_image

    result = cli("benchmark", "create", "--definition", "brats",
                 "--tee", "mock", "--json", "--profile", "authority")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["image_digest"] == mock_image().digest


def test_non_admin_cannot_approve_a_benchmark(cli: Cli, tmp_path: Path) -> None:
    definition = load_definition().model_copy(update={"name": f"bench-{next(_names)}"})
    path = tmp_path / "d.json"
    path.write_text(definition.model_dump_json())
    created = cli("benchmark", "create", "--definition", str(path), "--image-reference",
                  "x/y@" + IMAGE, "--image-digest", IMAGE, "--json", "--profile", "authority")
    bid = json.loads(created.stdout)["id"]
    result = cli("benchmark", "approve", str(bid), "--profile", "authority")
    assert result.exit_code == 4
    assert "admin" in result.output


def test_small_cases_are_refused_by_a_full_size_benchmark(cli: Cli, tmp_path: Path) -> None:
    """The grid contract on the client: 64x64x48 cases are neither prepared for nor registered
    in a 240x240x155 benchmark (they belong to a brats-small one)."""
    full = _approved_benchmark(cli, tmp_path)
    raw, prepared = tmp_path / "raw", tmp_path / "prepared"
    assert cli("dataset", "synthesize", str(raw), "--cases", "1", "--definition",
               "brats-small").exit_code == 0
    # a definition beside the benchmark would be a second contract: refused, nothing written
    both = cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", str(full),
               "--definition", "brats-small", "--profile", "hospital")
    assert both.exit_code == 3, both.output
    assert "each name a contract" in both.output and not prepared.exists()
    # for the full benchmark's contract, every small case is rejected for its grid
    for_full = cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", str(full),
                   "--profile", "hospital")
    assert for_full.exit_code == 3, for_full.output
    assert "differs from the contract's" in for_full.output and not prepared.exists()
    # prepared for the small contract, it cannot be registered for the full benchmark
    assert cli("dataset", "prepare", str(raw), str(prepared), "--definition", "brats-small",
               "--profile", "hospital").exit_code == 0
    assert cli("keys", "init", "--profile", "hospital").exit_code == 0
    reg = cli("dataset", "register", str(prepared), "--name", "small-in-full", "--benchmark",
              str(full), "--profile", "hospital")
    assert reg.exit_code == 3, reg.output
    assert "64x64x48" in reg.output and "240x240x155" in reg.output
    assert "small-in-full" not in cli("dataset", "ls", "--profile", "hospital").output


def test_dataset_and_model_lifecycle_with_associations(cli: Cli, tmp_path: Path,
                                                      cli_home: Path) -> None:
    bid = _approved_benchmark(cli, tmp_path, shipped="brats-small")
    raw, prepared = tmp_path / "raw", tmp_path / "prepared"
    made = cli("dataset", "synthesize", str(raw), "--cases", "2", "--benchmark", str(bid),
               "--profile", "hospital")
    assert made.exit_code == 0, made.output
    # one broken case is rejected with its reason, the others are prepared
    broken = raw / "BraTS-GLI-09999-000"
    broken.mkdir()
    (broken / "BraTS-GLI-09999-000-t1n.nii.gz").write_bytes(b"not nifti")
    strict = cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", str(bid),
                 "--strict", "--profile", "hospital")
    assert strict.exit_code == 3, strict.output
    assert "1 of 3 raw cases failed" in strict.output and "BraTS-GLI-09999-000" in strict.output
    assert not prepared.exists()
    prep = cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", str(bid),
               "--profile", "hospital")
    assert prep.exit_code == 11, prep.output  # prepared, with a case rejected
    assert "prepared 2 cases, 1 case rejected" in prep.output
    assert "BraTS-GLI-09999-000" in prep.output
    # a profile added before 'profile add' made the result key: register says how to make it
    for name in ("result-key.pem", "result-key.pub.pem"):
        (cli_home / "profiles" / "hospital" / name).unlink()
    no_key = cli("dataset", "register", str(prepared), "--name", "h-ds", "--profile",
                 "hospital")
    assert no_key.exit_code == 3 and "sealbench keys init" in no_key.output
    assert cli("keys", "init", "--profile", "hospital").exit_code == 0
    reg = cli("dataset", "register", str(prepared), "--name", "h-ds", "--benchmark", str(bid),
              "--json", "--profile", "hospital")
    assert reg.exit_code == 0, reg.output
    assert (f"this dataset has 2 cases; benchmark {bid} publishes no summary of fewer than 5"
            in " ".join(reg.stderr.split()))
    did = json.loads(reg.stdout)["id"]
    onnx = tiny_onnx(tmp_path / "m.onnx")
    mreg = cli("model", "register", str(onnx), "--name", "tiny", "--version", "1",
               "--benchmark", str(bid), "--json", "--profile", "modelco")
    assert mreg.exit_code == 0, mreg.output
    mid = json.loads(mreg.stdout)["id"]
    assert json.loads(mreg.stdout)["digest"] == sha256_digest(onnx.read_bytes())
    assert "pending" in cli("dataset", "associate", "--dataset", str(did), "--benchmark",
                            str(bid), "--profile", "hospital").output
    assert "pending" in cli("model", "associate", "--model", str(mid), "--benchmark", str(bid),
                            "--profile", "modelco").output
    own = cli("association", "approve", "--benchmark", str(bid), "--dataset", str(did),
              "--profile", "hospital")
    assert own.exit_code == 4 and "initiator" in own.output
    assert "approved" in cli("association", "approve", "--benchmark", str(bid), "--dataset",
                             str(did), "--profile", "authority").output
    twice = cli("association", "approve", "--benchmark", str(bid), "--dataset", str(did),
                "--profile", "authority")
    assert twice.exit_code == 0, twice.output
    assert "is already approved (revision" in twice.output and "nothing changed" in twice.output
    same = cli("dataset", "register", str(prepared), "--name", "h-ds", "--json", "--profile",
               "hospital")
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["id"] == did  # the registration already made, nothing sent
    other = tmp_path / "other"
    assert cli("dataset", "synthesize", str(tmp_path / "raw2"), "--cases", "2", "--definition",
               "brats-small", "--first-seed", "50").exit_code == 0
    assert cli("dataset", "prepare", str(tmp_path / "raw2"), str(other), "--definition",
               "brats-small", "--profile", "hospital").exit_code == 0
    clash = cli("dataset", "register", str(other), "--name", "h-ds", "--profile", "hospital")
    assert clash.exit_code == 3, clash.output
    assert f"already have a dataset named 'h-ds' (dataset {did}" in " ".join(
        clash.output.split()) and "nothing was sent" in clash.output
    again = cli("dataset", "associate", "--dataset", str(did), "--benchmark", str(bid),
                "--profile", "hospital")
    assert again.exit_code == 0, again.output
    assert f"already approved in benchmark {bid}; nothing changed" in again.output
    assert "rejected" in cli("association", "reject", "--benchmark", str(bid), "--model",
                             str(mid), "--profile", "authority").output
    links = json.loads(cli("association", "ls", "--benchmark", str(bid), "--json",
                           "--profile", "modelco").stdout)
    assert {(a["asset_kind"], a["status"]) for a in links} == {("dataset", "approved"),
                                                              ("model", "rejected")}
    assert "h-ds" in cli("dataset", "ls", "--mine", "--profile", "hospital").output
    shown = cli("dataset", "show", str(did), "--profile", "modelco")
    assert shown.exit_code == 0 and "result recipient sha256:" in shown.output
    assert "tiny" in cli("model", "ls", "--profile", "hospital").output
    assert json.loads(cli("model", "show", str(mid), "--json", "--profile", "hospital")
                      .stdout)["coordinates"] is None


def test_model_that_breaks_the_contract_is_refused_before_registering(cli: Cli,
                                                                     tmp_path: Path) -> None:
    onnx = tiny_onnx(tmp_path / "three.onnx", in_channels=3)
    result = cli("model", "register", str(onnx), "--name", "bad", "--definition", "brats",
                 "--profile", "modelco")
    assert result.exit_code == 3
    assert "model contract" in result.output
    assert "bad" not in cli("model", "ls", "--profile", "modelco").output
    checkpoint = tmp_path / "segresnet.pt"
    checkpoint.write_bytes(b"PK\x03\x04" + bytes(60))  # torch.save writes a zip archive
    pt = cli("model", "register", str(checkpoint), "--name", "pt", "--definition", "brats",
             "--profile", "modelco")
    assert pt.exit_code == 3
    said = " ".join(pt.output.split())
    assert "looks like a PyTorch file" in said and "sealbench model export" in said


def test_results_and_leaderboard_of_a_fresh_benchmark_are_empty(cli: Cli, tmp_path: Path) -> None:
    bid = _approved_benchmark(cli, tmp_path)
    results = cli("benchmark", "results", str(bid), "--json", "--profile", "authority")
    assert results.exit_code == 0 and json.loads(results.stdout) == []
    board = json.loads(cli("benchmark", "leaderboard", str(bid), "--json", "--profile",
                           "authority").stdout)
    assert board["standings"] == [] and board["metric"] == "dice"
    assert "leaderboard" in cli("benchmark", "leaderboard", str(bid), "--profile",
                                "authority").output


def test_audit_verify_for_admins_only(cli: Cli) -> None:
    ok = cli("audit", "verify", "--profile", "admin")
    assert ok.exit_code == 0 and "audit chain intact" in ok.output
    assert cli("audit", "verify", "--profile", "hospital").exit_code == 4


def test_profile_add_makes_the_result_key_once_and_files_are_private(
        cli: Cli, cli_home: Path, live_registry: Any) -> None:
    """'profile add' made the key (the fixture added every profile); adding the profile again,
    or 'keys init', keeps it: only --force replaces it."""
    key = cli_home / "profiles" / "hospital" / "result-key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = json.loads(cli("keys", "show", "--json", "--profile", "hospital").stdout)
    pem = key.read_bytes()
    again = cli("profile", "add", "hospital", "--server", live_registry.url, "--token",
                live_registry.tokens["hospital"], "--no-use", "--log-key",
                live_registry.log_key)
    assert again.exit_code == 0, again.output
    assert "result key kept" in again.output and first["recipient_digest"] in again.output
    init = cli("keys", "init", "--profile", "hospital")
    assert init.exit_code == 0 and "result key kept" in init.output, init.output
    assert key.read_bytes() == pem
    rotated = cli("keys", "init", "--force", "--profile", "hospital")
    assert rotated.exit_code == 0 and "result key created" in rotated.output
    assert key.read_bytes() != pem
    digest = json.loads(cli("keys", "show", "--json", "--profile", "hospital").stdout)
    assert digest["recipient_digest"] in rotated.output
    assert digest["recipient_digest"] != first["recipient_digest"]


def test_a_new_profile_gets_its_result_key(runner: CliRunner, cli_home: Path,
                                           live_registry: Any) -> None:
    added = _invoke(runner, "profile", "add", "newsite", "--server", live_registry.url,
                    "--token", live_registry.tokens["hospital"], "--no-watch-policy",
                    "--log-key", live_registry.log_key)
    assert added.exit_code == 0, added.output
    assert "result key created" in added.output
    assert "sealbench policy sync --watch --profile newsite" in added.output
    shown = _invoke(runner, "keys", "show", "--json", "--profile", "newsite")
    assert json.loads(shown.stdout)["recipient_digest"] in added.output


def test_wrong_server_says_it_is_not_a_sealbench_registry(runner: CliRunner,
                                                          cli_home: Path) -> None:
    import http.server
    import threading

    class Website(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # some other web server: HTML, no JSON error body
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>not here</html>")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Website)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        _invoke(runner, "profile", "add", "web", "--server", url, "--token", "x")
        result = _invoke(runner, "dataset", "ls")
    finally:
        server.shutdown()
    assert result.exit_code == 4
    assert "without a sealbench error body" in result.output
    assert "points at a sealbench registry" in result.output


def test_plan_says_what_a_board_will_read_before_anyone_runs(cli: Cli) -> None:
    """``benchmark plan`` by definition and by a registered benchmark (its TEE pooling read
    from the registry), and the same plan in ``benchmark create``'s confirmation."""
    from sealbench.benchmarks.planning import plan
    from sealbench.client.assets.prepare import definition_plugin

    planned = cli("benchmark", "plan", "--definition", "brats-small", "--sites", "32",
                  "--cases", "50", "--json")
    assert planned.exit_code == 0, planned.output
    doc = json.loads(planned.stdout)
    expected = plan(definition_plugin("brats-small"), sites=32, cases=50).to_json()
    assert doc == expected
    assert (doc["sites"], doc["cases"], doc["epsilon"]) == (32, 50, 1.0)
    assert 0 < doc["pooled_half_width"] < doc["site_half_width"]
    assert doc["pooled_shows_from"] <= 32 * 50 < doc["pooled_shows_from"] * 32
    looser = json.loads(cli("benchmark", "plan", "--definition", "brats-small", "--sites", "32",
                            "--cases", "50", "--epsilon", "4", "--json").stdout)
    assert looser["pooled_half_width"] < doc["pooled_half_width"]
    assert looser["pooled_shows_from"] < doc["pooled_shows_from"]
    n = next(_names)
    created = cli("benchmark", "create", "--definition", "brats-small", "--name",
                  f"brats-plan-{n}", "--image-reference", f"example/eval@{IMAGE}",
                  "--image-digest", IMAGE, "--profile", "authority")
    assert created.exit_code == 0, created.output
    said = " ".join(created.output.split())
    assert "what the board will read" in said
    assert "pooled over the sites: expected 95% interval ±" in said
    bid = int(said.split("benchmark ", 1)[1].split()[0])
    by_id = cli("benchmark", "plan", str(bid), "--sites", "3", "--cases", "50",
                "--profile", "authority")
    assert by_id.exit_code == 0, by_id.output
    words = " ".join(by_id.output.split())
    assert "Dice over 3 sites x 50 cases (150 cases), ε 1 per release:" in words
    assert "readable from about" in words and "80% power" in words
    neither = cli("benchmark", "plan")
    assert neither.exit_code != 0
    assert "--definition" in neither.output


def test_profile_add_starts_one_policy_watch_when_asked(
        runner: CliRunner, cli_home: Path, live_registry: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--watch-policy starts 'policy sync --watch' for the profile in the background, once:
    adding the profile again finds it running and starts no second one."""
    from sealbench.mocktee import MockCloud

    data = tmp_path / "data"
    monkeypatch.setenv("SEALBENCH_DATA_DIR", str(data))
    args = ("profile", "add", "watched", "--server", live_registry.url, "--token",
            live_registry.tokens["hospital"], "--mock-tee", str(tmp_path / "mock"),
            "--watch-policy", "--log-key", live_registry.log_key)
    with MockCloud(tmp_path / "mock"):
        _watch_started_once(runner, args, data)


def _watch_started_once(runner: CliRunner, args: tuple[str, ...], data: Path) -> None:
    import os
    import signal
    import time

    first = _invoke(runner, *args)
    assert first.exit_code == 0, first.output
    assert "'sealbench policy sync --watch --profile watched' started" in first.output
    pid_file = data / "profiles" / "watched" / "policy-watch.pid"
    log = data / "profiles" / "watched" / "policy-watch.log"
    recorded = pid_file.read_text()
    pid, started = (int(field) for field in recorded.split())  # the id and its start time
    try:
        assert process_identity(pid) == (pid, started)
        deadline = time.monotonic() + 60
        while "watching approvals" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "watching approvals" in log.read_text(), log.read_text()
        second = _invoke(runner, *args)
        assert second.exit_code == 0, second.output
        assert f"already runs in the background (process {pid}" in second.output
        assert pid_file.read_text() == recorded
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the watcher did not stop on SIGTERM")
    assert "stopped watching" in log.read_text(), log.read_text()
