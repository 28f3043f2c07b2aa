"""The transparency log as the registry serves it, on SQLite and PostgreSQL: every event is a
leaf; the signed checkpoint, inclusion and consistency proofs verify against a tree recomputed
here from the events; results' receipts bind the token and summary digests; cosignatures are
stored only when they verify; concurrent writers neither lose nor duplicate a leaf."""

from __future__ import annotations

import base64
import json
import re
import threading
from datetime import UTC, datetime
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import delete, select, text, update

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto import tlog
from sealbench.crypto.note import (
    ALG_COSIGNATURE,
    Checkpoint,
    SignerKey,
    VerifierKey,
    cosign,
    open_checkpoint,
)
from sealbench.server.audit import append_event, verify_stored_log
from sealbench.server.audit_format import (
    GENESIS_HASH,
    event_hash,
    event_leaf_hash,
    result_digests,
)
from sealbench.server.db import open_database
from sealbench.server.models import AuditEvent, AuditHead, AuditNode
from sealbench.server.schemas.audit import AuditEventPublic

API = "/api/v1"
#: A run's summary.json that the benchmark's plug-in (brats-2023-gli/1) validates.
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))
SUMMARY: dict[str, Any] = {
    "format": "sealbench/result-summary", "version": 1, "run_id": "run-1", "benchmark_id": "1",
    "metrics_version": "brats-2023-gli/1",
    "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
        InsecureFixedNoise()).to_json(),
}


def _b(text: str) -> bytes:
    return base64.b64decode(text)


def _events(client: TestClient, admin: Any) -> list[AuditEventPublic]:
    r = client.get(f"{API}/audit/events?start=0&end=1000", headers=admin.headers)
    assert r.status_code == 200, r.text
    return [AuditEventPublic.model_validate(e) for e in r.json()["items"]]


def _checkpoint(client: TestClient, actor: Any) -> tuple[Checkpoint, dict[str, Any]]:
    body = client.get(f"{API}/audit/checkpoint", headers=actor.headers).json()
    keys = [VerifierKey.from_string(k["verifier"]) for k in body["keys"]]
    opened = open_checkpoint(body["checkpoint"].encode(), keys, origin=body["origin"])
    assert (opened.checkpoint.size, base64.b64encode(opened.checkpoint.root_hash).decode()) == (
        body["tree_size"], body["root"])
    return opened.checkpoint, body


def _submit(client: TestClient, world: Any, tokens: Any, h: Any, sealed: str) -> dict[str, Any]:
    claims = h.result_claims(
        summary=SUMMARY, sealed_digest=sealed, benchmark_id=world.benchmark_id,
        data_digest=world.dataset_digest, model_digest=world.model_digest,
    )
    token = tokens.sign(claims)
    body = {"benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
            "model_id": world.model_id, "summary": SUMMARY, "sealed_result_digest": sealed,
            "attestation_token": token}
    result = h.ok(client.post(f"{API}/results", json=body, headers=world.data_owner.headers), 201)
    return {"id": result["id"], "token": token}


def test_every_event_is_a_leaf_of_the_signed_checkpoint(client: TestClient, world: Any) -> None:
    events = _events(client, world.admin)
    checkpoint, body = _checkpoint(client, world.other)  # any signed-in user reads it
    assert checkpoint.size == len(events) == events[-1].seq
    assert checkpoint.root_hash == tlog.root_from_leaf_hashes(event_leaf_hash(e) for e in events)
    assert [k["retired_at"] for k in body["keys"]] == [None]
    assert body["cosignatures"] == []


def test_inclusion_proof_of_every_event_verifies(client: TestClient, world: Any) -> None:
    events = _events(client, world.admin)
    for event in events:
        r = client.get(f"{API}/audit/inclusion?seq={event.seq}", headers=world.admin.headers)
        proof = r.json()
        assert proof["event"] == event.model_dump() and proof["leaf_index"] == event.seq - 1
        keys = [VerifierKey.from_string(k["verifier"]) for k in
                client.get(f"{API}/audit/checkpoint", headers=world.admin.headers).json()["keys"]]
        cp = open_checkpoint(proof["checkpoint"].encode(), keys).checkpoint
        tlog.verify_inclusion(event_leaf_hash(event), event.seq - 1, cp.size,
                              [_b(p) for p in proof["proof"]], cp.root_hash)


