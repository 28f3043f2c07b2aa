"""A benchmark that pools in the TEE without per-site releases (issue 41, part 4), on the
registry: its pin ends in ``-pool`` (the choice the owners' key-release conditions bind), a run's
withheld summary (rule ``pooled``) is accepted and charges no per-site release, a summary that
carries a per-site release anyway is refused (nothing stored, nothing charged), the rule
``pooled`` is refused under any other pin, and such a pin is refused without an aggregator (it
would never publish a figure). The pooled release still debits each dataset once."""

from __future__ import annotations

import base64
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from sealbench.crypto.sealing import public_key_to_raw
from sealbench.server.db import open_database
from sealbench.server.models import Benchmark, LogKey, PrivacyDebit, Result

API = "/api/v1"
BASE = "brats-2023-gli/1"
POOLED = "brats-2023-gli/1-pool"
AGGREGATOR = "sha256:" + "a" * 64


def _pin(client: TestClient, world: Any, database_url: str, pin: str) -> None:
    """The world's benchmark pinned ``pin``, pooling in the TEE (as a benchmark created so)."""
    pool_key = client.app.state.registry.pool_key  # type: ignore[attr-defined]
    db = open_database(database_url)
    try:
        with db.writer() as session:
            bench = session.get(Benchmark, world.benchmark_id)
            assert bench is not None
            bench.metrics_version = pin  # type: ignore[assignment]
            bench.site_releases = not pin.endswith("-pool")
            bench.aggregator_image_digest = AGGREGATOR
            bench.pool_recipient_key = base64.b64encode(public_key_to_raw(
                pool_key.public_key())).decode()
            bench.pool_log_key = session.scalars(select(LogKey.verifier).where(
                LogKey.retired_at.is_(None))).one()
            bench.pool_witnesses, bench.pool_witness_quorum = [], 0
            session.commit()
    finally:
        db.dispose()


def _rows(database_url: str, model: Any) -> list[Any]:
    db = open_database(database_url)
    try:
        with db.reader() as session:
            return list(session.scalars(select(model)).all())
    finally:
        db.dispose()


def _submit(client: TestClient, world: Any, h: Any, tokens: Any, pin: str, run: str,
            *, withheld: bool) -> Any:
    summary: dict[str, Any] = {
        "format": "sealbench/result-summary", "version": 1, "run_id": run,
        "benchmark_id": str(world.benchmark_id), "metrics_version": pin,
        "pool_statistics": h.digest_of(f"statistics-{run}")}
    if withheld:
        summary |= {"aggregates": {}, "withheld": {"rule": "pooled", "n_cases": 5,
                                                   "minimum": _minimum()}}
    else:
        summary["aggregates"] = h.brats_aggregates(0.5, 2000)
    sealed = h.digest_of(f"sealed-{run}")
    token = tokens.sign(h.result_claims(
        summary=summary, sealed_digest=sealed, benchmark_id=world.benchmark_id,
        data_digest=world.dataset_digest, model_digest=world.model_digest,
        metrics_version=pin))
    return client.post(f"{API}/results", headers=world.data_owner.headers, json={
        "benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
        "model_id": world.model_id, "summary": summary, "sealed_result_digest": sealed,
        "attestation_token": token, "result_uri": f"gs://hospital-results/{run}"})


def _minimum() -> int:
    from sealbench.benchmarks.registry import load
    from sealbench.contract.pin import BenchmarkPin

    return load(BenchmarkPin.parse(POOLED)).small_cell_minimum


def test_a_pooled_only_run_is_accepted_and_charges_no_per_site_release(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    _pin(client, world, database_url, POOLED)
    shown = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}",
                            headers=world.data_owner.headers))
    assert (shown["metrics_version"], shown["site_releases"]) == (POOLED, False)
    h.ok(_submit(client, world, h, tokens, POOLED, "run-1", withheld=True), 201)
    assert _rows(database_url, PrivacyDebit) == []
    budget = h.ok(client.get(f"{API}/datasets/{world.dataset_id}/budget",
                             headers=world.data_owner.headers))
    assert (budget["releases"], budget["debits"]) == (0, [])
    # the board files it without a figure, and says why
    board = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/leaderboard/pooled",
                            headers=world.bench_owner.headers))
    [held] = board["withheld"]
    assert "pooled release only" in held["reason"]


def test_a_per_site_release_under_a_pooled_only_pin_is_refused(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """An enclave that drew a per-site release under the -pool pin (no genuine one does): the
    registry neither stores nor charges it, and nothing is published."""
    _pin(client, world, database_url, POOLED)
    response = _submit(client, world, h, tokens, POOLED, "run-1", withheld=False)
    assert response.status_code == 422, response.text
    assert "publishes no per-site release" in response.json()["message"]
    assert _rows(database_url, Result) == [] and _rows(database_url, PrivacyDebit) == []


def test_the_pooled_rule_under_a_pin_with_per_site_releases_is_refused(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """A hospital's operator cannot turn its benchmark's per-site releases off by itself (a
    summary withheld 'for pooling' under the base pin): refused."""
    _pin(client, world, database_url, BASE)
    response = _submit(client, world, h, tokens, BASE, "run-1", withheld=True)
    assert response.status_code == 422, response.text
    assert "publishes per-site releases" in response.json()["message"]
    assert _rows(database_url, Result) == []


def test_a_pooled_only_pin_without_an_aggregator_is_refused(
        client: TestClient, world: Any, h: Any) -> None:
    body = {**h.benchmark_body("pooled", "1"), "metrics_version": POOLED}
    response = client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers)
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert "publishes no per-site release" in message and "would never publish" in message
