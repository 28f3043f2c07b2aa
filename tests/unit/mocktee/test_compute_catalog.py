"""The Compute stand-in's project quotas and zone catalogue (issue 29, item 4): ``projects.get``
serves ``GPUS_ALL_REGIONS``, 0 in a new project as on Google Cloud, and a GPU VM is refused
until it is raised; ``machineTypes.get`` / ``acceleratorTypes.get`` answer 404 in a zone without
confidential H100s (and an insert there is refused as Compute refuses it), and the aggregated
list names the zones that have them."""

from __future__ import annotations

import json
from collections.abc import Callable

from sealbench.mocktee._compute_catalog import CONFIDENTIAL_GPU_ZONES, H100_ZONES
from tests.unit.mocktee.test_compute import PROJECT, Api, fake_python, make_api, owner
from tests.unit.mocktee.test_compute_gpu import gpu_body

__all__ = ["fake_python", "make_api", "owner"]  # the fixtures, re-used

ROOT = f"/compute/v1/projects/{PROJECT}"


def test_a_new_project_has_no_gpus_in_any_region_and_a_gpu_vm_is_refused(
    make_api: Callable[..., Api],
) -> None:
    api = make_api("import time\ntime.sleep(120)", gpus_all_regions=0)
    project = json.loads(api.call("GET", ROOT).body)
    assert project["kind"] == "compute#project"
    assert {q["metric"]: q["limit"] for q in project["quotas"]}["GPUS_ALL_REGIONS"] == 0.0
    operation = api.insert(gpu_body())
    errors = operation["error"]["errors"]
    assert errors[0]["code"] == "QUOTA_EXCEEDED"
    assert "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally." in errors[0]["message"]
    api.compute.set_quota(PROJECT, "GPUS_ALL_REGIONS", 1)  # the quota increase, granted
    assert "error" not in api.insert(gpu_body("vm-2"))
    raised = json.loads(api.call("GET", ROOT).body)["quotas"][0]
    assert (raised["limit"], raised["usage"]) == (1.0, 1.0)


def test_zones_without_confidential_h100s_have_neither_type_and_refuse_the_vm(
    make_api: Callable[..., Api],
) -> None:
    api = make_api("import time\ntime.sleep(120)")
    here = f"{ROOT}/zones/us-central1-a"
    assert api.call("GET", f"{here}/machineTypes/a3-highgpu-1g").status == 200
    accelerator = json.loads(api.call("GET", f"{here}/acceleratorTypes/nvidia-h100-80gb").body)
    assert accelerator["name"] == "nvidia-h100-80gb"
    elsewhere = f"{ROOT}/zones/europe-west1-b"
    assert api.call("GET", f"{elsewhere}/machineTypes/n2d-standard-2").status == 200
    for path in ("machineTypes/a3-highgpu-1g", "acceleratorTypes/nvidia-h100-80gb"):
        reply = api.call("GET", f"{elsewhere}/{path}")
        assert reply.status == 404 and "was not found" in reply.body.decode()
    body = gpu_body()
    body["machineType"] = "zones/europe-west1-b/machineTypes/a3-highgpu-1g"
    body["guestAccelerators"][0]["acceleratorType"] = (
        "zones/europe-west1-b/acceleratorTypes/nvidia-h100-80gb")
    refused = api.call("POST", f"{elsewhere}/instances", body)
    assert refused.status == 400
    assert "does not exist in zone 'europe-west1-b'" in json.loads(refused.body)["error"][
        "message"]
    listed = api.call("GET", f"{ROOT}/aggregated/acceleratorTypes",
                      query={"filter": "name=nvidia-h100-80gb"})
    zones = sorted(json.loads(listed.body)["items"])
    assert zones == sorted(f"zones/{z}" for z in H100_ZONES)


def test_a_zone_with_plain_h100s_outside_the_confidential_regions_refuses_a_confidential_gpu_vm(
    make_api: Callable[..., Api],
) -> None:
    """As at Google: the catalogue lists the H100 in europe-west4-c, but confidential GPUs are
    offered in us-central1 and us-east5 only (a mock that took the catalogue's word would let a
    GPU run start where no confidential H100 exists)."""
    api = make_api("import time\ntime.sleep(120)")
    plain = f"{ROOT}/zones/europe-west4-c"
    assert "europe-west4-c" not in CONFIDENTIAL_GPU_ZONES
    assert api.call("GET", f"{plain}/machineTypes/a3-highgpu-1g").status == 200
    assert api.call("GET", f"{plain}/acceleratorTypes/nvidia-h100-80gb").status == 200
    body = gpu_body()
    body["machineType"] = "zones/europe-west4-c/machineTypes/a3-highgpu-1g"
    body["guestAccelerators"][0]["acceleratorType"] = (
        "zones/europe-west4-c/acceleratorTypes/nvidia-h100-80gb")
    refused = api.call("POST", f"{plain}/instances", body)
    assert refused.status == 400
    assert "not available in zone 'europe-west4-c'" in json.loads(refused.body)["error"][
        "message"]


def test_only_the_projects_owner_reads_its_quotas(make_api: Callable[..., Api]) -> None:
    api = make_api()
    stranger = Api(api.compute, api.compute._identity.issue("user:eve@elsewhere.example")[0])
    reply = stranger.call("GET", ROOT)
    assert reply.status == 403 and "compute.projects.get" in reply.body.decode()