def test_inclusion_in_an_earlier_tree_and_consistency_between_any_two_sizes(
    client: TestClient, world: Any
) -> None:
    leaves = [event_leaf_hash(e) for e in _events(client, world.admin)]
    n = len(leaves)
    r = client.get(f"{API}/audit/inclusion?seq=2&tree_size=5", headers=world.admin.headers)
    assert r.status_code == 200 and r.json()["tree_size"] == 5
    tlog.verify_inclusion(leaves[1], 1, 5, [_b(p) for p in r.json()["proof"]],
                          tlog.root_from_leaf_hashes(leaves[:5]))
    for first in range(n + 1):
        for second in (first, (first + n) // 2, n):
            got = client.get(f"{API}/audit/consistency?first={first}&second={second}",
                             headers=world.other.headers)
            assert got.status_code == 200, got.text
            tlog.verify_consistency(
                first, second, tlog.root_from_leaf_hashes(leaves[:first]),
                tlog.root_from_leaf_hashes(leaves[:second]), [_b(p) for p in got.json()["proof"]]
            )


def test_sizes_the_log_never_had_refused(client: TestClient, world: Any) -> None:
    size = _checkpoint(client, world.admin)[0].size
    for query in (f"first=1&second={size + 1}", f"first={size}&second=2"):
        r = client.get(f"{API}/audit/consistency?{query}", headers=world.other.headers)
        assert r.status_code == 422 and r.json()["code"] == "invalid_request"
    r = client.get(f"{API}/audit/inclusion?seq=9&tree_size=3", headers=world.admin.headers)
    assert r.status_code == 422
    assert client.get(f"{API}/audit/inclusion?seq={size + 5}",
                      headers=world.admin.headers).status_code == 404
    r = client.get(f"{API}/audit/events?start=0&end=1001", headers=world.admin.headers)
    assert r.status_code == 422
    beyond = client.get(f"{API}/audit/events?start={size}&end={size + 10}",
                        headers=world.admin.headers).json()
    assert beyond["items"] == [] and beyond["tree_size"] == size


def test_result_receipt_binds_the_token_and_summary(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    submitted = _submit(client, world, tokens, h, "sha256:" + "5" * 64)
    receipt = h.ok(client.get(f"{API}/audit/receipts/{submitted['id']}",
                              headers=world.data_owner.headers))
    event = AuditEventPublic.model_validate(receipt["event"])
    assert receipt["result_id"] == submitted["id"]
    assert (event.action, event.entity_type, event.entity_id) == (
        "result.submit", "result", str(submitted["id"]))
    payload = json.loads(event.payload)
    assert payload["sealed_result_digest"] == "sha256:" + "5" * 64
    for key, value in result_digests(SUMMARY, submitted["token"]).items():
        assert payload[key] == value
    cp = _checkpoint(client, world.data_owner)[0]
    tlog.verify_inclusion(event_leaf_hash(event), receipt["leaf_index"], receipt["tree_size"],
                          [_b(p) for p in receipt["proof"]], cp.root_hash)
    # the benchmark's owner reads the receipt too; nobody else
    assert client.get(f"{API}/audit/receipts/{submitted['id']}",
                      headers=world.bench_owner.headers).status_code == 200
    assert client.get(f"{API}/audit/receipts/{submitted['id']}",
                      headers=world.other.headers).status_code == 403


def _witness_body(client: TestClient, actor: Any, witness: SignerKey, stamp: int) -> dict[str, Any]:
    cp, _ = _checkpoint(client, actor)
    return {"witness": witness.verifier().to_string(), "tree_size": cp.size,
            "signature": cosign(cp, witness, stamp).line().rstrip("\n")}


def test_cosignature_stored_only_when_it_verifies(
    client: TestClient, world: Any, clock: Any
) -> None:
    witness = SignerKey.generate("witness.test/w1", ALG_COSIGNATURE)
    now = int(clock().timestamp())
    body = _witness_body(client, world.other, witness, now)
    assert client.post(f"{API}/audit/cosignatures", json=body,
                       headers=world.other.headers).status_code == 201
    assert client.post(f"{API}/audit/cosignatures", json=body,
                       headers=world.other.headers).status_code == 200
    listed = _checkpoint(client, world.other)[1]["cosignatures"]
    assert [(c["witness"], c["tree_size"], c["timestamp"]) for c in listed] == [
        (witness.verifier().to_string(), body["tree_size"], now)]

    forged_root = Checkpoint(_checkpoint(client, world.other)[0].origin, body["tree_size"],
                             tlog.leaf_hash(b"another history"))
    forged = {**body, "signature": cosign(forged_root, witness, now).line().rstrip("\n")}
    r = client.post(f"{API}/audit/cosignatures", json={**forged, "tree_size": body["tree_size"]},
                    headers=world.other.headers)
    assert r.status_code == 422 and "does not verify" in r.json()["message"]
    note_key = SignerKey.generate("witness.test/w2")
    r = client.post(f"{API}/audit/cosignatures",
                    json={**body, "witness": note_key.verifier().to_string()},
                    headers=world.other.headers)
    assert r.status_code == 422 and "type 0x04" in r.json()["message"]
    late = _witness_body(client, world.other, SignerKey.generate("w.test/3", ALG_COSIGNATURE),
                         now + 3600)
    r = client.post(f"{API}/audit/cosignatures", json=late, headers=world.other.headers)
    assert r.status_code == 422 and "clock" in r.json()["message"]


def test_concurrent_appends_keep_one_valid_tree(database_url: str, make_user: Any) -> None:
    """50 writers at once: every event is a leaf exactly once, and the tree verifies."""
    make_user("seed@x.test")
    db = open_database(database_url)
    with db.reader() as session:
        before = verify_stored_log(session)
    barrier = threading.Barrier(50)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            barrier.wait()
            with db.writer() as session:
                append_event(session, actor_id=None, action="test.write", entity_type="thing",
                             entity_id=i, payload={"i": i}, now=datetime.now(UTC))
                session.commit()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert errors == []
        with db.reader() as session:
            assert verify_stored_log(session) == before + 50
            written = sorted(
                int(p) for (p,) in session.execute(
                    text("SELECT entity_id FROM audit_events WHERE action = 'test.write'")
                ).all()
            )
            leaves = session.execute(
                text("SELECT count(*) FROM audit_nodes WHERE level = 0")
            ).scalar_one()
        assert written == list(range(50)) and leaves == before + 50
    finally:
        db.dispose()


def test_page_status_marks_a_rewritten_history_against_a_witness(
    client: TestClient, world: Any, clock: Any, database_url: str
) -> None:
    """A witness cosigned the log; an insider then rewrites event 3 and every later hash, the
    tree and the head, so the chain and the tree verify again on the server. The log no longer
    extends what the witness cosigned, and the dashboard says so."""
    witness = SignerKey.generate("witness.test/w1", ALG_COSIGNATURE)
    body = _witness_body(client, world.other, witness, int(clock().timestamp()))
    assert client.post(f"{API}/audit/cosignatures", json=body,
                       headers=world.other.headers).status_code == 201
    rewrite_history(database_url, seq=3, payload='{"forged":true}')
    verdict = client.get(f"{API}/audit/verify", headers=world.admin.headers).json()
    assert verdict["ok"] is True  # the server alone cannot tell
    form = client.get("/ui/sign-in").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    client.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": world.admin.token,
                                     "next": "/ui/audit"}, follow_redirects=False)
    page = client.get("/ui/audit")
    assert page.status_code == 200
    assert "Log history rewritten" in page.text and witness.verifier().label in page.text
    assert "no longer extends the checkpoint this witness cosigned" in page.text


