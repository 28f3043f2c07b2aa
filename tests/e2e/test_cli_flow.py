"""Every role's workflow through the ``sealbench`` CLI (typer's CliRunner) against a real registry
server process and the mock TEE, on small synthetic cases and two tiny ONNX models: publish,
approve, register, seal, associate, sync policies, run on the mock TEE, open, submit (verified
by the registry), leaderboard; then the attacks a hospital IT person must get a clear answer
to: a debug image is denied its keys, a tampered sealed case stops the run, an unapproved model
is not run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.client.registry.local import create_accounts, publish_log_key, registry_process
from sealbench.mocktee import MockCloud

ACCOUNTS = {
    "admin": ("admin@e2e.example", True),
    "authority": ("authority@e2e.example", False),
    "hospital": ("it@hospital.e2e.example", False),
    "lab-a": ("ml@lab-a.e2e.example", False),
    "lab-b": ("ml@lab-b.e2e.example", False),
}
Cli = Callable[..., Result]


def tiny_onnx(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
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
class World:
    cli: Cli
    tmp: Path
    mock_state: Path
    ids: dict[str, int]


@pytest.fixture(scope="module")
def bare_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("flow")
    mock_state, data = tmp / "mock", tmp / "registry"
    patch = pytest.MonkeyPatch()
    patch.setenv("SEALBENCH_CONFIG_DIR", str(tmp / "home"))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER", "SEALBENCH_TOKEN"):
        patch.delenv(name, raising=False)
    runner = CliRunner()

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args))

    try:
        with MockCloud(mock_state) as cloud:
            tokens = create_accounts(data, ACCOUNTS)
            log_key = publish_log_key(data)  # the operator's key, given out of band
            with registry_process(data, cloud.endpoints, tmp / "server.log") as url:
                for name, token in tokens.items():
                    added = cli(
                        "profile",
                        "add",
                        name,
                        "--server",
                        url,
                        "--token",
                        token,
                        "--mock-tee",
                        str(mock_state),
                        "--log-key",
                        log_key,
                    )
                    assert added.exit_code == 0, added.output
                yield World(cli, tmp, mock_state, {})
    finally:
        patch.undo()


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def run_as_hospital(world: World, *options: str, model: str = "lab-a") -> Result:
    """``sealbench run`` of the world's benchmark and dataset with ``model`` (a name in
    ``world.ids`` or a literal id), as the hospital, with ``options`` added."""
    ids = world.ids
    return world.cli(
        "run",
        "--benchmark",
        str(ids["b"]),
        "--dataset",
        str(ids["d"]),
        "--model",
        str(ids.get(model, model)),
        *options,
        "--profile",
        "hospital",
    )


@pytest.fixture(scope="module")
def world(bare_world: World) -> World:
    """Every role's setup done through the CLI, once per module, so each test below can run on
    its own (``-k``) instead of relying on an earlier test's side effects."""
    publish_register_seal_associate_approve_sync(bare_world)
    return bare_world


def test_publish_register_seal_associate_approve_sync(world: World) -> None:
    # The flow itself asserts each step (see the fixture); here, that it left what it promised.
    assert {"b", "d", "lab-a", "lab-b"} <= set(world.ids)
    shown = json.loads(
        ok(world.cli("dataset", "show", str(world.ids["d"]), "--json", "--profile", "hospital"))
        .stdout
    )
    assert shown["dataset"]["id"] == world.ids["d"]
    assert shown["coordinates"]["storage_uri"].startswith("gs://")


