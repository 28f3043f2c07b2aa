"""The Compute stand-in's confidential GPU VMs (issue 18): the request ``run --accelerator
nvidia-h100-80gb`` sends is accepted exactly as Compute requires it (``a3-highgpu-1g``, TDX, one
``nvidia-h100-80gb`` in the zone, ``TERMINATE``, ``SPOT``, the ``confidential-space-preview-cgpu``
family), malformed ones are refused with Compute's error shape, GPUs are charged to the
``NVIDIA_H100_GPUS`` quota, and the VM's token says what the preview GPU image attests
(``EXPERIMENTAL``, ``nvidia_gpu.cc_mode: ON``). The workload runs on the CPU: nothing here has
a GPU."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from sealbench.mocktee.verifier import WorkloadLaunch, build_claims
from tests.unit.mocktee.test_compute import (
    BASE,
    CS,
    DIGEST,
    PROJECT,
    ZONE,
    Api,
    body,
    claims_from,
    fake_python,
    make_api,
    owner,
)

__all__ = ["fake_python", "make_api", "owner"]  # the fixtures, re-used

GPU_FAMILY = CS + "-preview-cgpu"
H100 = f"zones/{ZONE}/acceleratorTypes/nvidia-h100-80gb"


def gpu_body(name: str = "vm-1", **changes: Any) -> dict[str, Any]:
    """What ``instance_resource`` sends for ``--accelerator nvidia-h100-80gb`` (REST JSON)."""
    doc = body(
        name,
        machineType=f"zones/{ZONE}/machineTypes/a3-highgpu-1g",
        confidentialInstanceConfig={"confidentialInstanceType": "TDX"},
        scheduling={"onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT"},
        guestAccelerators=[{"acceleratorType": H100, "acceleratorCount": 1}],
    )
    doc["disks"][0]["initializeParams"]["sourceImage"] = GPU_FAMILY
    doc["metadata"]["items"].append({"key": "tee-install-gpu-driver", "value": "true"})
    doc.update(changes)
    return doc


def test_the_launchers_gpu_request_is_accepted_as_sent(make_api: Callable[..., Api]) -> None:
    """The body the Confidential Space launcher really builds for ``--accelerator`` (so the
    stand-in checks the request the client sends, not one made up for it)."""
    from google.cloud import compute_v1

    from sealbench.gcp.launcher import VmSettings, instance_resource

    settings = VmSettings(project=PROJECT, zone=ZONE,
                          service_account=f"runner@{PROJECT}.iam.gserviceaccount.com",
                          image_reference=f"r/e@{DIGEST}", tee="TDX",
                          accelerator="nvidia-h100-80gb")
    sent = json.loads(compute_v1.Instance.to_json(instance_resource(settings, "vm-1", {})))
    mine = gpu_body()
    for key in ("machineType", "confidentialInstanceConfig", "guestAccelerators"):
        assert sent[key] == mine[key], key
    assert sent["scheduling"].items() >= mine["scheduling"].items()
    assert sent["disks"][0]["initializeParams"]["sourceImage"] == GPU_FAMILY
    api = make_api()
    assert "error" not in api.insert(sent)
    assert claims_from(api.wait_terminated())["submods"]["nvidia_gpu"] == {"cc_mode": "ON"}


def test_gpu_vm_runs_on_the_cpu_and_attests_the_preview_gpu_image(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    op = api.insert(gpu_body())
    assert "error" not in op
    serial = api.wait_terminated()
    assert "exit_code=0" in serial
    assert "no GPU here, the workload runs on the CPU" in serial
    claims = claims_from(serial)
    assert claims["submods"]["confidential_space"]["support_attributes"] == ["EXPERIMENTAL"]
    assert claims["submods"]["nvidia_gpu"] == {"cc_mode": "ON"}
    assert claims["swname"] == "CONFIDENTIAL_SPACE"
    assert claims["dbgstat"] == "disabled-since-boot"
    assert (claims["hwmodel"], claims["attester_tcb"]) == ("GCP_INTEL_TDX", ["INTEL"])
    assert claims["submods"]["container"]["image_digest"] == DIGEST
    instance = api.json("GET", f"{BASE}/instances/vm-1")
    assert instance["guestAccelerators"] == gpu_body()["guestAccelerators"]


def test_debug_gpu_family_has_no_support_attributes(make_api: Callable[..., Api]) -> None:
    api = make_api()
    doc = gpu_body()
    doc["disks"][0]["initializeParams"]["sourceImage"] = CS + "-debug-preview-cgpu"
    api.insert(doc)
    claims = claims_from(api.wait_for())
    assert claims["dbgstat"] == "enabled"
    assert "support_attributes" not in claims["submods"]["confidential_space"]
    assert claims["submods"]["nvidia_gpu"] == {"cc_mode": "ON"}


def test_cpu_vm_tokens_are_unchanged() -> None:
    claims = build_claims(WorkloadLaunch(DIGEST, f"r@{DIGEST}"), issuer="i", audience="a",
                          nonces=(), now=1)
    assert claims["submods"]["confidential_space"]["support_attributes"] == [
        "LATEST", "STABLE", "USABLE"]
    assert "nvidia_gpu" not in claims["submods"] and "attester_tcb" not in claims


def test_gpu_launch_survives_the_remote_minter_wire_format() -> None:
    launch = WorkloadLaunch(DIGEST, f"r@{DIGEST}", hwmodel="GCP_INTEL_TDX", gpu_cc_mode="ON")
    assert WorkloadLaunch.from_json(launch.to_json()).gpu_cc_mode == "ON"
    assert WorkloadLaunch.from_json(WorkloadLaunch(DIGEST, "r").to_json()).gpu_cc_mode is None


def _without_accelerators(doc: dict[str, Any]) -> dict[str, Any]:
    doc.pop("guestAccelerators")
    return doc


def _changed(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return doc

    return change


def _cpu_with_accelerator(doc: dict[str, Any]) -> dict[str, Any]:
    cpu = body(guestAccelerators=doc["guestAccelerators"],
               scheduling={"onHostMaintenance": "TERMINATE"})
    return cpu


_ACCEL = ("guestAccelerators",)
BAD_GPU_INSERTS: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], str]] = {
    "sev_with_the_accelerator": (
        _changed(("confidentialInstanceConfig", "confidentialInstanceType"), "SEV"),
        "Confidential instance type SEV is not supported for machine type 'a3-highgpu-1g'",
    ),
    "a3_without_the_accelerator": (
        _without_accelerators,
        "Invalid value for field 'resource.guestAccelerators'",
    ),
    "accelerator_on_a_cpu_machine": (
        _cpu_with_accelerator,
        "Invalid value for field 'resource.guestAccelerators[0].acceleratorType'",
    ),
    "accelerator_in_another_zone": (
        _changed(_ACCEL, [{"acceleratorType": "zones/europe-west4-a/acceleratorTypes/"
                           "nvidia-h100-80gb", "acceleratorCount": 1}]),
        "Accelerator type zone must be the instance's zone",
    ),
    "another_accelerator": (
        _changed(_ACCEL, [{"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-l4",
                           "acceleratorCount": 1}]),
        "supports only nvidia-h100-80gb",
    ),
    "two_gpus_on_a_1g": (
        _changed(_ACCEL, [{"acceleratorType": H100, "acceleratorCount": 2}]),
        "Invalid value for field 'resource.guestAccelerators[0].acceleratorCount': '2'",
    ),
    "two_accelerator_entries": (
        _changed(_ACCEL, [{"acceleratorType": H100, "acceleratorCount": 1}] * 2),
        "Invalid value for field 'resource.guestAccelerators'",
    ),
    "live_migration": (
        _changed(("scheduling", "onHostMaintenance"), "MIGRATE"),
        "Instances with guest accelerators do not support live migration.",
    ),
    "standard_provisioning": (
        _changed(("scheduling", "provisioningModel"), "STANDARD"),
        "Invalid value for field 'resource.scheduling.provisioningModel': 'STANDARD'",
    ),
    "an_8_gpu_a3": (
        _changed(("machineType",), f"zones/{ZONE}/machineTypes/a3-highgpu-8g"),
        "Confidential instance type TDX is not supported for machine type 'a3-highgpu-8g'",
    ),
    "stable_image_family": (
        _changed(("disks",), [{"boot": True, "initializeParams": {"sourceImage": CS}}]),
        "a GPU VM needs confidential-space-preview-cgpu",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_GPU_INSERTS))
def test_malformed_gpu_request_refused_with_computes_error(
    make_api: Callable[..., Api], case: str
) -> None:
    change, text = BAD_GPU_INSERTS[case]
    api = make_api()
    reply = api.call("POST", f"{BASE}/instances", change(copy.deepcopy(gpu_body())))
    assert reply.status == 400, reply.body
    error = json.loads(reply.body)["error"]
    assert error["code"] == 400 and error["errors"][0]["reason"] == "invalid"
    assert text in error["message"], error["message"]
    assert api.call("GET", f"{BASE}/instances/vm-1").status == 404


def test_gpu_family_on_a_cpu_machine_refused(make_api: Callable[..., Api]) -> None:
    doc = body()
    doc["disks"][0]["initializeParams"]["sourceImage"] = GPU_FAMILY
    reply = make_api().call("POST", f"{BASE}/instances", doc)
    assert reply.status == 400
    assert "only on a3-highgpu-1g" in json.loads(reply.body)["error"]["message"]


def test_gpus_count_against_the_h100_quota_not_the_cpus(make_api: Callable[..., Api]) -> None:
    api = make_api("import time\ntime.sleep(120)", gpu_quota=1, cpu_quota=0)
    assert "error" not in api.insert(gpu_body("vm-1"))
    region = api.json("GET", f"/compute/v1/projects/{PROJECT}/regions/us-central1")
    quotas = {q["metric"]: (q["limit"], q["usage"]) for q in region["quotas"]}
    assert quotas["NVIDIA_H100_GPUS"] == (1.0, 1.0) and quotas["C3_CPUS"] == (0.0, 0.0)
    op = api.insert(gpu_body("vm-2"))
    assert op["status"] == "DONE" and op["httpErrorStatusCode"] == 403
    assert op["error"]["errors"][0]["code"] == "QUOTA_EXCEEDED"
    assert ("Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 1.0 in region us-central1."
            in op["error"]["errors"][0]["message"])
    assert api.call("GET", f"{BASE}/instances/vm-2").status == 404


def test_quota_fault_takes_the_gpu_metric(make_api: Callable[..., Api]) -> None:
    """What ``POST /mock/v1/faults`` ``{"fault": "quota-exceeded", "metric":
    "NVIDIA_H100_GPUS", "limit": 0}`` does (MockCloud.inject calls set_quota)."""
    api = make_api()
    api.compute.set_quota(PROJECT, "NVIDIA_H100_GPUS", 0)
    op = api.insert(gpu_body())
    assert "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0" in (
        op["error"]["errors"][0]["message"])
    assert "error" not in api.insert(body("cpu-vm"))  # CPU VMs are not affected
