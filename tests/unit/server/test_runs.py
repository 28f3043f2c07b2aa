"""Run status on the registry (``/runs``, ``/benchmarks/{id}/progress``): who sees which runs,
how a run's state may move, that reports carry no free text, that late or repeated reports
change nothing, that concurrent reports lose nothing, and that each change is audited."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin

API = "/api/v1"
#: A run's summary.json that the benchmark's plug-in (brats-2023-gli/1) validates.
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))
SUMMARY: dict[str, Any] = {
    "format": "sealbench/result-summary", "version": 1, "run_id": "run-1", "benchmark_id": "1",
    "metrics_version": "brats-2023-gli/1",
    "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
        InsecureFixedNoise()).to_json(),
}
STATES = ("planned", "launching", "running", "succeeded")


def _report(world: Any, h: Any, state: str, seq: int, **extra: Any) -> dict[str, Any]:
    body = {
        "benchmark_id": world.benchmark_id,
        "dataset_id": world.dataset_id,
        "model_id": world.model_id,
        "state": state,
        "seq": seq,
        "image_digest": h.IMAGE_DIGEST,
        "tee": "mock",
    }
    body.update(extra)
    return body


def _put(client: TestClient, actor: Any, run_id: str, body: dict[str, Any]) -> Any:
    return client.put(f"{API}/runs/{run_id}", json=body, headers=actor.headers)


def _runs(client: TestClient, actor: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(f"{API}/runs?limit=200&offset={offset}", headers=actor.headers).json()
        items.extend(page["items"])
        offset = page["next_offset"]
    return items


def _run_events(client: TestClient, admin: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(f"{API}/audit?limit=200&offset={offset}", headers=admin.headers).json()
        events.extend(e for e in page["items"] if e["entity_type"] == "run")
        offset = page["next_offset"]
    return events


def _submit_result(client: TestClient, world: Any, tokens: Any, h: Any) -> int:
    sealed = "sha256:" + "7" * 64
    claims = h.result_claims(
        summary=SUMMARY, benchmark_id=world.benchmark_id, sealed_digest=sealed,
        data_digest=world.dataset_digest, model_digest=world.model_digest,
    )
    body = {
        "benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
        "model_id": world.model_id, "summary": SUMMARY, "sealed_result_digest": sealed,
        "attestation_token": tokens.sign(claims),
    }
    return int(h.ok(client.post(f"{API}/results", json=body, headers=world.data_owner.headers),
                    201)["id"])


def test_run_visible_to_authority_hospital_and_model_owner_only(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(_put(client, world.data_owner, "run-a", _report(world, h, "running", 1)))
    for reader in (world.bench_owner, world.data_owner, world.model_owner):
        assert [r["run_id"] for r in _runs(client, reader)] == ["run-a"]
        cells = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                                headers=reader.headers))["cells"]
        assert [(c["model_id"], c["dataset_id"], c["status"]) for c in cells] == [
            (world.model_id, world.dataset_id, "running")
        ]
    for outsider in (world.other, world.admin):
        assert _runs(client, outsider) == []
        refused = client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                             headers=outsider.headers)
        assert refused.status_code == 403


def test_model_owner_sees_only_its_models_rows(
    client: TestClient, world: Any, h: Any, make_user: Any
) -> None:
    rival = make_user("rival@model.test")
    mid = h.ok(client.post(f"{API}/models", json={"name": "rival", "version": "1",
                                                  "digest": h.digest_of("rival")},
                           headers=rival.headers), 201)["id"]
    b = world.benchmark_id
    h.ok(client.post(f"{API}/benchmarks/{b}/models", json={"asset_id": mid},
                     headers=rival.headers), 201)
    h.ok(client.post(f"{API}/benchmarks/{b}/models/{mid}/approve",
                     headers=world.bench_owner.headers))
    h.ok(_put(client, world.data_owner, "run-mine", _report(world, h, "running", 1)))
    h.ok(_put(client, world.data_owner, "run-rival", _report(world, h, "failed", 1,
                                                            model_id=mid, reason="quota")))
    assert [r["run_id"] for r in _runs(client, rival)] == ["run-rival"]
    assert [r["run_id"] for r in _runs(client, world.model_owner)] == ["run-mine"]
    board = h.ok(client.get(f"{API}/benchmarks/{b}/progress", headers=rival.headers))
    assert [(c["model_id"], c["status"], c["reason"]) for c in board["cells"]] == [
        (mid, "failed", "quota")
    ]
    everything = h.ok(client.get(f"{API}/benchmarks/{b}/progress",
                                 headers=world.bench_owner.headers))
    assert everything["counts"] == {"running": 1, "failed": 1}


def test_only_the_datasets_owner_reports_its_runs(client: TestClient, world: Any, h: Any) -> None:
    for intruder in (world.model_owner, world.bench_owner, world.other):
        refused = _put(client, intruder, "run-x", _report(world, h, "running", 1))
        assert refused.status_code == 403, refused.text
    assert _runs(client, world.bench_owner) == []


def test_run_of_unapproved_model_refused(client: TestClient, world: Any, h: Any) -> None:
    mid = h.ok(client.post(f"{API}/models", json={"name": "unlinked", "version": "1",
                                                  "digest": h.digest_of("unlinked")},
                           headers=world.model_owner.headers), 201)["id"]
    refused = _put(client, world.data_owner, "run-u", _report(world, h, "planned", 1,
                                                               model_id=mid))
    assert refused.status_code == 409 and "not approved" in refused.json()["message"]


def test_free_text_in_a_report_refused(client: TestClient, world: Any, h: Any) -> None:
    """A report is typed through and through: no error text (which could name a case), no
    metric, no token; a failure is a class from a closed list."""
    for extra in (
        {"error": "case BraTS-GLI-00001 failed"},
        {"summary": SUMMARY},
        {"state": "failed", "reason": "case BraTS-GLI-00001 unreadable"},
        {"step_seconds": {"BraTS-GLI-00001": 1.0}},
        {"state": "failed"},  # a failure without its class
        {"state": "running", "reason": "quota"},
    ):
        body = {**_report(world, h, "running", 1), **extra}
        refused = _put(client, world.data_owner, "run-t", body)
        assert refused.status_code == 422, (extra, refused.text)
    assert _runs(client, world.data_owner) == []


def test_timing_channel_closed_no_step_timings_and_times_to_the_day(
    client: TestClient, world: Any, h: Any
) -> None:
    """Issue 40: a model that spins on one patient's record signalled its owner through the
    run's ``step_seconds.infer``. A report with timings is refused with the reason (a client of
    before the change learns why), what readers get has none, and every time the registry shows
    of a run (its record, its progress cell, its audit events) is a day, never finer."""
    owner = world.data_owner
    timed = _put(client, owner, "run-tc", _report(world, h, "succeeded", 1,
                                                  step_seconds={"infer": 6.59}))
    assert timed.status_code == 422 and "no step timings" in timed.text, timed.text
    assert _runs(client, owner) == []
    h.ok(_put(client, owner, "run-tc", _report(world, h, "running", 1)))
    h.ok(_put(client, owner, "run-tc", _report(world, h, "succeeded", 2)))
    for reader in (world.model_owner, world.bench_owner, owner):
        (run,) = _runs(client, reader)
        assert "step_seconds" not in run
        for stamp in (run["created_at"], run["updated_at"]):
            assert stamp.endswith(("T00:00:00Z", "T00:00:00+00:00")), stamp
    cell = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                           headers=world.model_owner.headers))["cells"][0]
    assert cell["updated_at"].endswith(("T00:00:00Z", "T00:00:00+00:00")), cell
    events = _run_events(client, world.admin)
    assert [e["action"] for e in events] == ["run.running", "run.succeeded"]
    assert all(e["occurred_at"].endswith("T00:00:00.000000+00:00") for e in events), events


def test_state_moves_forward_and_a_terminal_state_is_final(
    client: TestClient, world: Any, h: Any
) -> None:
    owner = world.data_owner
    h.ok(_put(client, owner, "run-f", _report(world, h, "running", 1)))
    back = _put(client, owner, "run-f", _report(world, h, "planned", 2))
    assert back.status_code == 409
    h.ok(_put(client, owner, "run-f", _report(world, h, "interrupted", 3, reason="stopped")))
    revived = _put(client, owner, "run-f", _report(world, h, "succeeded", 4))
    assert revived.status_code == 409 and "interrupted" in revived.json()["message"]
    moved = _put(client, owner, "run-f", _report(world, h, "interrupted", 5, reason="stopped",
                                                 model_id=world.model_id + 100))
    assert moved.status_code == 409
    assert [r["state"] for r in _runs(client, owner)] == ["interrupted"]


def test_late_or_repeated_report_changes_nothing(client: TestClient, world: Any, h: Any) -> None:
    owner = world.data_owner
    h.ok(_put(client, owner, "run-l", _report(world, h, "succeeded", 5, attempts=2)))
    late = h.ok(_put(client, owner, "run-l", _report(world, h, "running", 3)))
    assert late["state"] == "succeeded" and late["seq"] == 5
    again = h.ok(_put(client, owner, "run-l", _report(world, h, "succeeded", 5, attempts=2)))
    assert again == late
    assert [e["action"] for e in _run_events(client, world.admin)] == ["run.succeeded"]


def test_submitted_result_links_to_its_run_and_the_pair_is_done(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    owner = world.data_owner
    for seq, state in enumerate(STATES, start=1):
        h.ok(_put(client, owner, "run-r", _report(world, h, state, seq)))
    result_id = _submit_result(client, world, tokens, h)
    linked = h.ok(_put(client, owner, "run-r", _report(world, h, "succeeded", 5,
                                                       result_id=result_id)))
    assert linked["result_id"] == result_id
    cell = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                           headers=world.bench_owner.headers))["cells"][0]
    assert (cell["status"], cell["result_id"], cell["run_id"]) == ("done", result_id, "run-r")
    # another run may not claim the same result, nor this one another's
    h.ok(_put(client, owner, "run-s", _report(world, h, "succeeded", 1)))
    stolen = _put(client, owner, "run-s", _report(world, h, "succeeded", 2, result_id=result_id))
    assert stolen.status_code == 409
    actions = [(e["action"], e["payload"]) for e in _run_events(client, world.admin)]
    assert [a for a, _ in actions] == [
        "run.planned", "run.launching", "run.running", "run.succeeded", "run.result",
        "run.succeeded",
    ]
    assert f'"result_id":{result_id}' in actions[4][1]


def test_batch_of_reports_applies_all_or_none(client: TestClient, world: Any, h: Any) -> None:
    owner = world.data_owner
    batch = {"reports": [{"run_id": f"run-b{i}", **_report(world, h, "planned", 1)}
                         for i in range(3)]}
    stored = h.ok(client.post(f"{API}/runs/reports", json=batch, headers=owner.headers))
    assert [r["run_id"] for r in stored["runs"]] == ["run-b0", "run-b1", "run-b2"]
    assert [e["action"] for e in _run_events(client, world.admin)] == ["run.planned"] * 3
    # one bad report (a run going back to planned) refuses the whole batch
    h.ok(_put(client, owner, "run-b0", _report(world, h, "running", 2)))
    refused = client.post(f"{API}/runs/reports", headers=owner.headers, json={"reports": [
        {"run_id": "run-b3", **_report(world, h, "planned", 1)},
        {"run_id": "run-b0", **_report(world, h, "planned", 3)},
    ]})
    assert refused.status_code == 409
    assert "run-b3" not in {r["run_id"] for r in _runs(client, owner)}
    twice = client.post(f"{API}/runs/reports", headers=owner.headers, json={"reports": [
        {"run_id": "run-b4", **_report(world, h, "planned", 1)},
        {"run_id": "run-b4", **_report(world, h, "launching", 2)},
    ]})
    assert twice.status_code == 422
    intruder = client.post(f"{API}/runs/reports", json=batch, headers=world.model_owner.headers)
    assert intruder.status_code == 403


def test_concurrent_run_reports_lose_nothing(client: TestClient, world: Any, h: Any) -> None:
    """Eight reporters each drive five runs through every state at once, in shuffled order of
    runs: every run ends succeeded, with one audit event per state change."""
    owner = world.data_owner
    errors: list[str] = []

    def reporter(worker: int) -> None:
        rng = random.Random(worker)
        steps = [(f"run-{worker}-{i}", seq, state)
                 for i in range(5) for seq, state in enumerate(STATES, start=1)]
        # keep each run's own order, interleave the runs
        pending = {key: [s for s in steps if s[0] == key] for key in {s[0] for s in steps}}
        while pending:
            key = rng.choice(sorted(pending))
            run_id, seq, state = pending[key].pop(0)
            if not pending[key]:
                del pending[key]
            r = _put(client, owner, run_id, _report(world, h, state, seq))
            if r.status_code != 200:
                errors.append(f"{run_id} {state}: {r.status_code} {r.text}")

    threads = [threading.Thread(target=reporter, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    runs = _runs(client, world.bench_owner)
    assert len(runs) == 40 and {r["state"] for r in runs} == {"succeeded"}
    assert len(_run_events(client, world.admin)) == 40 * len(STATES)
    assert h.ok(client.get(f"{API}/audit/verify", headers=world.admin.headers))["ok"] is True


def _sign_in(client: TestClient, token: str) -> None:
    import re

    client.cookies.clear()
    form = client.get("/ui/sign-in").text
    match = re.search(r'name="csrf" value="([^"]+)"', form)
    assert match is not None
    r = client.post("/ui/sign-in", data={"csrf": match.group(1), "token": token, "next": "/ui/"},
                    follow_redirects=False)
    assert r.status_code == 303, r.text


def test_dashboard_progress_matrix_shows_each_viewer_what_the_api_does(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(_put(client, world.data_owner, "run-d", _report(world, h, "failed", 1,
                                                          reason="key_release_denied")))
    page = f"/ui/benchmarks/{world.benchmark_id}/progress"
    for reader in (world.bench_owner, world.model_owner, world.data_owner):
        _sign_in(client, reader.token)
        shown = client.get(page)
        assert shown.status_code == 200, shown.text
        assert (f'data-model-id="{world.model_id}" data-dataset-id="{world.dataset_id}" '
                'data-status="failed"') in shown.text
        assert "key_release_denied" in shown.text and "run-d" in shown.text
    _sign_in(client, world.other.token)
    assert client.get(page).status_code == 403


def test_fabricated_integrity_failure_shown_to_the_model_owner_is_labelled_a_hospital_claim(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """A hospital can report any failure of a model without the enclave's signed failure record:
    the model owner sees it as reported by the hospital, never as attested; a verified result
    is."""
    h.ok(_put(client, world.data_owner, "run-f", _report(world, h, "failed", 1,
                                                          reason="integrity")))
    me = h.ok(client.get(f"{API}/users/me", headers=world.data_owner.headers))
    cell = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                           headers=world.model_owner.headers))["cells"][0]
    assert (cell["status"], cell["reason"]) == ("failed", "integrity")
    assert cell["attested"] is False and cell["reported_by_id"] == me["id"]
    _sign_in(client, world.model_owner.token)
    shown = client.get(f"/ui/benchmarks/{world.benchmark_id}/progress").text
    assert 'data-source="reported">reported by hospital' in shown
    assert "a claim the registry cannot check" in shown
    for seq, state in enumerate(STATES, start=1):
        h.ok(_put(client, world.data_owner, "run-g", _report(world, h, state, seq)))
    _submit_result(client, world, tokens, h)
    done = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                           headers=world.model_owner.headers))["cells"][0]
    assert done["status"] == "done" and done["attested"] is True
    assert 'data-source="attested">attested result' in client.get(
        f"/ui/benchmarks/{world.benchmark_id}/progress").text


# -- attested failures (issue 28) ----------------------------------------------------------------

def _record(run_id: str, error: str = "AssetIntegrityError") -> dict[str, Any]:
    """A failure record as the enclave writes it (``sealbench.contract.result.FailureRecord``)."""
    return {"format": "sealbench/run-failure", "version": 1, "run_id": run_id,
            "step": "download, verify and load the model", "error": error,
            "reason": "the sealed model does not match its digest", "exit_code": 14}


def _failure_claims(world: Any, h: Any, record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    from sealbench.crypto.attestation import FAILURE_AUDIENCE, failure_nonce
    from sealbench.crypto.canonical import canonical_json

    claims = h.result_claims(
        summary=SUMMARY, benchmark_id=world.benchmark_id, sealed_digest="sha256:" + "7" * 64,
        data_digest=world.dataset_digest, model_digest=world.model_digest,
        audience=FAILURE_AUDIENCE)
    claims["eat_nonce"] = failure_nonce(canonical_json(record))
    claims["submods"]["container"]["env_override"]["SEALBENCH_RUN_ID"] = record["run_id"]
    claims.update(changes)
    return claims


def _cell(client: TestClient, world: Any) -> dict[str, Any]:
    cells = h_ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/progress",
                            headers=world.model_owner.headers))["cells"]
    return dict(cells[0])


def h_ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_fabricated_failure_with_forged_token_shown_as_a_claim(
    client: TestClient, world: Any, h: Any, tokens: Any, caplog: Any
) -> None:
    """A hospital attaches a "signed" failure record to a fabricated integrity failure of a
    model: a token signed by a key not in the verifier's JWKS, a genuine token of another
    record, a result token, or a genuine token of another run. Each report is taken (a bad
    token never blocks it), and the model owner sees a hospital's claim, never an attested
    failure."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    forger = type(tokens)(kid=tokens.kid, key=rsa.generate_private_key(
        public_exponent=65537, key_size=2048))
    record = _record("run-x")
    other = _record("run-x", error="KeyReleaseDenied")
    forged = {
        "run-k1": forger.sign(_failure_claims(world, h, {**record, "run_id": "run-k1"})),
        "run-k2": type(tokens)(kid="rogue", key=forger.key).sign(
            _failure_claims(world, h, {**record, "run_id": "run-k2"})),
        "run-n": tokens.sign(_failure_claims(world, h, {**other, "run_id": "run-n"})),
        "run-r": tokens.sign(h.result_claims(
            summary=SUMMARY, benchmark_id=world.benchmark_id, sealed_digest="sha256:" + "7" * 64,
            data_digest=world.dataset_digest, model_digest=world.model_digest)),
        "run-o": tokens.sign(_failure_claims(world, h, {**record, "run_id": "run-elsewhere"})),
    }
    for run_id, token in forged.items():
        claimed = {**record, "run_id": run_id}
        stored = h_ok(_put(client, world.data_owner, run_id, _report(
            world, h, "failed", 1, reason="integrity", failure_record=claimed,
            failure_token=token)))
        assert stored["failure_attested"] is False, run_id
        cell = _cell(client, world)
        assert (cell["run_id"], cell["status"], cell["reason"]) == (run_id, "failed", "integrity")
        assert cell["attested"] is False and cell["reported_by_id"] is not None
    assert "the failure token was not verified" in caplog.text
    _sign_in(client, world.model_owner.token)
    shown = client.get(f"/ui/benchmarks/{world.benchmark_id}/progress").text
    assert 'data-source="reported">reported by hospital' in shown
    assert "attested failure</span>" not in shown


