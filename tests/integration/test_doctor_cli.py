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
