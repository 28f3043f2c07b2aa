"""Propagation is a state, not a failure (issue 29): with the mock applying IAM changes late, as
Google does ("typically 2 minutes"; a few seconds here), a run started right after the owners'
``policy sync`` finds its token exchange accepted and the key or bucket still refusing; the
enclave waits for IAM to apply the grant, the CLI shows it waiting, and the run succeeds. A
refusal by the key-release condition itself (the STS refuses the exchange, and says why) fails
at once, without waiting, under the same delay.

The world of ``test_gcp_cli_path`` (Google's client libraries against the mock, ``--cloud gcp``
profiles, runs on the Compute stand-in)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import requests

from sealbench.client.runs.batch import iam_wait_window
from tests.integration.test_gcp_cli_path import World, ok, world

__all__ = ["world"]  # the fixture, re-used

pytestmark = pytest.mark.timeout(300)

#: The mock's IAM propagation delay: longer than the stand-in takes to start the run, so its
#: first key or bucket call comes while the fresh grants are not in effect yet.
DELAY_S = 12.0


def _events(output: str) -> list[dict[str, Any]]:
    found = []
    for line in output.splitlines():
        if line.startswith("{") and '"kind"' in line:
            found.append(json.loads(line))
    return found


@pytest.fixture(scope="module")
def fresh(world: World) -> dict[str, str]:
    """A benchmark (no GPU opt-in), the lab's model and the hospital's dataset sealed,
    associated and approved; the delay switched on, then both owners' grants written by
    ``policy sync``: they are fresh when the tests run."""
    cli, tmp = world.cli, world.tmp
    created = ok(cli("authority", "benchmark", "create", "--tee", "mock", "--definition",
                     "brats-small", "--json"))
    b = str(json.loads(created.stdout)["id"])
    ok(cli("admin", "benchmark", "approve", b))
    world.ids["b"] = int(b)
    mid, onnx = world.register_model("lab", 7)
    ok(cli("lab", "model", "seal", str(onnx), "--model", str(mid)))
    ok(cli("lab", "model", "associate", "--model", str(mid), "--benchmark", b))
    ok(cli("hospital", "keys", "init"))
    raw, prepared = tmp / "raw-late", tmp / "prepared-late"
    ok(cli("hospital", "dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b))
    ok(cli("hospital", "dataset", "prepare", str(raw), str(prepared), "--benchmark", b))
    d = str(json.loads(ok(cli("hospital", "dataset", "register", str(prepared), "--name",
                              "h-late", "--benchmark", b, "--json")).stdout)["id"])
    ok(cli("hospital", "dataset", "seal", str(prepared), "--dataset", d, "--json"))
    ok(cli("hospital", "dataset", "associate", "--dataset", d, "--benchmark", b))
    for kind, asset in (("--dataset", d), ("--model", str(mid))):
        ok(cli("authority", "association", "approve", "--benchmark", b, kind, asset))
    # a GPU VM needs GPU quota (0 in a new project, as on Google): the hospital's increase
    world.inject(fault="quota-exceeded", project=world.owners["hospital"].project,
                 metric="GPUS_ALL_REGIONS", limit=1)
    control = f"{world.ep.control}/mock/v1/iamPropagation"
    assert requests.post(control, json={"seconds": DELAY_S}, timeout=10).status_code == 200
    # the condition is rendered by the stand-in verifier's own platform (test_gcp_cli_path)
    world.stand_in_platform.undo()
    ok(cli("hospital", "policy", "sync", "--dataset", d, "--result-bucket",
           world.owners["hospital"].bucket))
    ok(cli("lab", "policy", "sync", "--model", str(mid)))
    return {"b": b, "d": d, "m": str(mid)}


def _run(world: World, ids: dict[str, str], *extra: str) -> tuple[int, str, float]:
    started = time.monotonic()
    ran = world.cli("hospital", "run", "--benchmark", ids["b"], "--dataset", ids["d"],
                    "--model", ids["m"], "--tee", "confidential-space", "--json", *extra)
    return ran.exit_code, ran.output, time.monotonic() - started


def test_a_run_right_after_the_sync_waits_for_iam_and_succeeds(
    world: World, fresh: dict[str, str]
) -> None:
    code, output, _ = _run(world, fresh)
    events = _events(output)
    kinds = [e["kind"] for e in events]
    assert code == 0, output
    assert kinds[-1] == "succeeded", kinds
    waiting = [e for e in events if e["kind"] == "waiting"]
    assert waiting, kinds  # refused at first: the grants were not in effect yet
    assert all(e["message"].startswith("waiting for IAM to apply the grant: the ")
               for e in waiting)
    assert all(e["delay_s"] >= 1 for e in waiting)


def test_a_condition_refusal_fails_at_once_without_waiting(
    world: World, fresh: dict[str, str]
) -> None:
    """A GPU run under a benchmark without the EXPERIMENTAL opt-in: the owners' condition
    (``STABLE`` required) refuses the token exchange. No wait, whatever the window: the STS's
    reason is the run's failure."""
    control = f"{world.ep.control}/mock/v1/iamPropagation"
    requests.post(control, json={"seconds": DELAY_S}, timeout=10)
    code, output, seconds = _run(world, fresh, "--accelerator", "nvidia-h100-80gb",
                                 "--allow-cpu-fallback", "--iam-wait", "900", "--force")
    events = _events(output)
    flat = " ".join(output.split())
    assert code != 0, output
    assert not [e for e in events if e["kind"] == "waiting"], events
    assert "rejected by the attribute condition" in flat, flat
    assert [e["reason"] for e in events if e["kind"] == "failed"] == ["key_release_denied"]
    assert seconds < 120  # never the 900 s window


def test_the_window_is_what_is_left_after_the_owners_last_sync() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)
    assert iam_wait_window([now - timedelta(minutes=1), now - timedelta(minutes=30)], now) == 540
    assert iam_wait_window([now - timedelta(hours=2)] * 2, now) == 0  # nothing to propagate
    assert iam_wait_window([None, now], now) == 600  # a sync time unknown: the whole window
    assert iam_wait_window([now + timedelta(minutes=5)] * 2, now) == 600  # a clock ahead
    naive = datetime(2026, 12, 4, 21, 58)
    assert iam_wait_window([naive, naive], now) == 480
