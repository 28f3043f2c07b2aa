"""Withdrawing an association: only the asset's owner may, from pending or approved; nothing new
runs or is submitted on the pair, the other side loses access to the asset's coordinates, the
results already verified stay and are marked, the change is in the audit chain, and the link
can be requested again."""

from __future__ import annotations

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
COORDS = {
    "kms_key_name": "projects/hospital/locations/global/keyRings/ring/cryptoKeys/key",
    "storage_uri": "gs://hospital-bucket/prefix",
    "wip_provider": "projects/123/locations/global/workloadIdentityPools/pool/providers/prov",
}


def _submit(client: TestClient, world: Any, tokens: Any, h: Any, sealed: str) -> Any:
    claims = h.result_claims(
        summary=SUMMARY,
        benchmark_id=world.benchmark_id,
        sealed_digest=sealed,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    body = {
        "benchmark_id": world.benchmark_id,
        "dataset_id": world.dataset_id,
        "model_id": world.model_id,
        "summary": SUMMARY,
        "sealed_result_digest": sealed,
        "attestation_token": tokens.sign(claims),
    }
    return client.post(f"{API}/results", json=body, headers=world.data_owner.headers)


def _withdraw(client: TestClient, world: Any, kind: str, actor: Any) -> Any:
    asset = world.dataset_id if kind == "datasets" else world.model_id
    return client.post(
        f"{API}/benchmarks/{world.benchmark_id}/{kind}/{asset}/withdraw", headers=actor.headers
    )


def test_model_owner_withdraws_and_results_stay_marked(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    first = h.ok(_submit(client, world, tokens, h, "sha256:" + "1" * 64), 201)
    assert first["withdrawn"] == []
    row = h.ok(_withdraw(client, world, "models", world.model_owner))
    assert row["status"] == "withdrawn" and row["actor_id"] == world.model_owner.user_id
    for reader in (world.data_owner, world.bench_owner):
        listed = h.ok(client.get(f"{API}/results", headers=reader.headers))["items"]
        assert [(r["id"], r["withdrawn"]) for r in listed] == [(first["id"], ["model"])]
        one = h.ok(client.get(f"{API}/results/{first['id']}", headers=reader.headers))
        assert one["withdrawn"] == ["model"] and one["summary"] == SUMMARY
        board = h.ok(
            client.get(f"{API}/benchmarks/{world.benchmark_id}/leaderboard", headers=reader.headers)
        )
        assert [(e["result_id"], e["withdrawn"]) for e in board["entries"]] == [
            (first["id"], ["model"])
        ]


def test_result_of_a_withdrawn_pair_is_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    h.ok(_withdraw(client, world, "datasets", world.data_owner))
    refused = _submit(client, world, tokens, h, "sha256:" + "2" * 64)
    assert refused.status_code == 409 and refused.json()["code"] == "invalid_state"
    assert "not approved" in refused.json()["message"]
    assert h.ok(client.get(f"{API}/results", headers=world.bench_owner.headers))["items"] == []


def test_withdrawn_model_owner_can_no_longer_read_the_dataset_coordinates(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(
        client.put(
            f"{API}/datasets/{world.dataset_id}/coordinates",
            json=COORDS,
            headers=world.data_owner.headers,
        )
    )
    path = f"{API}/datasets/{world.dataset_id}/coordinates"
    h.ok(client.get(path, headers=world.model_owner.headers))
    h.ok(_withdraw(client, world, "models", world.model_owner))
    assert client.get(path, headers=world.model_owner.headers).status_code == 403


def test_only_the_asset_owner_withdraws(client: TestClient, world: Any) -> None:
    for actor in (world.bench_owner, world.other, world.admin, world.model_owner):
        r = _withdraw(client, world, "datasets", actor)
        assert r.status_code == 403, actor.email
        assert r.json()["code"] == "forbidden"


def test_rejected_or_withdrawn_link_cannot_be_withdrawn_again(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(_withdraw(client, world, "datasets", world.data_owner))
    again = _withdraw(client, world, "datasets", world.data_owner)
    assert again.status_code == 409 and "withdrawn" in again.json()["message"]
    model = h.ok(
        client.post(
            f"{API}/models",
            json={"name": "second", "version": "1", "digest": h.digest_of("second")},
            headers=world.model_owner.headers,
        ),
        201,
    )["id"]
    base = f"{API}/benchmarks/{world.benchmark_id}/models/{model}"
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/models",
            json={"asset_id": model},
            headers=world.model_owner.headers,
        ),
        201,
    )
    h.ok(client.post(f"{base}/reject", headers=world.bench_owner.headers))
    refused = client.post(f"{base}/withdraw", headers=world.model_owner.headers)
    assert refused.status_code == 409 and refused.json()["code"] == "invalid_state"


def test_pending_request_can_be_withdrawn_and_the_decider_can_no_longer_approve_it(
    client: TestClient, world: Any, h: Any
) -> None:
    dataset = h.ok(
        client.post(
            f"{API}/datasets",
            json={"name": "second", "digest": h.digest_of("second"), "case_count": 2},
            headers=world.data_owner.headers,
        ),
        201,
    )["id"]
    base = f"{API}/benchmarks/{world.benchmark_id}/datasets/{dataset}"
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/datasets",
            json={"asset_id": dataset},
            headers=world.data_owner.headers,
        ),
        201,
    )
    h.ok(client.post(f"{base}/withdraw", headers=world.data_owner.headers))
    late = client.post(f"{base}/approve", headers=world.bench_owner.headers)
    assert late.status_code == 409 and "withdrawn" in late.json()["message"]


def test_withdrawal_is_audited_and_the_link_can_be_requested_again(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(_withdraw(client, world, "datasets", world.data_owner))
    events = h.ok(client.get(f"{API}/audit?limit=200", headers=world.admin.headers))["items"]
    withdrawn = [e for e in events if e["action"] == "association.withdraw"]
    assert len(withdrawn) == 1
    event = withdrawn[0]
    assert event["actor_id"] == world.data_owner.user_id
    assert event["entity_id"] == f"{world.benchmark_id}:{world.dataset_id}"
    assert '"previous":"approved"' in event["payload"]
    assert '"status":"withdrawn"' in event["payload"]
    assert h.ok(client.get(f"{API}/audit/verify", headers=world.admin.headers))["ok"] is True
    again = h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/datasets",
            json={"asset_id": world.dataset_id},
            headers=world.data_owner.headers,
        ),
        201,
    )
    assert again["status"] == "pending" and again["revision"] == 4
    history = h.ok(
        client.get(
            f"{API}/benchmarks/{world.benchmark_id}/datasets/{world.dataset_id}/history",
            headers=world.other.headers,
        )
    )["items"]
    assert [r["status"] for r in history] == ["pending", "approved", "withdrawn", "pending"]
