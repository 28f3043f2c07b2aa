"""``GET /api/v1/inbox``: each user sees exactly what waits for them: the decisions that are
theirs (never the initiator's), their own requests still pending, pending benchmarks for
admins only, and the approved evaluations of their own datasets with the latest result."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1"


def _inbox(client: TestClient, actor: Any, h: Any) -> Any:
    return h.ok(client.get(f"{API}/inbox", headers=actor.headers))


def _new_model(client: TestClient, world: Any, h: Any, name: str) -> int:
    return int(
        h.ok(
            client.post(
                f"{API}/models",
                json={"name": name, "version": "2", "digest": h.digest_of(name)},
                headers=world.model_owner.headers,
            ),
            201,
        )["id"]
    )


def test_pending_request_waits_for_the_benchmark_owner_not_the_initiator(
    client: TestClient, world: Any, h: Any
) -> None:
    model = _new_model(client, world, h, "candidate")
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/models",
            json={"asset_id": model},
            headers=world.model_owner.headers,
        ),
        201,
    )
    authority = _inbox(client, world.bench_owner, h)
    assert [
        (i["association"]["asset_kind"], i["association"]["asset_id"], i["asset_name"])
        for i in authority["to_decide"]
    ] == [("model", model, "candidate")]
    assert authority["to_decide"][0]["asset_version"] == "2"
    vendor = _inbox(client, world.model_owner, h)
    assert vendor["to_decide"] == []
    assert [i["association"]["asset_id"] for i in vendor["awaiting_others"]] == [model]
    for bystander in (world.other, world.data_owner, world.admin):
        mine = _inbox(client, bystander, h)
        assert mine["to_decide"] == [] and mine["awaiting_others"] == []


def test_invitation_waits_for_the_asset_owner(client: TestClient, world: Any, h: Any) -> None:
    model = _new_model(client, world, h, "invited")
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/models",
            json={"asset_id": model},
            headers=world.bench_owner.headers,
        ),
        201,
    )
    assert [i["association"]["asset_id"] for i in _inbox(client, world.model_owner, h)[
        "to_decide"
    ]] == [model]
    assert _inbox(client, world.bench_owner, h)["to_decide"] == []
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/models/{model}/approve",
            headers=world.model_owner.headers,
        )
    )
    assert _inbox(client, world.model_owner, h)["to_decide"] == []


def test_only_admins_see_benchmarks_to_approve(client: TestClient, world: Any, h: Any) -> None:
    pending = h.ok(
        client.post(
            f"{API}/benchmarks", json=h.benchmark_body("waiting"), headers=world.bench_owner.headers
        ),
        201,
    )["id"]
    assert [b["id"] for b in _inbox(client, world.admin, h)["benchmarks_to_approve"]] == [pending]
    for actor in (world.bench_owner, world.data_owner, world.other):
        assert _inbox(client, actor, h)["benchmarks_to_approve"] == []


def test_evaluations_are_the_data_owners_approved_pairs_with_their_latest_result(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    evaluations = _inbox(client, world.data_owner, h)["evaluations"]
    assert [(e["benchmark_id"], e["dataset_id"], e["model_id"], e["result_id"]) for e in
            evaluations] == [(world.benchmark_id, world.dataset_id, world.model_id, None)]
    sealed = "sha256:" + "3" * 64
    claims = h.result_claims(
        summary=h.valid_summary(),
        benchmark_id=world.benchmark_id,
        sealed_digest=sealed,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    result = h.ok(
        client.post(
            f"{API}/results",
            json={
                "benchmark_id": world.benchmark_id,
                "dataset_id": world.dataset_id,
                "model_id": world.model_id,
                "summary": h.valid_summary(),
                "sealed_result_digest": sealed,
                "attestation_token": tokens.sign(claims),
            },
            headers=world.data_owner.headers,
        ),
        201,
    )
    assert [e["result_id"] for e in _inbox(client, world.data_owner, h)["evaluations"]] == [
        result["id"]
    ]
    for actor in (world.model_owner, world.bench_owner, world.other):
        assert _inbox(client, actor, h)["evaluations"] == []


def test_withdrawn_model_leaves_the_data_owners_evaluations(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/models/{world.model_id}/withdraw",
            headers=world.model_owner.headers,
        )
    )
    assert _inbox(client, world.data_owner, h)["evaluations"] == []
