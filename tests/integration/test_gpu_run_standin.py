"""A confidential-GPU run end to end against the Compute stand-in (issue 18), through the
``sealbench`` CLI with ``--cloud gcp`` profiles (the world of ``test_gcp_cli_path``: Google's
client libraries against the mock's Google-compatible endpoints, no ``InsecureMock*`` class
constructed until a result token signed by the stand-in's verifier is read).

``run --tee confidential-space --accelerator nvidia-h100-80gb`` asks Compute for an
``a3-highgpu-1g`` TDX VM with one ``nvidia-h100-80gb`` on the ``confidential-space-preview-cgpu``
family. The stand-in accepts it, runs the workload on this machine's CPU and signs a token that
says what the preview GPU image attests: ``support_attributes: ["EXPERIMENTAL"]`` and
``submods.nvidia_gpu.cc_mode: "ON"``. So:

(a) under a benchmark created with ``--accept-experimental`` the owners' CEL conditions release
    their keys and the registry accepts the result;
(b) under a benchmark without the opt-in (another image) the same run is refused at key release
    (the conditions require ``STABLE``): the enclave raises ``KeyReleaseDenied`` and the run
    fails (exit 7) with the pool's refusal and the false clause; its recorded class is
    ``key_release_denied``, read from the exit code that closes the enclave's serial-port line
    (Confidential Space reports only the launcher's exit code 1, and a refused pool leaves no
    failure record in the bucket);
(c) the stand-in refuses malformed GPU requests with Compute's error, as google-cloud-compute
    raises it.

No GPU was used: this checks the request, the key-release rule and the result path, not an H100.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials

from sealbench.gcp.launcher import (
    VmSettings,
    instance_resource,
    make_compute_clients,
)
from tests.integration.test_gcp_cli_path import ZONE, World, ok, world

__all__ = ["world"]  # the fixture, re-used

pytestmark = pytest.mark.timeout(300)

ACCELERATOR = "nvidia-h100-80gb"
RUN_FAILED_EXIT = 7
#: The image of the benchmark without the opt-in. The owners' opt-in is per image digest, so a
#: second benchmark on the opt-in's image would share it; the stand-in runs the installed
#: enclave whatever the digest names.
STABLE_ONLY_DIGEST = "sha256:" + "5" * 64
STABLE_ONLY_REFERENCE = f"us-docker.pkg.dev/authority/sealbench/eval@{STABLE_ONLY_DIGEST}"


@dataclass(frozen=True)
class Pair:
    benchmark: int
    dataset: int
    model: int


def _pair(world: World, tag: str, *create: str) -> Pair:
    """A benchmark created with ``create`` options and approved, the lab's model and the
    hospital's one-case dataset sealed into their projects, associated, approved and synced
    into each owner's key-release condition."""
    cli, tmp = world.cli, world.tmp
    created = ok(cli("authority", "benchmark", "create", "--definition", "brats-small",
                     "--json", *create))
    b = str(json.loads(created.stdout)["id"])
    ok(cli("admin", "benchmark", "approve", b))
    world.ids["b"] = int(b)  # World.register_model registers under ids["b"]
    mid, onnx = world.register_model("lab", 100 + int(b))
    ok(cli("lab", "model", "seal", str(onnx), "--model", str(mid)))
    ok(cli("lab", "model", "associate", "--model", str(mid), "--benchmark", b))
    raw, prepared = tmp / f"raw-{tag}", tmp / f"prepared-{tag}"
    ok(cli("hospital", "dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b))
    ok(cli("hospital", "dataset", "prepare", str(raw), str(prepared), "--benchmark", b))
    d = str(json.loads(ok(cli("hospital", "dataset", "register", str(prepared), "--name",
                              f"h-{tag}", "--benchmark", b, "--json")).stdout)["id"])
    ok(cli("hospital", "dataset", "seal", str(prepared), "--dataset", d, "--json"))
    ok(cli("hospital", "dataset", "associate", "--dataset", d, "--benchmark", b))
    for kind, asset in (("--dataset", d), ("--model", str(mid))):
        ok(cli("authority", "association", "approve", "--benchmark", b, kind, asset))
    hospital = world.owners["hospital"]
    # the condition is rendered by the stand-in verifier's own platform (test_gcp_cli_path)
    world.stand_in_platform.undo()
    ok(cli("hospital", "policy", "sync", "--dataset", d, "--result-bucket", hospital.bucket))
    ok(cli("lab", "policy", "sync", "--model", str(mid)))
    return Pair(int(b), int(d), mid)


@pytest.fixture(scope="module")
def pairs(world: World) -> dict[str, Pair]:
    """Both benchmarks set up before any policy sync is final: each owner's condition then
    covers both, as a real owner's does."""
    ok(world.cli("hospital", "keys", "init"))
    # a new project has GPUS_ALL_REGIONS 0 (as on Google): the hospital's increase, granted
    world.inject(fault="quota-exceeded", project=world.owners["hospital"].project,
                 metric="GPUS_ALL_REGIONS", limit=1)
    # the authority lets the hospital's runner pull its stable-only image (the VM's pull needs it)
    world.mock.artifacts.grant(STABLE_ONLY_REFERENCE,
                               f"serviceAccount:{world.owners['hospital'].runner}")
    experimental = _pair(world, "gpu", "--tee", "mock", "--accept-experimental")
    stable_only = _pair(world, "stable", "--name", "brats-small-stable-only",
                        "--image-reference", STABLE_ONLY_REFERENCE,
                        "--image-digest", STABLE_ONLY_DIGEST)
    for dataset in (experimental.dataset, stable_only.dataset):  # re-sync: both benchmarks
        ok(world.cli("hospital", "policy", "sync", "--dataset", str(dataset), "--result-bucket",
                     world.owners["hospital"].bucket))
    ok(world.cli("lab", "policy", "sync", "--model", str(experimental.model)))
    ok(world.cli("lab", "policy", "sync", "--model", str(stable_only.model)))
    return {"experimental": experimental, "stable_only": stable_only}


def _gpu_run(
    world: World, pair: Pair, *, allow_cpu: bool = True
) -> tuple[int, str, dict[str, object]]:
    """The stand-in's "GPU VM" runs on this machine's CPU: the run allows the fallback unless
    ``allow_cpu`` is False (issue 29: a GPU run that fell back to the CPU fails otherwise)."""
    ran = world.cli("hospital", "run", "--benchmark", str(pair.benchmark), "--dataset",
                    str(pair.dataset), "--model", str(pair.model), "--tee", "confidential-space",
                    "--accelerator", ACCELERATOR, "--force",
                    *(["--allow-cpu-fallback"] if allow_cpu else []))
    records = json.loads(ok(world.cli("hospital", "result", "ls", "--json")).stdout)
    mine = [r for r in records if r["benchmark_id"] == pair.benchmark]
    assert mine, records
    return ran.exit_code, ran.output, mine[-1]


def test_gpu_run_under_the_opt_in_is_accepted_by_the_registry(
    world: World, pairs: dict[str, Pair]
) -> None:
    pair = pairs["experimental"]
    code, output, record = _gpu_run(world, pair)
    assert code == 0, output
    assert "succeeded" in output
    # the stand-in's "GPU VM" has no GPU: the enclave says it ran on ONNX Runtime's CPU provider
    assert record["execution_provider"] == "CPUExecutionProvider", record
    run_id = str(record["run_id"])
    ok(world.cli("hospital", "result", "fetch", run_id))
    world.stand_in_platform.undo()  # the result token is the stand-in's: its platform reads it
    assert "BraTS-GLI-" in ok(world.cli("hospital", "result", "open", run_id)).output
    assert "attestation verified" in ok(world.cli("hospital", "result", "submit", run_id)).output
    results = json.loads(ok(world.cli("authority", "benchmark", "results",
                                      str(pair.benchmark), "--json")).stdout)
    assert [(r["dataset_id"], r["model_id"]) for r in results] == [(pair.dataset, pair.model)]
    shown = ok(world.cli("authority", "benchmark", "show", str(pair.benchmark))).output
    assert "accepts EXPERIMENTAL images" in " ".join(shown.split())


def test_gpu_run_on_the_cpu_fails_unless_the_run_allowed_it(
    world: World, pairs: dict[str, Pair]
) -> None:
    """The token attests a GPU (``submods.nvidia_gpu``), ONNX Runtime ends on its CPU provider:
    without ``--allow-cpu-fallback`` the enclave fails the run, naming the providers."""
    code, output, record = _gpu_run(world, pairs["experimental"], allow_cpu=False)
    flat = " ".join(output.split())
    assert code == RUN_FAILED_EXIT, output
    assert "asked for a GPU, ONNX Runtime is running on the CPU: providers available" in flat
    assert "CPUExecutionProvider" in flat
    assert record["status"] == "failed" and record["reason"] == "enclave", record
    assert "asked for a GPU" in str(record["error"])
    assert record["execution_provider"] == "CPUExecutionProvider", record


def test_gpu_run_without_the_opt_in_is_refused_at_key_release(
    world: World, pairs: dict[str, Pair]
) -> None:
    pair = pairs["stable_only"]
    code, output, record = _gpu_run(world, pair)
    flat = " ".join(output.split())
    assert code == RUN_FAILED_EXIT, output
    # The enclave's first credential use (the result write-check, with the dataset owner's pool)
    # is refused by the condition's production-image clause: STABLE, or EXPERIMENTAL with
    # cc_mode ON for the opted-in image only, which this benchmark's image is not.
    assert "the dataset owner's pool refused this workload" in flat, flat
    assert "rejected by the attribute condition" in flat
    assert "'STABLE' in assertion.submods.confidential_space.support_attributes" in flat
    assert STABLE_ONLY_DIGEST not in flat.split("clause is false:")[-1]
    assert record["status"] == "failed" and "pool refused this workload" in str(record["error"])
    # The enclave raised KeyReleaseDenied (exit 13); Confidential Space reports only the
    # launcher's exit code (1) and no failure record reaches the bucket, so the class comes
    # from the "(exit 13)" that closes the enclave's line on the serial port.
    assert record["reason"] == "key_release_denied", record


def _gpu_instance(world: World) -> compute_v1.Instance:
    hospital = world.owners["hospital"]
    settings = VmSettings(project=hospital.project, zone=ZONE, service_account=hospital.runner,
                          image_reference=STABLE_ONLY_REFERENCE, tee="TDX",
                          accelerator=ACCELERATOR)
    return instance_resource(settings, "malformed-gpu", {})


def test_stand_in_refuses_malformed_gpu_requests_as_compute_does(world: World) -> None:
    hospital = world.owners["hospital"]
    token = Credentials(world.owner_token(hospital))  # type: ignore[no-untyped-call]
    instances, _ = make_compute_clients(token, world.ep.compute)
    sev = copy.deepcopy(_gpu_instance(world))
    sev.confidential_instance_config.confidential_instance_type = "SEV"
    bare = copy.deepcopy(_gpu_instance(world))
    del bare.guest_accelerators[:]
    wrong_zone = copy.deepcopy(_gpu_instance(world))
    wrong_zone.guest_accelerators[0].accelerator_type = (
        f"zones/europe-west4-a/acceleratorTypes/{ACCELERATOR}")
    cases = {
        "SEV with the accelerator": (
            sev, "Confidential instance type SEV is not supported for machine type "
                 "'a3-highgpu-1g'"),
        "a3 without the accelerator": (
            bare, "Invalid value for field 'resource.guestAccelerators'"),
        "accelerator in another zone": (
            wrong_zone,
            "Invalid value for field 'resource.guestAccelerators[0].acceleratorType'"),
    }
    for case, (instance, message) in cases.items():
        with pytest.raises(gexc.BadRequest) as refused:
            instances.insert(project=hospital.project, zone=ZONE, instance_resource=instance)
        assert refused.value.code == 400, case
        assert message in refused.value.message, (case, refused.value.message)
    assert not [key for key in world.mock.compute._vms if key[2] == "malformed-gpu"]


def test_doctor_checks_the_gpu_quota_for_gpu_runs(world: World) -> None:
    """``doctor --accelerator`` checks the GPU quota the A3 VM draws on (not a CPU family's,
    which ``a3-highgpu-1g`` is not), says how to raise it, and refuses an unknown accelerator."""
    from tests.integration.test_gcp_cli_path import CLOUD_EXIT, CONFIG_EXIT, doctor, one_line

    hospital = world.owners["hospital"]
    code, checks = doctor(world, "hospital", "--accelerator", ACCELERATOR)
    assert "CPU quota" not in checks
    assert checks["GPU quota"]["ok"], checks["GPU quota"]
    assert "NVIDIA_H100_GPUS in us-central1" in checks["GPU quota"]["detail"]
    world.inject(fault="quota-exceeded", project=hospital.project, metric="NVIDIA_H100_GPUS",
                 limit=0)
    try:
        code, checks = doctor(world, "hospital", "--accelerator", ACCELERATOR)
        assert code == CLOUD_EXIT and not checks["GPU quota"]["ok"]
        assert "NVIDIA_H100_GPUS 0 of 0 free in us-central1" in checks["GPU quota"]["detail"]
        assert "a3-highgpu-1g with nvidia-h100-80gb needs 1" in checks["GPU quota"]["detail"]
        assert "--quota-id=PREEMPTIBLE-NVIDIA-H100-GPUS-per-project-region" in (
            checks["GPU quota"]["fix"])
    finally:
        world.inject(fault="quota-exceeded", project=hospital.project, metric="NVIDIA_H100_GPUS",
                     limit=8)
    unknown = world.cli("hospital", "doctor", "--accelerator", "nvidia-a100")
    assert unknown.exit_code == CONFIG_EXIT, unknown.output
    error, fix = one_line(unknown)
    assert "unknown accelerator 'nvidia-a100'" in error and ACCELERATOR in fix
