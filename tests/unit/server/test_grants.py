"""Grant reports (issue 29): the registry knows whose key grants lag the approvals. An owner
reports the grant set its sync wrote; only the owner may; the registry compares it with the set
the current approvals require (the same digest the client computes), lists a lagging asset in
its owner's inbox with the command, and tells an approved party (the hospital whose run was
refused) which asset lags. Migration 0014 adds the report to existing coordinates."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from sealbench.contract.workload import WorkloadIdentity, grant_set_digest
from sealbench.crypto.digest import Sha256Digest
from sealbench.server.db import open_database
from sealbench.server.migrate import (
    alembic_config,
    current_revision,
    head_revision,
    upgrade_to_head,
)

API = "/api/v1"
PIN = "brats-2023-gli/1"
COORDS = {
    "kms_key_name": "projects/p/locations/global/keyRings/ring/cryptoKeys/key",
    "storage_uri": "gs://bucket/prefix",
    "wip_provider": "projects/123/locations/global/workloadIdentityPools/pool/providers/prov",
}


def _recipient(label: str, h: Any) -> Sha256Digest:
    return Sha256Digest(h.digest_of("recipient-" + label))


def _hospital(client: TestClient, world: Any, h: Any, actor: Any, name: str) -> int:
    """A dataset with a result recipient, joined to the world's benchmark and approved."""
    did = int(h.ok(client.post(f"{API}/datasets", json={
        "name": name, "digest": h.digest_of(name), "case_count": 5,
        "statistics": {"result_recipient_digest": _recipient(name, h)}},
        headers=actor.headers), 201)["id"])
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets", json={"asset_id": did},
                     headers=actor.headers), 201)
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets/{did}/approve",
                     headers=world.bench_owner.headers))
    return did


def _model_grants(world: Any, h: Any, names: list[str]) -> str:
    """What the model owner's sync writes for these hospitals (client side of the digest)."""
    return grant_set_digest(
        (WorkloadIdentity(h.IMAGE_DIGEST, None, world.model_digest, _recipient(n, h),
                          str(world.benchmark_id), PIN), False) for n in names)


#: The registry's (fake) clock in these tests: conftest's START.
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _report(client: TestClient, actor: Any, kind: str, asset: int, digest: str,
            when: datetime = NOW) -> Any:
    return client.put(f"{API}/{kind}s/{asset}/grants", headers=actor.headers,
                      json={"grants_digest": digest, "synced_at": when.isoformat()})


@pytest.fixture
def sealed(client: TestClient, world: Any, h: Any) -> Any:
    """The world's model sealed (it has a key), one hospital with a recipient approved, and the
    model owner's grants reported in sync with it."""
    h.ok(client.put(f"{API}/models/{world.model_id}/coordinates", json=COORDS,
                    headers=world.model_owner.headers))
    # the world's own dataset has no recipient: withdraw it so every pair can be computed
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets/{world.dataset_id}/"
                     "withdraw", headers=world.data_owner.headers))
    _hospital(client, world, h, world.data_owner, "site-a")
    h.ok(_report(client, world.model_owner, "model", world.model_id,
                 _model_grants(world, h, ["site-a"])))
    return world


def _syncs(client: TestClient, actor: Any, h: Any) -> list[Any]:
    return list(h.ok(client.get(f"{API}/inbox", headers=actor.headers))["syncs_needed"])


def test_grants_in_sync_with_approvals_need_nothing(client: TestClient, sealed: Any, h: Any
                                                    ) -> None:
    status = h.ok(client.get(f"{API}/models/{sealed.model_id}/grants",
                             headers=sealed.model_owner.headers))
    assert status["lagging"] is False and status["required_count"] == 1
    assert status["reported_digest"] == status["required_digest"]
    assert _syncs(client, sealed.model_owner, h) == []


def test_new_hospital_approval_makes_model_owner_inbox_ask_for_a_sync(
    client: TestClient, sealed: Any, h: Any, make_user: Any
) -> None:
    newcomer = make_user("new@hospital.test")
    _hospital(client, sealed, h, newcomer, "site-b")
    [item] = _syncs(client, sealed.model_owner, h)
    assert (item["asset_kind"], item["asset_id"], item["lagging"]) == (
        "model", sealed.model_id, True)
    assert item["command"] == f"sealbench policy sync --model {sealed.model_id}"
    assert item["required_count"] == 2
    assert _syncs(client, newcomer, h) == []  # its dataset is not sealed: nothing to sync
    h.ok(_report(client, sealed.model_owner, "model", sealed.model_id,
                 _model_grants(sealed, h, ["site-b", "site-a"])))
    assert _syncs(client, sealed.model_owner, h) == []