def test_enclave_attested_failure_shown_attested_with_the_records_reason(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """The enclave's own signed record: attested, its reason the record's error class (not
    what the hospital's client said), audited, and not re-claimed by a later report."""
    record = _record("run-a")
    token = tokens.sign(_failure_claims(world, h, record))
    h_ok(_put(client, world.data_owner, "run-a", _report(world, h, "running", 1)))
    stored = h_ok(_put(client, world.data_owner, "run-a", _report(
        world, h, "failed", 2, reason="enclave", failure_record=record, failure_token=token)))
    assert stored["failure_attested"] is True and stored["reason"] == "integrity"
    later = h_ok(_put(client, world.data_owner, "run-a", _report(
        world, h, "failed", 3, reason="key_release_denied")))
    assert later["failure_attested"] is True and later["reason"] == "integrity"
    cell = _cell(client, world)
    assert (cell["status"], cell["reason"], cell["attested"]) == ("failed", "integrity", True)
    payloads = [json.loads(e["payload"]) for e in _run_events(client, world.admin)]
    attested = [p for p in payloads if p.get("failure_attested")]
    assert [p["run_id"] for p in attested] == ["run-a"] and len(attested[0]["failure_nonce"]) == 64
    _sign_in(client, world.model_owner.token)
    shown = client.get(f"/ui/benchmarks/{world.benchmark_id}/progress").text
    assert 'data-source="attested-failure">attested failure' in shown


def test_failure_record_only_on_a_failed_run_and_with_its_token(
    client: TestClient, world: Any, h: Any
) -> None:
    record = _record("run-b")
    for body in (_report(world, h, "succeeded", 1, failure_record=record, failure_token="a.b.c"),
                 _report(world, h, "failed", 1, reason="integrity", failure_record=record),
                 _report(world, h, "failed", 1, reason="integrity",
                         failure_record={**record, "reason": "x" * 9000},
                         failure_token="a.b.c")):
        assert _put(client, world.data_owner, "run-b", body).status_code == 422
