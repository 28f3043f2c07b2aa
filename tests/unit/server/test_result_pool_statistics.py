"""Issue 27, sites seal: a run's summary carries the commitment to its sealed pool statistics
(``pool_statistics``). The registry accepts such a result, published or withheld, and stores the
commitment with the summary exactly as attested; the token binds it, so a summary whose
commitment is changed, added or dropped after attestation is refused and nothing is stored."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.result import ResultSummary

API = "/api/v1"
SEALED = "sha256:" + "7" * 64
COMMITMENT = "sha256:" + hashlib.sha256(b"a site's statistics document").hexdigest()
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))


def _summary(**override: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": "sealbench/result-summary", "version": 1, "run_id": "run-1",
        "benchmark_id": "1", "metrics_version": "brats-2023-gli/1",
        "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
                                       InsecureFixedNoise()).to_json(),
        "pool_statistics": COMMITMENT,
    }
    doc.update(override)
    return doc


def _post(client: TestClient, world: Any, tokens: Any, h: Any, summary: dict[str, Any],
          *, attested: dict[str, Any] | None = None) -> Any:
    """Submit ``summary`` under a token whose nonce binds ``attested`` (default: itself)."""
    claims = h.result_claims(summary=attested or summary, benchmark_id=world.benchmark_id,
                             sealed_digest=SEALED, data_digest=world.dataset_digest,
                             model_digest=world.model_digest)
    body = {"benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
            "model_id": world.model_id, "summary": summary, "sealed_result_digest": SEALED,
            "attestation_token": tokens.sign(claims)}
    return client.post(f"{API}/results", json=body, headers=world.data_owner.headers)


def _stored(client: TestClient, world: Any) -> list[Any]:
    r = client.get(f"{API}/results", headers=world.bench_owner.headers)
    return list(r.json()["items"])


def test_summary_with_commitment_accepted_and_stored_as_attested(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    summary = _summary()
    # what the enclave writes: the contract's canonical summary keeps the member
    assert ResultSummary.model_validate(summary).pool_statistics == COMMITMENT
    r = _post(client, world, tokens, h, summary)
    assert r.status_code == 201, r.text
    assert r.json()["summary"]["pool_statistics"] == COMMITMENT
    (row,) = _stored(client, world)
    assert row["summary"] == summary


def test_withheld_summary_with_commitment_accepted(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    """A small site: no aggregates, yet its statistics can be pooled."""
    held = _summary(aggregates={}, withheld={"rule": "cases", "n_cases": 1, "minimum": 5})
    r = _post(client, world, tokens, h, held)
    assert r.status_code == 201, r.text
    assert r.json()["summary"]["withheld"] == {"rule": "cases", "n_cases": 1, "minimum": 5}
    assert r.json()["summary"]["pool_statistics"] == COMMITMENT


def test_commitment_changed_after_attestation_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    other = "sha256:" + hashlib.sha256(b"a substituted document").hexdigest()
    attested = _summary()
    for forged in (_summary(pool_statistics=other),
                   {k: v for k, v in attested.items() if k != "pool_statistics"}):
        r = _post(client, world, tokens, h, forged, attested=attested)
        assert r.status_code == 422, r.text
        assert r.json()["code"] == "result_rejected" and "eat_nonce" in r.json()["message"]
    # nor may a commitment be added to a summary attested without one
    bare = {k: v for k, v in attested.items() if k != "pool_statistics"}
    r = _post(client, world, tokens, h, attested, attested=bare)
    assert r.status_code == 422, r.text
    assert _stored(client, world) == []



def test_malformed_commitment_refused_even_when_attested(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    """A commitment the token binds but that is not ``sha256:`` + 64 hex (only a defective image
    writes one) is refused before anything is stored: every pool it joined would fail."""
    for bad in ("sha256:" + "Z" * 64, "sha256:" + "a" * 63, 42, ""):
        summary = _summary(pool_statistics=bad)
        r = _post(client, world, tokens, h, summary)
        assert r.status_code == 422, r.text
        assert "pool_statistics" in r.json()["message"]
    assert _stored(client, world) == []