def test_withdrawal_makes_grants_lag_until_revoked(client: TestClient, sealed: Any, h: Any
                                                   ) -> None:
    """A withdrawn pair keeps its key until the owner syncs: that lags too."""
    h.ok(client.post(f"{API}/benchmarks/{sealed.benchmark_id}/models/{sealed.model_id}/"
                     "withdraw", headers=sealed.model_owner.headers))
    [item] = _syncs(client, sealed.model_owner, h)
    assert item["required_count"] == 0
    h.ok(_report(client, sealed.model_owner, "model", sealed.model_id, grant_set_digest(())))
    assert _syncs(client, sealed.model_owner, h) == []


def test_hospital_can_tell_which_asset_lags(client: TestClient, sealed: Any, h: Any,
                                            make_user: Any) -> None:
    """The data owner whose run was refused asks about the model of its pair."""
    newcomer = make_user("new@hospital.test")
    _hospital(client, sealed, h, newcomer, "site-b")
    status = h.ok(client.get(f"{API}/models/{sealed.model_id}/grants",
                             headers=newcomer.headers))
    assert status["lagging"] is True and status["owner_id"] == sealed.model_owner.user_id
    assert status["synced_at"] is not None


def test_bystander_cannot_read_an_assets_grant_state(client: TestClient, sealed: Any, h: Any
                                                     ) -> None:
    response = client.get(f"{API}/models/{sealed.model_id}/grants", headers=sealed.other.headers)
    assert response.status_code == 403


def test_only_the_owner_reports_grants(client: TestClient, sealed: Any, h: Any) -> None:
    """Anyone else reporting 'in sync' would hide a due sync from the owner."""
    before = h.ok(client.get(f"{API}/models/{sealed.model_id}/grants",
                             headers=sealed.model_owner.headers))
    for actor in (sealed.data_owner, sealed.bench_owner, sealed.admin, sealed.other):
        response = _report(client, actor, "model", sealed.model_id, h.digest_of("forged"))
        assert response.status_code == 403, actor
    after = h.ok(client.get(f"{API}/models/{sealed.model_id}/grants",
                            headers=sealed.model_owner.headers))
    assert after["reported_digest"] == before["reported_digest"]


def test_report_is_in_the_audit_log(client: TestClient, sealed: Any, h: Any) -> None:
    """A report is an audit event under the owner's account (the digest and when, no more)."""
    events = h.ok(client.get(f"{API}/audit?limit=200", headers=sealed.admin.headers))["items"]
    [event] = [e for e in events if e["action"] == "model.grants"]
    assert event["actor_id"] == sealed.model_owner.user_id
    assert event["entity_id"] == str(sealed.model_id)
    assert json.loads(event["payload"]) == {
        "grants_digest": _model_grants(sealed, h, ["site-a"]), "synced_at": NOW.isoformat()}


def test_report_from_the_future_refused(client: TestClient, sealed: Any, h: Any) -> None:
    later = NOW + timedelta(days=1)
    response = _report(client, sealed.model_owner, "model", sealed.model_id,
                       h.digest_of("x"), later)
    assert response.status_code == 422


def test_unsealed_asset_has_no_grants_to_report(client: TestClient, world: Any, h: Any) -> None:
    response = _report(client, world.data_owner, "dataset", world.dataset_id, h.digest_of("x"))
    assert response.status_code == 422
    status = h.ok(client.get(f"{API}/datasets/{world.dataset_id}/grants",
                             headers=world.data_owner.headers))
    assert status["sealed"] is False and status["lagging"] is False


def test_new_key_forgets_the_old_keys_report(client: TestClient, sealed: Any, h: Any) -> None:
    """Grants live on a key: coordinates naming another key start with none reported."""
    moved = dict(COORDS, kms_key_name=COORDS["kms_key_name"] + "2")
    h.ok(client.put(f"{API}/models/{sealed.model_id}/coordinates", json=moved,
                    headers=sealed.model_owner.headers))
    status = h.ok(client.get(f"{API}/models/{sealed.model_id}/grants",
                             headers=sealed.model_owner.headers))
    assert status["reported_digest"] is None and status["lagging"] is True