def rewrite_history(database_url: str, *, seq: int, payload: str) -> None:
    """What an operator with the database can do: edit event ``seq`` and recompute every later
    chain hash, every leaf and subtree, and the head."""
    db = open_database(database_url)
    try:
        with db.writer() as session:
            session.execute(update(AuditEvent).where(AuditEvent.seq == seq).values(
                payload=payload))
            rows = session.scalars(select(AuditEvent).order_by(AuditEvent.seq)).all()
            edge, prev = tlog.CompactRange(), GENESIS_HASH
            session.execute(delete(AuditNode))
            for row in rows:
                row.prev_hash = prev
                row.hash = event_hash(seq=row.seq, actor_id=row.actor_id, action=row.action,
                                      entity_type=row.entity_type, entity_id=row.entity_id,
                                      payload=row.payload, occurred_at=row.occurred_at,
                                      prev_hash=prev)
                prev = row.hash
                for (level, idx), value in edge.append(event_leaf_hash(row)):
                    session.add(AuditNode(level=level, idx=idx, hash=value))
            session.flush()
            session.execute(update(AuditHead).values(seq=len(rows), hash=prev,
                                                     tree_root=edge.root(),
                                                     tree_edge=edge.to_bytes()))
            session.commit()
    finally:
        db.dispose()

