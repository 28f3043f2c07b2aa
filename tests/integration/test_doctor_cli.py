"""``sealbench doctor`` through the CLI on a ``--cloud gcp`` profile (issue 29, items 5 and 7):
``--probe-condition --model M`` renders the provider ``policy sync`` writes for the approvals
the registry holds now, has the IAM API accept it under a new id and deletes it; ``--json``
says which checks are verified. (Doctor per role is tested on the library:
test_doctor_checks.py; these profiles all name a zone and a runner account.)"""

from __future__ import annotations

import json

from tests.integration.test_gcp_cli_path import (
    CLOUD_EXIT,
    Ready,
    World,
    benchmark,
    doctor,
    ready,
    world,
)

__all__ = ["benchmark", "ready", "world"]  # the fixtures, re-used


def test_probe_condition_on_a_model_owners_profile(world: World, ready: Ready) -> None:
    """After the module's set-up (the lab's model approved with the hospital's dataset and
    synced): the probe of the lab's real condition, one workload in it."""
    code, checks = doctor(world, "lab", "--probe-condition", "--model", str(world.ids["m"]))
    probe = checks["condition probe"]
    assert probe["ok"] and probe["verified"], probe
    assert probe["detail"].startswith("Google accepted the condition and mapping policy sync "
                                      "writes (condition ")
    assert "1 workloads, workload_uid values up to" in probe["detail"]
    assert "probe provider sbprobe-" in probe["detail"] and "deleted" in probe["detail"]
    # what was probed is what policy sync wrote for the same approvals
    assert probe["detail"].endswith("provider attestation holds the same (policy sync is "
                                    "current)"), probe["detail"]
    # the lab's profile names a runner account it never created: that check alone fails
    assert {n for n, c in checks.items() if not c["ok"]} == {"runner service account"}
    assert code == CLOUD_EXIT


def test_probe_condition_needs_the_asset(world: World) -> None:
    refused = world.cli("lab", "doctor", "--probe-condition")
    assert refused.exit_code == 2
    assert "--dataset D or --model M" in " ".join(refused.output.split())
    both = world.cli("lab", "doctor", "--json")
    assert all("verified" in c for c in json.loads(both.stdout))


def test_a_model_owners_profile_is_not_asked_for_compute(world: World, ready: Ready) -> None:
    """A profile with no --zone and no --service-account runs no VMs (a model owner's): doctor
    does not ask it for the Compute and Confidential Computing APIs, nor for runner checks."""
    from sealbench.client.cli import app

    lab, ep = world.owners["lab"], world.ep
    endpoints = {"kms": ep.kms, "storage": ep.storage, "iam": ep.iam, "sts": ep.sts_token_url,
                 "compute": ep.compute, "serviceusage": ep.apis,
                 "cloudresourcemanager": ep.apis, "attestation": ep.issuer}
    added = world.runner.invoke(app, [
        "profile", "add", "lab-owner", "--server", world.url, "--token", world.tokens["lab"],
        "--trust-on-first-use", "--no-use", "--cloud", "gcp", "--project", lab.project,
        "--project-number", lab.number, "--bucket-location", "EU",
        *(f"--api-endpoint={name}={url}" for name, url in endpoints.items()),
    ], env={"GOOGLE_APPLICATION_CREDENTIALS": str(lab.adc)})
    assert added.exit_code == 0, added.output
    world.owners["lab-owner"] = lab
    code, checks = doctor(world, "lab-owner")
    assert code == 0, checks
    assert checks["APIs enabled"]["detail"] == (
        "4 enabled (cloudkms, storage, iam, sts; no runner: Compute not needed)")
    assert not {"runner service account", "CPU quota", "GPU quota"} & set(checks)
