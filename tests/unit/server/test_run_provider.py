"""The execution provider a run reports (issue 18): stored with the run, shown in the
progress matrix (API and dashboard); only a known ONNX Runtime provider name is accepted, and a
later report that does not say keeps what an earlier one said."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"


def _report(world: Any, h: Any, state: str, seq: int, **extra: Any) -> dict[str, Any]:
    return {
        "benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
        "model_id": world.model_id, "state": state, "seq": seq,
        "image_digest": h.IMAGE_DIGEST, "tee": "mock", **extra,
    }


def _put(client: TestClient, actor: Any, run_id: str, body: dict[str, Any]) -> Any:
    return client.put(f"{API}/runs/{run_id}", json=body, headers=actor.headers)


def _sign_in(client: TestClient, token: str) -> None:
    client.cookies.clear()
    form = client.get("/ui/sign-in").text
    match = re.search(r'name="csrf" value="([^"]+)"', form)
    assert match is not None
    signed = client.post("/ui/sign-in", data={"csrf": match.group(1), "token": token,
                                              "next": "/ui/"}, follow_redirects=False)
    assert signed.status_code == 303, signed.text


def _cell(client: TestClient, world: Any, actor: Any) -> dict[str, Any]:
    board = client.get(f"{API}/benchmarks/{world.benchmark_id}/progress", headers=actor.headers)
    [cell] = board.json()["cells"]
    return dict(cell)


def test_provider_is_stored_kept_and_shown_in_progress(
    client: TestClient, world: Any, h: Any
) -> None:
    owner = world.data_owner
    run = h.ok(_put(client, owner, "run-p", _report(
        world, h, "running", 1, execution_provider="CUDAExecutionProvider")))
    assert run["execution_provider"] == "CUDAExecutionProvider"
    # a later report that does not name the provider keeps it
    run = h.ok(_put(client, owner, "run-p", _report(world, h, "failed", 2, reason="enclave")))
    assert run["execution_provider"] == "CUDAExecutionProvider"
    for reader in (world.bench_owner, world.model_owner, owner):
        assert _cell(client, world, reader)["execution_provider"] == "CUDAExecutionProvider"
    _sign_in(client, world.bench_owner.token)
    page = client.get(f"/ui/benchmarks/{world.benchmark_id}/progress")
    assert page.status_code == 200 and "on CUDAExecutionProvider" in page.text


def test_run_without_provider_has_none(client: TestClient, world: Any, h: Any) -> None:
    run = h.ok(_put(client, world.data_owner, "run-n", _report(world, h, "running", 1)))
    assert run["execution_provider"] is None
    assert _cell(client, world, world.bench_owner)["execution_provider"] is None


@pytest.mark.parametrize("provider", [
    "cuda", "OpenVINOExecutionProvider", "CUDAExecutionProvider; case BraTS-GLI-00001",
    "CPUExecutionProvider ", "", 1,
])
def test_unknown_provider_refused(client: TestClient, world: Any, h: Any, provider: Any) -> None:
    refused = _put(client, world.data_owner, "run-x",
                   _report(world, h, "running", 1, execution_provider=provider))
    assert refused.status_code == 422, refused.text
