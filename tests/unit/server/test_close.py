"""Closing a benchmark to new associations: only its owner (or an admin), only an approved
benchmark, once; afterwards no request, invitation or approval gets in, while the approved
links keep submitting results and pending ones can still be rejected or withdrawn; audited."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1"


def _close(client: TestClient, world: Any, actor: Any) -> Any:
    return client.post(f"{API}/benchmarks/{world.benchmark_id}/close", headers=actor.headers)


def _model(client: TestClient, world: Any, h: Any, name: str) -> int:
    return int(
        h.ok(
            client.post(
                f"{API}/models",
                json={"name": name, "version": "1", "digest": h.digest_of(name)},
                headers=world.model_owner.headers,
            ),
            201,
        )["id"]
    )


def _request(client: TestClient, world: Any, model: int, actor: Any) -> Any:
    return client.post(
        f"{API}/benchmarks/{world.benchmark_id}/models",
        json={"asset_id": model},
        headers=actor.headers,
    )


def test_closed_benchmark_refuses_new_requests_and_invitations(
    client: TestClient, world: Any, h: Any
) -> None:
    closed = h.ok(_close(client, world, world.bench_owner))
    assert closed["state"] == "approved" and closed["closed_by_id"] == world.bench_owner.user_id
    assert closed["closed_at"] is not None
    model = _model(client, world, h, "late")
    for actor in (world.model_owner, world.bench_owner):
        refused = _request(client, world, model, actor)
        assert refused.status_code == 409 and refused.json()["code"] == "invalid_state"
        assert "closed to new associations" in refused.json()["message"]


def test_pending_request_cannot_be_approved_after_closing_but_can_be_rejected(
    client: TestClient, world: Any, h: Any
) -> None:
    first, second = _model(client, world, h, "first"), _model(client, world, h, "second")
    for model in (first, second):
        h.ok(_request(client, world, model, world.model_owner), 201)
    h.ok(_close(client, world, world.admin))
    base = f"{API}/benchmarks/{world.benchmark_id}/models"
    late = client.post(f"{base}/{first}/approve", headers=world.bench_owner.headers)
    assert late.status_code == 409 and "closed" in late.json()["message"]
    assert h.ok(client.post(f"{base}/{first}/reject", headers=world.bench_owner.headers))[
        "status"
    ] == "rejected"
    assert h.ok(client.post(f"{base}/{second}/withdraw", headers=world.model_owner.headers))[
        "status"
    ] == "withdrawn"


def test_approved_links_keep_submitting_after_closing(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    h.ok(_close(client, world, world.bench_owner))
    sealed = "sha256:" + "4" * 64
    claims = h.result_claims(
        summary=h.valid_summary(),
        benchmark_id=world.benchmark_id,
        sealed_digest=sealed,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    body = {
        "benchmark_id": world.benchmark_id,
        "dataset_id": world.dataset_id,
        "model_id": world.model_id,
        "summary": h.valid_summary(),
        "sealed_result_digest": sealed,
        "attestation_token": tokens.sign(claims),
    }
    h.ok(client.post(f"{API}/results", json=body, headers=world.data_owner.headers), 201)
    listed = h.ok(client.get(f"{API}/benchmarks?state=approved", headers=world.other.headers))
    assert [b["id"] for b in listed["items"]] == [world.benchmark_id]


def test_only_the_owner_or_an_admin_closes_once_and_it_is_audited(
    client: TestClient, world: Any, h: Any
) -> None:
    for actor in (world.other, world.data_owner, world.model_owner):
        assert _close(client, world, actor).status_code == 403
    h.ok(_close(client, world, world.bench_owner))
    again = _close(client, world, world.admin)
    assert again.status_code == 409 and "already closed" in again.json()["message"]
    events = h.ok(client.get(f"{API}/audit?limit=200", headers=world.admin.headers))["items"]
    closing = [e for e in events if e["action"] == "benchmark.close"]
    assert [(e["actor_id"], e["entity_id"]) for e in closing] == [
        (world.bench_owner.user_id, str(world.benchmark_id))
    ]


def test_pending_benchmark_cannot_be_closed(client: TestClient, world: Any, h: Any) -> None:
    pending = h.ok(
        client.post(
            f"{API}/benchmarks", json=h.benchmark_body("draft"), headers=world.bench_owner.headers
        ),
        201,
    )["id"]
    refused = client.post(f"{API}/benchmarks/{pending}/close", headers=world.bench_owner.headers)
    assert refused.status_code == 409 and "pending" in refused.json()["message"]


def test_migration_0003_downgrades_and_upgrades(database_url: str) -> None:
    from alembic import command
    from alembic.script import ScriptDirectory
    from sqlalchemy import inspect

    from sealbench.server.db import open_database
    from sealbench.server.migrate import alembic_config, current_revision, upgrade_to_head

    db = open_database(database_url)
    try:
        with db.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0002")
        with db.engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("benchmarks")}
        assert "closed_at" not in columns and "closed_by_id" not in columns
        upgrade_to_head(db.engine)
        with db.engine.connect() as conn:
            head = ScriptDirectory.from_config(alembic_config(conn)).get_current_head()
        assert head is not None and current_revision(db.engine) == head
    finally:
        db.dispose()
