"""The run a progress cell shows (issue 31 item 7): a pair that is done shows the run that
produced its accepted result, never a later attempt that was refused or failed (the demo's
debug-image attack run, refused at key release, was listed as the pair's "done" run); a pair
with no accepted result shows its latest attempt. Checked on the progress service (through the
API, which returns :func:`sealbench.server.services.runs.progress` as is) and on the page."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin

API = "/api/v1"
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))
SUMMARY: dict[str, Any] = {
    "format": "sealbench/result-summary", "version": 1, "run_id": "run-ok", "benchmark_id": "1",
    "metrics_version": "brats-2023-gli/1",
    "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
                                   InsecureFixedNoise()).to_json(),
}
STATES = ("planned", "launching", "running", "succeeded")


def _report(world: Any, h: Any, state: str, seq: int, **extra: Any) -> dict[str, Any]:
    return {"benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
            "model_id": world.model_id, "state": state, "seq": seq,
            "image_digest": h.IMAGE_DIGEST, "tee": "mock", **extra}


def _put(client: TestClient, world: Any, h: Any, run_id: str, state: str, seq: int,
         **extra: Any) -> None:
    h.ok(client.put(f"{API}/runs/{run_id}", json=_report(world, h, state, seq, **extra),
                    headers=world.data_owner.headers))


def _succeed(client: TestClient, world: Any, h: Any, run_id: str, **extra: Any) -> None:
    for seq, state in enumerate(STATES, start=1):
        _put(client, world, h, run_id, state, seq, **extra)


def _submit(client: TestClient, world: Any, h: Any, tokens: Any) -> int:
    sealed = "sha256:" + "7" * 64
    claims = h.result_claims(summary=SUMMARY, benchmark_id=world.benchmark_id,
                             sealed_digest=sealed, data_digest=world.dataset_digest,
                             model_digest=world.model_digest)
    body = {"benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
            "model_id": world.model_id, "summary": SUMMARY, "sealed_result_digest": sealed,
            "attestation_token": tokens.sign(claims)}
    return int(h.ok(client.post(f"{API}/results", json=body,
                                headers=world.data_owner.headers), 201)["id"])


def _refused_debug_run(client: TestClient, world: Any, h: Any) -> None:
    """The demo's attack: a debug image's run of the same pair, refused at key release."""
    _put(client, world, h, "run-debug-image", "planned", 1)
    _put(client, world, h, "run-debug-image", "failed", 2, reason="key_release_denied")


def _cell(client: TestClient, world: Any, h: Any) -> dict[str, Any]:
    cells = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                            headers=world.bench_owner.headers))["cells"]
    assert len(cells) == 1
    return dict(cells[0])


def _page_cell(client: TestClient, world: Any) -> str:
    form = client.get("/ui/sign-in").text
    match = re.search(r'name="csrf" value="([^"]+)"', form)
    assert match is not None
    signed = client.post("/ui/sign-in", data={"csrf": match.group(1),
                                              "token": world.bench_owner.token, "next": "/ui/"},
                         follow_redirects=False)
    assert signed.status_code == 303, signed.text
    page = client.get(f"/ui/benchmarks/{world.benchmark_id}/progress")
    assert page.status_code == 200, page.text
    start = (f'<td class="cell" data-model-id="{world.model_id}" '
             f'data-dataset-id="{world.dataset_id}"')
    cell = re.search(re.escape(start) + r".*?</td>", page.text, re.S)
    assert cell is not None, page.text
    return cell.group(0)


def test_done_pair_shows_the_run_of_its_result_not_a_later_refused_run(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    _succeed(client, world, h, "run-ok", execution_provider="CPUExecutionProvider")
    result_id = _submit(client, world, h, tokens)
    _put(client, world, h, "run-ok", "succeeded", 5, result_id=result_id,
         execution_provider="CPUExecutionProvider")
    _refused_debug_run(client, world, h)
    cell = _cell(client, world, h)
    assert (cell["status"], cell["run_id"], cell["result_id"]) == ("done", "run-ok", result_id)
    assert cell["reason"] is None and cell["attested"] is True
    assert cell["execution_provider"] == "CPUExecutionProvider"
    shown = _page_cell(client, world)
    assert 'data-status="done"' in shown and "run-ok" in shown
    assert f"result #{result_id}" in shown
    assert "run-debug-image" not in shown and "key_release_denied" not in shown


def test_done_pair_without_a_linked_run_shows_its_succeeded_run(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """A client that submitted the result but has not linked it to its run yet: the pair's
    succeeded run stands for it, not the refused attempt after it."""
    _succeed(client, world, h, "run-ok")
    result_id = _submit(client, world, h, tokens)
    _refused_debug_run(client, world, h)
    cell = _cell(client, world, h)
    assert (cell["status"], cell["run_id"], cell["result_id"]) == ("done", "run-ok", result_id)
    assert "run-debug-image" not in _page_cell(client, world)


def test_done_pair_with_no_run_behind_its_result_shows_no_run(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """A result submitted with no run reported: done, and the only run (refused) is not
    shown as the one that made it."""
    result_id = _submit(client, world, h, tokens)
    _refused_debug_run(client, world, h)
    cell = _cell(client, world, h)
    assert (cell["status"], cell["run_id"], cell["result_id"]) == ("done", None, result_id)
    assert cell["reason"] is None and cell["execution_provider"] is None
    assert "run-debug-image" not in _page_cell(client, world)


def test_pair_without_an_accepted_result_shows_its_latest_attempt(
    client: TestClient, world: Any, h: Any
) -> None:
    _succeed(client, world, h, "run-ok")  # succeeded, but nothing was submitted
    _refused_debug_run(client, world, h)
    cell = _cell(client, world, h)
    assert (cell["status"], cell["run_id"], cell["reason"]) == (
        "failed", "run-debug-image", "key_release_denied")
    assert cell["result_id"] is None and cell["attested"] is False
    shown = _page_cell(client, world)
    assert 'data-status="failed"' in shown and "run-debug-image" in shown


def test_progress_page_dates_a_run_to_the_day_only(
    client: TestClient, world: Any, h: Any
) -> None:
    """Issue 40: the page shows when a run last changed by its day, as the registry keeps it;
    a time of day would date the run's end, and so how long the model took on the cases."""
    _succeed(client, world, h, "run-ok")
    shown = _page_cell(client, world)
    assert re.search(r'title="updated \d{4}-\d\d-\d\d"', shown), shown
    assert not re.search(r"\d\d:\d\d", shown), shown
