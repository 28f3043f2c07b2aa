"""The audit hash chain: every mutation appends a link (and a leaf of the transparency log) in
the same transaction; verification names the first broken link when a row is edited, deleted
or re-hashed in the database."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from sealbench.server.audit import GENESIS_HASH, event_hash, verify_chain
from sealbench.server.db import open_database
from sealbench.server.errors import AuditChainBrokenError

API = "/api/v1"


def _events(client: TestClient, admin: Any, limit: int = 200) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(
            f"{API}/audit?limit={limit}&offset={offset}", headers=admin.headers
        ).json()
        out.extend(page["items"])
        offset = page["next_offset"]
    return out


def test_every_mutation_appends_an_audit_event(client: TestClient, world: Any) -> None:
    events = _events(client, world.admin, limit=3)
    actions = [e["action"] for e in events]
    assert actions.count("user.create") == 5
    assert "benchmark.create" in actions and "benchmark.approved" in actions
    assert actions.count("association.request") == 2 and actions.count("association.approve") == 2
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["prev_hash"] == GENESIS_HASH
    assert all(b["prev_hash"] == a["hash"] for a, b in itertools.pairwise(events))
    verdict = client.get(f"{API}/audit/verify", headers=world.admin.headers).json()
    assert verdict == {
        "ok": True,
        "events_verified": len(events),
        "first_broken_seq": None,
        "reason": None,
    }


def test_refused_change_appends_no_audit_event(client: TestClient, world: Any) -> None:
    before = len(_events(client, world.admin))
    r = client.post(f"{API}/benchmarks/{world.benchmark_id}/approve", headers=world.admin.headers)
    assert r.status_code == 409
    assert len(_events(client, world.admin)) == before


def test_audit_readable_by_admin_only(client: TestClient, world: Any) -> None:
    for actor in (world.bench_owner, world.other):
        assert client.get(f"{API}/audit", headers=actor.headers).status_code == 403
        assert client.get(f"{API}/audit/verify", headers=actor.headers).status_code == 403


def test_edited_audit_row_detected(client: TestClient, world: Any, database_url: str) -> None:
    db = open_database(database_url)
    with db.engine.begin() as conn:
        conn.execute(
            text('UPDATE audit_events SET payload = \'{"state":"rejected"}\' WHERE seq = 7')
        )
    db.dispose()
    verdict = client.get(f"{API}/audit/verify", headers=world.admin.headers).json()
    assert verdict["ok"] is False and verdict["first_broken_seq"] == 7
    assert "hash" in verdict["reason"]


def test_rehashed_audit_row_detected_at_its_leaf(
    client: TestClient, world: Any, database_url: str
) -> None:
    """An edit with its chain hash recomputed is caught at the edited event itself: its leaf in
    the transparency log's tree no longer matches (the chain alone caught it one link later)."""
    db = open_database(database_url)
    with db.engine.begin() as conn:
        row = conn.execute(text("SELECT * FROM audit_events WHERE seq = 4")).mappings().one()
        forged = event_hash(
            seq=4,
            actor_id=row["actor_id"],
            action=row["action"],
            entity_type=row["entity_type"],
            entity_id=row["entity_id"],
            payload='{"forged":true}',
            occurred_at=row["occurred_at"],
            prev_hash=row["prev_hash"],
        )
        conn.execute(
            text("UPDATE audit_events SET payload = :p, hash = :h WHERE seq = 4"),
            {"p": '{"forged":true}', "h": forged},
        )
    db.dispose()
    verdict = client.get(f"{API}/audit/verify", headers=world.admin.headers).json()
    assert verdict["first_broken_seq"] == 4 and "leaf hash" in verdict["reason"]


def test_deleted_tail_audit_row_detected(client: TestClient, world: Any, database_url: str) -> None:
    db = open_database(database_url)
    with db.engine.begin() as conn:
        last = conn.execute(text("SELECT max(seq) FROM audit_events")).scalar_one()
        conn.execute(text("DELETE FROM audit_events WHERE seq = :s"), {"s": last})
    db.dispose()
    verdict = client.get(f"{API}/audit/verify", headers=world.admin.headers).json()
    assert verdict["ok"] is False and verdict["first_broken_seq"] == last


class _Link:
    def __init__(self, seq: int, prev: str, payload: str = "{}") -> None:
        self.seq, self.actor_id, self.action = seq, 1, "x.y"
        self.entity_type, self.entity_id, self.payload = "thing", str(seq), payload
        self.occurred_at, self.prev_hash = "2026-01-01T00:00:00.000000+00:00", prev
        self.hash = event_hash(
            seq=seq,
            actor_id=1,
            action="x.y",
            entity_type="thing",
            entity_id=str(seq),
            payload=payload,
            occurred_at=self.occurred_at,
            prev_hash=prev,
        )


def _chain(n: int) -> list[_Link]:
    links, prev = [], GENESIS_HASH
    for seq in range(1, n + 1):
        link = _Link(seq, prev)
        links.append(link)
        prev = link.hash
    return links


def test_verify_chain_accepts_intact_chain() -> None:
    assert verify_chain(_chain(5)) == 5
    assert verify_chain([]) == 0


def test_missing_middle_audit_event_detected() -> None:
    links = _chain(5)
    del links[2]
    with pytest.raises(AuditChainBrokenError) as err:
        verify_chain(links)
    assert err.value.seq == 3


def test_reordered_audit_events_detected() -> None:
    links = _chain(4)
    links[1], links[2] = links[2], links[1]
    with pytest.raises(AuditChainBrokenError) as err:
        verify_chain(links)
    assert err.value.seq == 2
