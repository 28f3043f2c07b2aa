"""Exact releases only by knowing consent (issue 25): a benchmark whose pin ends in ``-exact``
publishes each site's figures without noise; a dataset joins it only through a revision its
owner wrote consenting (the request, or the approval of an invitation), the consent is logged,
and a result with an exact release is accepted only while the dataset's link holds it. Models
need none (what is at stake is the patients'), and a private benchmark ignores the flag."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import select

from sealbench.benchmarks.brats.published import PublishedSummary
from sealbench.benchmarks.registry import load
from sealbench.benchmarks.release import LocalExact, OpenDPGaussian, release
from sealbench.contract.pin import BenchmarkPin
from sealbench.server.db import open_database
from sealbench.server.models import BenchmarkDataset

API = "/api/v1"
EXACT_PIN = "brats-2023-gli/1-exact"


def _exact_benchmark(client: TestClient, world: Any, h: Any) -> int:
    body = {**h.benchmark_body(name="brats-exact"), "metrics_version": EXACT_PIN}
    bid = h.ok(client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers),
               201)["id"]
    h.ok(client.post(f"{API}/benchmarks/{bid}/approve", headers=world.admin.headers))
    return int(bid)


def _links(client: TestClient, world: Any, bid: int) -> list[dict[str, Any]]:
    r = client.get(f"{API}/benchmarks/{bid}/datasets", headers=world.bench_owner.headers)
    return list(r.json()["items"])


def _history(client: TestClient, world: Any, bid: int) -> list[dict[str, Any]]:
    r = client.get(f"{API}/benchmarks/{bid}/datasets/{world.dataset_id}/history",
                   headers=world.bench_owner.headers)
    return list(r.json()["items"]) if r.status_code == 200 else []


def _audit_payloads(client: TestClient, world: Any, action: str) -> list[dict[str, Any]]:
    events = client.get(f"{API}/audit", headers=world.admin.headers,
                        params={"limit": 200}).json()["items"]
    return [json.loads(e["payload"]) for e in events if e["action"] == action]


def test_request_without_consent_refused_and_nothing_stored(
    client: TestClient, world: Any, h: Any
) -> None:
    bid = _exact_benchmark(client, world, h)
    url = f"{API}/benchmarks/{bid}/datasets"
    r = client.post(url, json={"asset_id": world.dataset_id}, headers=world.data_owner.headers)
    assert r.status_code == 422, r.text
    assert "EXACT" in r.text and "--consent-exact-release" in r.text
    assert _links(client, world, bid) == [] and _history(client, world, bid) == []


def test_consenting_request_carried_through_the_authoritys_approval_and_logged(
    client: TestClient, world: Any, h: Any
) -> None:
    bid = _exact_benchmark(client, world, h)
    url = f"{API}/benchmarks/{bid}/datasets"
    pending = h.ok(client.post(url, json={"asset_id": world.dataset_id,
                                          "exact_release_consent": True},
                               headers=world.data_owner.headers), 201)
    assert pending["status"] == "pending" and pending["exact_release_consent"] is True
    approved = h.ok(client.post(f"{url}/{world.dataset_id}/approve",
                                headers=world.bench_owner.headers))
    assert approved["status"] == "approved" and approved["exact_release_consent"] is True
    logged = _audit_payloads(client, world, "association.approve")
    assert any(p.get("exact_release_consent") is True for p in logged)


def test_invitation_needs_the_data_owners_consent_to_approve(
    client: TestClient, world: Any, h: Any
) -> None:
    bid = _exact_benchmark(client, world, h)
    url = f"{API}/benchmarks/{bid}/datasets"
    invited = h.ok(client.post(url, json={"asset_id": world.dataset_id},
                               headers=world.bench_owner.headers), 201)
    assert invited["exact_release_consent"] is False  # the authority cannot consent for anyone
    approve = f"{url}/{world.dataset_id}/approve"
    r = client.post(approve, headers=world.data_owner.headers)
    assert r.status_code == 422 and "EXACT" in r.text
    r = client.post(approve, json={"exact_release_consent": False},
                    headers=world.data_owner.headers)
    assert r.status_code == 422
    assert [link["status"] for link in _links(client, world, bid)] == ["pending"]
    done = h.ok(client.post(approve, json={"exact_release_consent": True},
                            headers=world.data_owner.headers))
    assert done["status"] == "approved" and done["exact_release_consent"] is True


def test_rejecting_an_invitation_needs_no_consent(client: TestClient, world: Any, h: Any) -> None:
    bid = _exact_benchmark(client, world, h)
    url = f"{API}/benchmarks/{bid}/datasets"
    h.ok(client.post(url, json={"asset_id": world.dataset_id}, headers=world.bench_owner.headers),
         201)
    rejected = h.ok(client.post(f"{url}/{world.dataset_id}/reject",
                                headers=world.data_owner.headers))
    assert rejected["status"] == "rejected" and rejected["exact_release_consent"] is False


def test_models_need_no_consent_and_private_benchmarks_ignore_it(
    client: TestClient, world: Any, h: Any
) -> None:
    bid = _exact_benchmark(client, world, h)
    model = h.ok(client.post(f"{API}/benchmarks/{bid}/models", json={"asset_id": world.model_id},
                             headers=world.model_owner.headers), 201)
    assert model["status"] == "pending" and model["exact_release_consent"] is False
    # the world's benchmark (brats-2023-gli/1) is private: a consent sent to it records nothing
    other = h.ok(client.post(f"{API}/datasets", headers=world.data_owner.headers, json={
        "name": "hospital-b", "digest": h.digest_of("hospital-b"), "case_count": 5}), 201)["id"]
    link = h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets",
                            json={"asset_id": other, "exact_release_consent": True},
                            headers=world.data_owner.headers), 201)
    assert link["exact_release_consent"] is False


def _exact_summary(bid: int, n_cases: int = 12) -> dict[str, Any]:
    plugin = load(BenchmarkPin.parse(EXACT_PIN))
    rows = np.random.default_rng(4).uniform(0.6, 0.95, size=(n_cases, 3))
    made = release(rows, plugin.release_spec, OpenDPGaussian())  # an exact pin draws no noise
    metrics = plugin.metrics  # type: ignore[attr-defined]
    aggregates = PublishedSummary(metrics_id=metrics.metrics_id, metrics_version=metrics.version,
                                  n_cases=n_cases, release=made).to_json()
    assert made.to_json() == release(rows, plugin.release_spec, LocalExact()).to_json()
    return {"format": "sealbench/result-summary", "version": 1, "run_id": f"run-x{bid}",
            "benchmark_id": str(bid), "metrics_version": EXACT_PIN, "aggregates": aggregates}


def _result_body(world: Any, h: Any, tokens: Any, bid: int) -> dict[str, Any]:
    summary = _exact_summary(bid)
    sealed = "sha256:" + "e" * 63 + str(bid % 10)
    claims = h.result_claims(summary=summary, sealed_digest=sealed, benchmark_id=bid,
                             data_digest=world.dataset_digest, model_digest=world.model_digest,
                             metrics_version=EXACT_PIN)
    return {"benchmark_id": bid, "dataset_id": world.dataset_id, "model_id": world.model_id,
            "summary": summary, "sealed_result_digest": sealed,
            "attestation_token": tokens.sign(claims)}


def _joined_exact(client: TestClient, world: Any, h: Any) -> int:
    bid = _exact_benchmark(client, world, h)
    for kind, asset, owner in (("datasets", world.dataset_id, world.data_owner),
                               ("models", world.model_id, world.model_owner)):
        url = f"{API}/benchmarks/{bid}/{kind}"
        h.ok(client.post(url, json={"asset_id": asset, "exact_release_consent": True},
                         headers=owner.headers), 201)
        h.ok(client.post(f"{url}/{asset}/approve", headers=world.bench_owner.headers))
    return bid


def test_consented_exact_release_accepted_and_costs_no_budget(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    bid = _joined_exact(client, world, h)
    h.ok(client.post(f"{API}/results", json=_result_body(world, h, tokens, bid),
                     headers=world.data_owner.headers), 201)
    budget = h.ok(client.get(f"{API}/datasets/{world.dataset_id}/budget",
                             headers=world.data_owner.headers))
    assert budget["spent_rho"] == 0.0 and budget["exact_releases"] == 1
    [debit] = budget["debits"]
    assert debit["exact"] is True and debit["epsilon"] is None


def test_exact_release_without_consent_on_the_link_refused(
    client: TestClient, world: Any, h: Any, tokens: Any, database_url: str
) -> None:
    """A link approved without consent (as a registry from before consent, or a forged row)
    takes no exact release: the registry checks the consent again at submission."""
    bid = _joined_exact(client, world, h)
    db = open_database(database_url)
    try:
        with db.writer() as session:
            for row in session.scalars(select(BenchmarkDataset).where(
                    BenchmarkDataset.benchmark_id == bid)):
                row.exact_release_consent = False
            session.commit()
    finally:
        db.dispose()
    r = client.post(f"{API}/results", json=_result_body(world, h, tokens, bid),
                    headers=world.data_owner.headers)
    assert r.status_code == 422 and "not consented" in r.text
    results = client.get(f"{API}/results", headers=world.bench_owner.headers,
                         params={"benchmark_id": bid}).json()["items"]
    assert results == []


def test_benchmark_shows_its_exact_pin(client: TestClient, world: Any, h: Any) -> None:
    bid = _exact_benchmark(client, world, h)
    shown = h.ok(client.get(f"{API}/benchmarks/{bid}", headers=world.other.headers))
    assert shown["metrics_version"] == EXACT_PIN


def test_inbox_says_what_each_run_publishes(client: TestClient, world: Any, h: Any) -> None:
    bid = _exact_benchmark(client, world, h)
    h.ok(client.post(f"{API}/benchmarks/{bid}/datasets", json={"asset_id": world.dataset_id},
                     headers=world.bench_owner.headers), 201)
    inbox = h.ok(client.get(f"{API}/inbox", headers=world.data_owner.headers))
    [decision] = inbox["to_decide"]
    assert decision["release"] == {"exact": True, "epsilon": None, "delta": None}
    [evaluation] = inbox["evaluations"]  # the world's private benchmark
    assert evaluation["release"] == {"exact": False, "epsilon": 1.0, "delta": 1e-6}
