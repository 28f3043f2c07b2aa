"""The registry's rules, one test each, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1"


def test_only_admin_approves_benchmark(client: TestClient, make_user: Any, h: Any) -> None:
    admin, owner, other = (
        make_user("a@x.test", admin=True),
        make_user("o@x.test"),
        make_user("z@x.test"),
    )
    bid = h.ok(
        client.post(f"{API}/benchmarks", json=h.benchmark_body(), headers=owner.headers), 201
    )["id"]
    for actor in (owner, other):
        r = client.post(f"{API}/benchmarks/{bid}/approve", headers=actor.headers)
        assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert h.ok(client.get(f"{API}/benchmarks/{bid}", headers=other.headers))["state"] == "pending"
    approved = h.ok(client.post(f"{API}/benchmarks/{bid}/approve", headers=admin.headers))
    assert approved["state"] == "approved" and approved["approved_by_id"] == admin.user_id
    again = client.post(f"{API}/benchmarks/{bid}/approve", headers=admin.headers)
    assert again.status_code == 409 and again.json()["code"] == "invalid_state"


def test_only_admin_rejects_and_owner_retires_benchmark(
    client: TestClient, make_user: Any, h: Any
) -> None:
    admin, owner, other = (
        make_user("a@x.test", admin=True),
        make_user("o@x.test"),
        make_user("z@x.test"),
    )
    bid = h.ok(
        client.post(f"{API}/benchmarks", json=h.benchmark_body(), headers=owner.headers), 201
    )["id"]
    r = client.post(
        f"{API}/benchmarks/{bid}/state", json={"state": "rejected"}, headers=owner.headers
    )
    assert r.status_code == 403
    r = client.post(
        f"{API}/benchmarks/{bid}/state", json={"state": "retired"}, headers=other.headers
    )
    assert r.status_code == 403
    r = client.post(
        f"{API}/benchmarks/{bid}/state", json={"state": "retired"}, headers=owner.headers
    )
    assert h.ok(r)["state"] == "retired"
    r = client.post(f"{API}/benchmarks/{bid}/approve", headers=admin.headers)
    assert r.status_code == 409


def test_association_needs_approved_benchmark(client: TestClient, make_user: Any, h: Any) -> None:
    owner, hospital = make_user("o@x.test"), make_user("h@x.test")
    bid = h.ok(
        client.post(f"{API}/benchmarks", json=h.benchmark_body(), headers=owner.headers), 201
    )["id"]
    did = h.ok(
        client.post(
            f"{API}/datasets",
            json={"name": "d", "digest": h.digest_of("d"), "case_count": 1},
            headers=hospital.headers,
        ),
        201,
    )["id"]
    r = client.post(
        f"{API}/benchmarks/{bid}/datasets", json={"asset_id": did}, headers=hospital.headers
    )
    assert r.status_code == 409 and r.json()["code"] == "invalid_state"
    assert (
        h.ok(client.get(f"{API}/benchmarks/{bid}/datasets", headers=owner.headers))["items"] == []
    )


def _new_dataset(client: TestClient, actor: Any, h: Any, name: str = "extra") -> int:
    body = {"name": name, "digest": h.digest_of(name), "case_count": 2}
    return int(h.ok(client.post(f"{API}/datasets", json=body, headers=actor.headers), 201)["id"])


def test_initiator_cannot_approve_own_association(client: TestClient, world: Any, h: Any) -> None:
    did = _new_dataset(client, world.data_owner, h)
    base = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    h.ok(client.post(base, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    for verb in ("approve", "reject"):
        r = client.post(f"{base}/{did}/{verb}", headers=world.data_owner.headers)
        assert r.status_code == 403 and "initiator" in r.json()["message"]
    # An invitation: the benchmark owner initiates and cannot approve it either.
    did2 = _new_dataset(client, world.data_owner, h, "invited")
    h.ok(client.post(base, json={"asset_id": did2}, headers=world.bench_owner.headers), 201)
    r = client.post(f"{base}/{did2}/approve", headers=world.bench_owner.headers)
    assert r.status_code == 403


def test_other_side_approves_request_and_invitation(client: TestClient, world: Any, h: Any) -> None:
    base = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    requested = _new_dataset(client, world.data_owner, h, "requested")
    invited = _new_dataset(client, world.data_owner, h, "invited")
    row = h.ok(
        client.post(base, json={"asset_id": requested}, headers=world.data_owner.headers), 201
    )
    assert row["status"] == "pending" and row["initiator_role"] == "asset_owner"
    row = h.ok(
        client.post(base, json={"asset_id": invited}, headers=world.bench_owner.headers), 201
    )
    assert row["initiator_role"] == "benchmark_owner"
    # Third parties, and an admin who is no party, decide nothing.
    for actor in (world.other, world.admin, world.model_owner):
        assert client.post(f"{base}/{requested}/approve", headers=actor.headers).status_code == 403
        assert client.post(f"{base}/{invited}/approve", headers=actor.headers).status_code == 403
    done = h.ok(client.post(f"{base}/{requested}/approve", headers=world.bench_owner.headers))
    assert done["status"] == "approved" and done["actor_id"] == world.bench_owner.user_id
    done = h.ok(client.post(f"{base}/{invited}/approve", headers=world.data_owner.headers))
    assert done["status"] == "approved" and done["initiated_by_id"] == world.bench_owner.user_id


def test_association_auto_approved_when_asset_owner_is_benchmark_owner(
    client: TestClient, world: Any, h: Any
) -> None:
    did = _new_dataset(client, world.bench_owner, h, "authority-own")
    row = h.ok(
        client.post(
            f"{API}/benchmarks/{world.benchmark_id}/datasets",
            json={"asset_id": did},
            headers=world.bench_owner.headers,
        ),
        201,
    )
    assert row["status"] == "approved" and row["revision"] == 1


def test_outsider_cannot_open_association(client: TestClient, world: Any, h: Any) -> None:
    did = _new_dataset(client, world.data_owner, h)
    r = client.post(
        f"{API}/benchmarks/{world.benchmark_id}/datasets",
        json={"asset_id": did},
        headers=world.other.headers,
    )
    assert r.status_code == 403


def test_rejected_association_can_be_rerequested_and_history_kept(
    client: TestClient, world: Any, h: Any
) -> None:
    did = _new_dataset(client, world.data_owner, h)
    base = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    h.ok(client.post(base, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    dup = client.post(base, json={"asset_id": did}, headers=world.data_owner.headers)
    assert dup.status_code == 409
    h.ok(client.post(f"{base}/{did}/reject", headers=world.bench_owner.headers))
    again = h.ok(client.post(base, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    assert again["revision"] == 3 and again["status"] == "pending"
    h.ok(client.post(f"{base}/{did}/approve", headers=world.bench_owner.headers))
    history = h.ok(client.get(f"{base}/{did}/history", headers=world.other.headers))["items"]
    assert [(r["revision"], r["status"]) for r in history] == [
        (1, "pending"),
        (2, "rejected"),
        (3, "pending"),
        (4, "approved"),
    ]
    current = h.ok(client.get(f"{base}?status=approved", headers=world.other.headers))["items"]
    assert {r["asset_id"] for r in current} == {world.dataset_id, did}


COORDS = {
    "kms_key_name": "projects/p/locations/l/keyRings/r/cryptoKeys/k",
    "storage_uri": "gs://bucket/prefix",
    "wip_provider": "projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
}


def test_coordinates_readable_only_by_owner_and_approved_parties(
    client: TestClient, world: Any, h: Any
) -> None:
    url = f"{API}/datasets/{world.dataset_id}/coordinates"
    assert client.put(url, json=COORDS, headers=world.other.headers).status_code == 403
    assert client.put(url, json=COORDS, headers=world.bench_owner.headers).status_code == 403
    h.ok(client.put(url, json=COORDS, headers=world.data_owner.headers))
    assert (
        h.ok(client.get(url, headers=world.data_owner.headers))["storage_uri"]
        == "gs://bucket/prefix"
    )
    # Parties of the approved association: the benchmark owner and the approved model's owner.
    assert h.ok(client.get(url, headers=world.bench_owner.headers))["kms_key_name"].endswith("/k")
    assert h.ok(client.get(url, headers=world.model_owner.headers))["asset_id"] == world.dataset_id
    for actor in (world.other, world.admin):
        r = client.get(url, headers=actor.headers)
        assert r.status_code == 403 and "gs://" not in r.text
    # The data owner reads the approved model's coordinates (needed to launch a run).
    murl = f"{API}/models/{world.model_id}/coordinates"
    h.ok(client.put(murl, json=COORDS, headers=world.model_owner.headers))
    h.ok(client.get(murl, headers=world.data_owner.headers))
    assert client.get(murl, headers=world.other.headers).status_code == 403


def test_coordinates_hidden_while_association_pending(
    client: TestClient, world: Any, h: Any
) -> None:
    did = _new_dataset(client, world.data_owner, h)
    h.ok(
        client.put(
            f"{API}/datasets/{did}/coordinates", json=COORDS, headers=world.data_owner.headers
        )
    )
    base = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    h.ok(client.post(base, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    url = f"{API}/datasets/{did}/coordinates"
    assert client.get(url, headers=world.bench_owner.headers).status_code == 403
    assert client.get(url, headers=world.model_owner.headers).status_code == 403
    h.ok(client.post(f"{base}/{did}/approve", headers=world.bench_owner.headers))
    h.ok(client.get(url, headers=world.bench_owner.headers))


def test_benchmark_name_and_version_unique(client: TestClient, make_user: Any, h: Any) -> None:
    a, b = make_user("a@x.test"), make_user("b@x.test")
    h.ok(
        client.post(f"{API}/benchmarks", json=h.benchmark_body("seg", "1"), headers=a.headers), 201
    )
    r = client.post(f"{API}/benchmarks", json=h.benchmark_body("seg", "1"), headers=b.headers)
    assert r.status_code == 409 and r.json()["code"] == "conflict"
    h.ok(
        client.post(f"{API}/benchmarks", json=h.benchmark_body("seg", "2"), headers=b.headers), 201
    )


def test_dataset_and_model_names_unique_per_owner(
    client: TestClient, make_user: Any, h: Any
) -> None:
    a, b = make_user("a@x.test"), make_user("b@x.test")
    body = {"name": "site", "digest": h.digest_of("x"), "case_count": 1}
    h.ok(client.post(f"{API}/datasets", json=body, headers=a.headers), 201)
    assert client.post(f"{API}/datasets", json=body, headers=a.headers).status_code == 409
    h.ok(client.post(f"{API}/datasets", json=body, headers=b.headers), 201)
    model = {"name": "unet", "version": "1", "digest": h.digest_of("m")}
    h.ok(client.post(f"{API}/models", json=model, headers=a.headers), 201)
    assert client.post(f"{API}/models", json=model, headers=a.headers).status_code == 409
    h.ok(client.post(f"{API}/models", json={**model, "version": "2"}, headers=a.headers), 201)