def publish_register_seal_associate_approve_sync(world: World) -> None:
    cli, tmp, ids = world.cli, world.tmp, world.ids
    ids["b"] = json.loads(
        ok(cli("benchmark", "create", "--tee", "mock", "--definition", "brats-small", "--json",
               "--profile", "authority")).stdout
    )["id"]
    b = str(ids["b"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    for lab, seed in (("lab-a", 0), ("lab-b", 1)):
        onnx = tiny_onnx(tmp / f"{lab}.onnx", seed)
        mid = json.loads(
            ok(
                cli(
                    "model",
                    "register",
                    str(onnx),
                    "--name",
                    lab,
                    "--benchmark",
                    b,
                    "--json",
                    "--profile",
                    lab,
                )
            ).stdout
        )["id"]
        ids[lab] = mid
        sealed = ok(cli("model", "seal", str(onnx), "--model", str(mid), "--profile", lab))
        assert "models/" in sealed.output
        # sealing again resumes: nothing new is uploaded
        again = ok(cli("model", "seal", str(onnx), "--model", str(mid), "--json", "--profile", lab))
        assert json.loads(again.stdout)["uploaded"] == 0
        ok(cli("model", "associate", "--model", str(mid), "--benchmark", b, "--profile", lab))
    # weights other than the registered ones are refused before anything is uploaded
    swapped = cli("model", "seal", str(tmp / "lab-a.onnx"), "--model", str(ids["lab-b"]),
                  "--profile", "lab-b")
    assert swapped.exit_code == 3 and "registered as" in swapped.output
    ok(cli("keys", "init", "--profile", "hospital"))
    raw, prepared = tmp / "raw", tmp / "prepared"
    ok(cli("dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b, "--profile",
           "hospital"))
    ok(
        cli(
            "dataset",
            "prepare",
            str(raw),
            str(prepared),
            "--benchmark",
            b,
            "--profile",
            "hospital",
        )
    )
    ids["d"] = json.loads(
        ok(
            cli(
                "dataset",
                "register",
                str(prepared),
                "--name",
                "h-glioma",
                "--benchmark",
                b,
                "--json",
                "--profile",
                "hospital",
            )
        ).stdout
    )["id"]
    d = str(ids["d"])
    early = cli("policy", "sync", "--dataset", d, "--profile", "hospital")
    assert early.exit_code == 3 and "dataset seal" in early.output
    sealed = json.loads(
        ok(
            cli("dataset", "seal", str(prepared), "--dataset", d, "--json", "--profile", "hospital")
        ).stdout
    )
    assert sealed["coordinates"]["storage_uri"].endswith(f"datasets/{d}")
    ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", "hospital"))
    ok(cli("association", "approve", "--benchmark", b, "--dataset", d, "--profile", "authority"))
    ok(
        cli(
            "association",
            "approve",
            "--benchmark",
            b,
            "--model",
            str(ids["lab-a"]),
            "--profile",
            "authority",
        )
    )
    ok(
        cli(
            "association",
            "approve",
            "--benchmark",
            b,
            "--model",
            str(ids["lab-b"]),
            "--profile",
            "authority",
        )
    )
    synced = json.loads(
        ok(cli("policy", "sync", "--dataset", d, "--json", "--profile", "hospital")).stdout
    )
    assert len(synced["workloads"]) == 2 and len(synced["added"]) == 2
    for lab in ("lab-a", "lab-b"):
        text = ok(cli("policy", "sync", "--model", str(ids[lab]), "--profile", lab)).output
        assert "+1" in text
    # a second sync changes nothing (incremental, idempotent)
    assert (
        "nothing to change"
        in ok(cli("policy", "sync", "--dataset", d, "--profile", "hospital")).output
    )


def test_run_open_submit_and_leaderboard(world: World) -> None:
    cli, ids = world.cli, world.ids
    b, d = str(ids["b"]), str(ids["d"])
    ran = ok(
        cli(
            "run",
            "--benchmark",
            b,
            "--dataset",
            d,
            "--all-approved",
            "--parallel",
            "2",
            "--tee",
            "mock",
            "--profile",
            "hospital",
        )
    )
    assert ran.output.count("succeeded") == 2
    # the registry was told: the authority sees both pairs evaluated, and who ran them
    progress = json.loads(ok(cli("benchmark", "progress", b, "--json", "--profile",
                                 "authority")).stdout)
    assert {(c["model_id"], c["status"]) for c in progress["cells"]} == {
        (ids["lab-a"], "done"), (ids["lab-b"], "done")
    }
    seen_by_lab = json.loads(ok(cli("benchmark", "progress", b, "--json", "--profile",
                                    "lab-a")).stdout)
    assert [c["model_id"] for c in seen_by_lab["cells"]] == [ids["lab-a"]]
    # Each INSECURE notice once per command, on one line, not before every run.
    for notice in ("INSECURE mock TEE: nothing protects the enclave",
                   "INSECURE mock launcher: its tokens prove nothing"):
        assert ran.output.count(notice) == 1, ran.output
    again = ok(
        cli("run", "--benchmark", b, "--dataset", d, "--all-models", "--profile", "hospital")
    )
    assert again.output.count("already evaluated") == 2
    runs = json.loads(ok(cli("result", "ls", "--json", "--profile", "hospital")).stdout)
    assert [r["status"] for r in runs] == ["succeeded", "succeeded"]
    assert all("infer" in r["step_seconds"] for r in runs)  # the enclave's step timings
    for record in runs:
        opened = ok(cli("result", "open", record["run_id"], "--profile", "hospital"))
        assert "BraTS-GLI-" in opened.output  # per-case rows, private to the hospital
        submitted = ok(cli("result", "submit", record["run_id"], "--profile", "hospital"))
        assert "attestation verified" in submitted.output
        # what was sent is shown first: the summary's figures, the digest, the token by size
        preview = submitted.output.split("the registry will receive exactly this:", 1)[1]
        assert '"sealed_result_digest": "sha256:' in preview and '"aggregates"' in preview
        assert "characters: the enclave's attestation token" in preview
    verified = json.loads(
        ok(cli("benchmark", "results", b, "--json", "--profile", "authority")).stdout
    )
    assert {r["model_id"] for r in verified} == {ids["lab-a"], ids["lab-b"]}
    # each submission left the hospital a receipt: its result's event, proven in the log
    for result in verified:
        proven = ok(cli("audit", "prove", str(result["id"]), "--profile", "hospital"))
        assert f"result {result['id']} was logged" in proven.output
        assert "digests are those of the result you submitted" in proven.output
    board = json.loads(
        ok(cli("benchmark", "leaderboard", b, "--json", "--profile", "authority")).stdout
    )
    # one case per site is under BraTS's small-cell minimum: withheld, never pooled or shown
    assert board["standings"] == [] and board["sites"] == []
    assert {(w["model_id"], w["dataset_id"]) for w in board["withheld"]} == {
        (ids["lab-a"], int(d)), (ids["lab-b"], int(d))}
    assert all("small-cell" in w["reason"] for w in board["withheld"])
    # each submitted result is linked to the run that produced it
    assert {c["result_id"] for c in json.loads(ok(cli(
        "benchmark", "progress", b, "--json", "--profile", "authority")).stdout)["cells"]
    } == {r["id"] for r in verified}
    # the same submission twice changes nothing and says which result holds it
    dup = cli("result", "submit", runs[0]["run_id"], "--profile", "hospital")
    assert dup.exit_code == 0, dup.output
    held = re.search(r"is already result (\d+), accepted", dup.output)
    assert held is not None and "nothing changed" in dup.output, dup.output
    assert int(held[1]) in {r["id"] for r in verified}
    assert len(json.loads(ok(cli("benchmark", "results", b, "--json", "--profile",
                                 "authority")).stdout)) == len(verified)
    # the model owner may not read results
    assert ok(cli("benchmark", "results", b, "--json", "--profile", "lab-a")).output.strip() == "[]"


def test_confidential_space_run_on_the_mock_compute_opens_verified(world: World) -> None:
    """The production launcher (google-cloud-compute over REST) creates a confidential VM on the
    mock's Compute stand-in; the VM's claims come from its metadata, so the benchmark's image
    digest in ``tee-image-reference`` is what the key owners' policies release keys to."""
    cli = world.cli
    ran = ok(run_as_hospital(world, "--tee", "confidential-space", "--force"))
    assert "succeeded" in ran.output
    records = json.loads(ok(cli("result", "ls", "--json", "--profile", "hospital")).stdout)
    latest = records[-1]
    assert latest["tee"] == "confidential-space" and latest["status"] == "succeeded"
    opened = ok(cli("result", "open", latest["run_id"], "--profile", "hospital"))
    assert "BraTS-GLI-" in opened.output and "signed by http://127.0.0.1:" in opened.output
    # A result for a dataset and model that already have one says which it supersedes.
    b = str(world.ids["b"])
    earlier = [
        r for r in json.loads(ok(cli("benchmark", "results", b, "--json",
                                     "--profile", "authority")).stdout)
        if (r["dataset_id"], r["model_id"]) == (latest["dataset_id"], latest["model_id"])
    ]
    submitted = ok(cli("result", "submit", latest["run_id"], "--profile", "hospital"))
    assert ("it supersedes result" in submitted.output) == bool(earlier), submitted.output
    if earlier:
        assert f"supersedes result {max(r['id'] for r in earlier)} " in submitted.output


def test_confidential_space_debug_vm_is_denied_its_keys(world: World) -> None:
    result = run_as_hospital(world, "--tee", "confidential-space", "--debug", "--force")
    assert result.exit_code == 7, result.output
    # the run's line says the key was refused, and why (once: issue 45)
    assert "KeyReleaseDenied" in result.output and "dbgstat" in result.output


def test_confidential_space_image_named_by_tag_is_refused_with_a_hint(world: World) -> None:
    tag = "us-docker.pkg.dev/authority/sealbench/evaluation:latest"
    result = run_as_hospital(
        world, "--tee", "confidential-space", "--image-reference", tag, "--force"
    )
    assert result.exit_code == 3, result.output
    assert "what to do:" in result.output and "sha256" in result.output


def test_debug_image_denied_key(world: World) -> None:
    result = run_as_hospital(world, "--insecure-debug-image", "--force")
    assert result.exit_code == 7
    assert "KeyReleaseDenied" in result.output, result.output
    # The advice names the cause: refused by design, not a policy to sync.
    assert "debug image is refused by design" in result.output
    assert "policy sync" not in result.output


def _run_with_a_tampered_case(world: World) -> Result:
    """The hospital's run with one bit of one sealed case flipped in its bucket (restored
    after)."""
    from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud

    cloud = InsecureMockOwnerCloud.connect(world.mock_state, ACCOUNTS["hospital"][0])
    store, prefix = cloud.blob_store(f"gs://{cloud.setup.bucket}/datasets/{world.ids['d']}")
    case = next(n for n in store.list(prefix) if "/cases/" in n)
    original = store.get_bytes(case, 1 << 30)
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x01
    store.put_bytes(case, bytes(flipped))
    try:
        return run_as_hospital(world, "--force")
    finally:
        store.put_bytes(case, original)


def test_tampered_sealed_case_stops_the_run(world: World) -> None:
    result = _run_with_a_tampered_case(world)
    assert result.exit_code == 8, result.output
    assert "tampered" in result.output or "modified" in result.output


def test_enclave_failure_record_is_attested_end_to_end(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real mock-TEE run that fails after attestation (a tampered sealed case): the enclave
    signs its failure record, the hospital's client reports it, the registry verifies it, and
    the model owner's progress shows an attested failure with the record's reason, not a
    hospital's claim."""
    from sealbench.client.cli.common import session

    ids = world.ids
    result = _run_with_a_tampered_case(world)
    assert result.exit_code == 8, result.output
    with session("lab-a") as s:  # the model owner's view of the hospital's runs
        runs = s.client.list_runs(ids["b"])
    latest = max((r for r in runs if r.model_id == ids["lab-a"]), key=lambda r: r.id)
    assert (latest.state, latest.reason, latest.failure_attested) == ("failed", "integrity", True)
    board = json.loads(ok(world.cli("benchmark", "progress", str(ids["b"]), "--json",
                                    "--profile", "lab-a")).stdout)
    (cell,) = [c for c in board["cells"]
               if (c["model_id"], c["dataset_id"]) == (ids["lab-a"], ids["d"])]
    if cell["status"] == "done":  # a result of the pair, submitted by an earlier test, wins
        return
    assert (cell["status"], cell["reason"], cell["attested"]) == ("failed", "integrity", True)
    monkeypatch.setenv("COLUMNS", "300")  # the whole table, its source column included
    shown = ok(world.cli("benchmark", "progress", str(ids["b"]), "--profile", "lab-a")).output
    assert "attested failure" in shown


def test_policy_sync_lets_the_approved_workloads_write_results_to_a_bucket(world: World) -> None:
    from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud

    cli, d = world.cli, str(world.ids["d"])
    bucket = InsecureMockOwnerCloud.connect(world.mock_state, ACCOUNTS["hospital"][0]).setup.bucket
    synced = json.loads(
        ok(
            cli("policy", "sync", "--dataset", d, "--result-bucket", bucket, "--json",
                "--profile", "hospital")
        ).stdout
    )
    assert len(synced["result_bucket"]["added"]) == len(synced["workloads"]) == 2
    # read access by name is for a benchmark's aggregator only (issue 27); this one has none
    assert synced["result_readers"] == {"added": [], "removed": []}
    again = json.loads(
        ok(
            cli("policy", "sync", "--dataset", d, "--result-bucket", bucket, "--json",
                "--profile", "hospital")
        ).stdout
    )
    assert again["result_bucket"] == {"added": [], "removed": []}
    refused = cli("policy", "sync", "--model", str(world.ids["lab-a"]), "--result-bucket", bucket,
                  "--profile", "lab-a")
    assert refused.exit_code != 0 and "--result-bucket goes with --dataset" in refused.output


def test_confidential_space_result_in_a_bucket_is_fetched_opened_and_submitted(
    world: World,
) -> None:
    """The VM writes its result to the hospital's result bucket (granted by policy sync);
    'result fetch' copies it here with the hospital's own cloud credentials."""
    from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud

    cli, d = world.cli, str(world.ids["d"])
    bucket = InsecureMockOwnerCloud.connect(world.mock_state, ACCOUNTS["hospital"][0]).setup.bucket
    ok(cli("policy", "sync", "--dataset", d, "--result-bucket", bucket, "--profile", "hospital"))
    ok(run_as_hospital(world, "--tee", "confidential-space", "--force",
                       "--result-uri", f"gs://{bucket}/results"))
    latest = json.loads(ok(cli("result", "ls", "--json", "--profile", "hospital")).stdout)[-1]
    assert latest["result_uri"].startswith(f"gs://{bucket}/results/")
    fetched = ok(cli("result", "fetch", latest["run_id"], "--profile", "hospital"))
    assert "result in" in fetched.output
    local = json.loads(ok(cli("result", "ls", "--json", "--profile", "hospital")).stdout)[-1]
    assert local["run_id"] == latest["run_id"] and local["result_uri"].startswith("file://")
    opened = ok(cli("result", "open", latest["run_id"], "--profile", "hospital"))
    assert "BraTS-GLI-" in opened.output
    submitted = ok(cli("result", "submit", latest["run_id"], "--profile", "hospital"))
    assert "attestation verified" in submitted.output


def test_doctor_passes_for_an_owner_whose_cloud_is_ready(world: World) -> None:
    checked = json.loads(ok(world.cli("doctor", "--benchmark", str(world.ids["b"]), "--json",
                                      "--profile", "hospital")).stdout)
    assert {c["check"] for c in checked} == {
        "credentials", "APIs enabled", "KMS key", "bucket", "pool provider",
        "runner service account", "CPU quota", "image reference", "runner image access",
        "organisation policies",
    }
    assert all(c["ok"] for c in checked), checked


def test_model_not_approved_is_not_run(world: World) -> None:
    result = run_as_hospital(world, model="999")
    assert result.exit_code == 4
    assert "model 999 is not associated with benchmark" in result.output


def test_docker_backend_without_an_engine_says_how_to_start_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{world.tmp}/no-such-docker.sock")
    result = world.cli(
        "run",
        "--benchmark",
        str(world.ids["b"]),
        "--dataset",
        str(world.ids["d"]),
        "--all-models",
        "--tee",
        "docker",
        "--force",
        "--profile",
        "hospital",
    )
    assert result.exit_code == 3, result.output
    assert "cannot reach a Docker engine" in result.output and "dockerd" in result.output


def test_mock_tee_up_prints_endpoints_and_stops_on_interrupt(tmp_path: Path) -> None:
    state = tmp_path / "mock"

    def interrupt_when_up() -> None:
        deadline = time.monotonic() + 60
        while not (state / "endpoints.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_up, daemon=True).start()
    result = CliRunner().invoke(app, ["mock-tee", "up", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    endpoints, _ = json.JSONDecoder().raw_decode(result.stdout)
    assert endpoints["insecure"] is True
    assert endpoints["issuer"].startswith("http://127.0.0.1:")
    assert "--mock-tee" in result.output


def test_interrupted_run_is_recorded_and_the_same_command_resumes(world: World) -> None:
    """A real ``sealbench run --all-approved --parallel 2`` process gets SIGINT while both of
    its enclaves run: it kills them, records both runs interrupted and exits 130; the same
    command again runs what is left (here: both pairs) to the end."""
    ids = world.ids
    data = world.tmp / "interrupt-data"  # this process's own run records
    env = {**os.environ, "SEALBENCH_DATA_DIR": str(data)}
    command = [sys.executable, "-m", "sealbench.client.cli", "run", "--benchmark",
               str(ids["b"]), "--dataset", str(ids["d"]), "--all-approved", "--parallel", "2",
               "--json", "--profile", "hospital"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    running: set[str] = set()
    events = []
    for line in process.stdout:
        event = json.loads(line)
        events.append(event)
        if event["kind"] == "running":
            running.add(event["run_id"])
        if len(running) == 2:
            process.send_signal(signal.SIGINT)
            break
    rest, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    ended = [json.loads(line) for line in rest.splitlines()]
    assert {(e["run_id"], e["kind"], e["reason"]) for e in ended if e["kind"] == "interrupted"} == {
        (run_id, "interrupted", "stopped") for run_id in running
    }
    records = [json.loads(p.read_text()) for p in (data / "profiles" / "hospital" / "runs")
               .glob("*.json")]
    assert {(r["run_id"], r["status"]) for r in records} == {
        (run_id, "interrupted") for run_id in running
    }
    # torn down: no enclave of those runs is left (each carries its run id in its environment)
    left = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            text = environ.read_bytes()
        except OSError:
            continue
        left += [run_id for run_id in running if run_id.encode() in text]
    assert left == []
    again = subprocess.run(command, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    assert again.returncode == 0, again.stderr
    kinds = [json.loads(line)["kind"] for line in again.stdout.splitlines()]
    assert kinds.count("planned") == 2 and kinds.count("succeeded") == 2
    statuses = sorted(json.loads(p.read_text())["status"] for p in
                      (data / "profiles" / "hospital" / "runs").glob("*.json"))
    assert statuses == ["interrupted", "interrupted", "succeeded", "succeeded"]