def test_dataset_owner_grants_bind_the_dataset(client: TestClient, world: Any, h: Any) -> None:
    did = _hospital(client, world, h, world.data_owner, "site-c")
    h.ok(client.put(f"{API}/datasets/{did}/coordinates", json=COORDS,
                    headers=world.data_owner.headers))
    [item] = _syncs(client, world.data_owner, h)
    assert item["command"] == f"sealbench policy sync --dataset {did}"
    mine = grant_set_digest([(WorkloadIdentity(
        h.IMAGE_DIGEST, h.digest_of("site-c"), world.model_digest, _recipient("site-c", h),
        str(world.benchmark_id), PIN), False)])
    h.ok(_report(client, world.data_owner, "dataset", did, mine))
    assert _syncs(client, world.data_owner, h) == []


def test_dashboard_inbox_lists_policy_sync_needed(
    client: TestClient, sealed: Any, h: Any, make_user: Any, settings: Any, clock: Any,
    jwks_fetcher: Any,
) -> None:
    """The dashboard renders the same list from the same service, with the command."""
    import re

    from sealbench.server.app import create_app
    from sealbench.server.web import mount_dashboard

    _hospital(client, sealed, h, make_user("new@hospital.test"), "site-b")
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, settings)
    with TestClient(app) as web:
        form = web.get("/ui/sign-in").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf is not None
        signed = web.post("/ui/sign-in", data={"csrf": csrf.group(1),
                                               "token": sealed.model_owner.token,
                                               "next": "/ui/inbox"}, follow_redirects=False)
        assert signed.status_code == 303, signed.text
        page = web.get("/ui/inbox").text
        assert 'id="syncs-needed"' in page and "Policy sync needed" in page
        assert f"<code>sealbench policy sync --model {sealed.model_id}</code>" in page
        h.ok(_report(client, sealed.model_owner, "model", sealed.model_id,
                     _model_grants(sealed, h, ["site-a", "site-b"])))
        assert 'id="syncs-needed"' not in web.get("/ui/inbox").text


def test_clock_is_conftests(h: Any) -> None:
    assert h.START == NOW


def test_recipient_statistic_is_the_clients() -> None:
    from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
    from sealbench.server.services.grants import RECIPIENT_STATISTIC as SERVER

    assert SERVER == RECIPIENT_STATISTIC


# -- migration 0014 ------------------------------------------------------------------------------


@pytest.fixture
def at_0013(database_at: Callable[[str], str]) -> str:
    url = database_at("0013")
    db = open_database(url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with db.engine.begin() as conn:
            conn.execute(text("INSERT INTO users (id, email, is_admin, created_at) "
                              "VALUES (1, 'v@test', false, :t)"), {"t": now})
            conn.execute(text(
                "INSERT INTO models (id, owner_id, name, version, digest, format, io_contract, "
                "state, created_at) VALUES (3, 1, 'unet', '1', :d, 'onnx', '{}', 'registered', "
                ":t)"), {"d": "sha256:" + "0" * 64, "t": now})
            conn.execute(text(
                "INSERT INTO model_coordinates (id, asset_id, kms_key_name, storage_uri, "
                "wip_provider, updated_at) VALUES (1, 3, 'k', 'gs://b/p', 'w', :t)"), {"t": now})
    finally:
        db.dispose()
    return url


def test_migration_0014_adds_unreported_grants_and_downgrades(at_0013: str) -> None:
    db = open_database(at_0013)
    try:
        upgrade_to_head(db.engine)
        with db.engine.connect() as conn:
            assert conn.execute(text(
                "SELECT asset_id, grants_digest, grants_synced_at FROM model_coordinates"
            )).all() == [(3, None, None)]
        with db.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0013")
        with db.engine.connect() as conn:
            for table in ("dataset_coordinates", "model_coordinates"):
                columns = {c["name"] for c in inspect(conn).get_columns(table)}
                assert "grants_digest" not in columns and "grants_synced_at" not in columns
            assert conn.execute(text("SELECT asset_id FROM model_coordinates")).all() == [(3,)]
        upgrade_to_head(db.engine)
        assert current_revision(db.engine) == head_revision()
    finally:
        db.dispose()
