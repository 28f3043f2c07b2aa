"""The registry stores which benchmark plug-in a benchmark pins and refuses results whose
summary does not validate against it (or whose plug-in it does not have), storing nothing."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.benchmarks.release import InsecureFixedNoise, Release
from sealbench.contract.pin import BenchmarkPin

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "a summary is validated by the plug-in in Python before anything is stored; result "
    "storage runs on both databases in test_results"
)

API = "/api/v1"
SEALED = "sha256:" + "7" * 64
_BRATS = load_benchmark(BenchmarkPin.parse("brats-2023-gli/1"))


def _summary(**override: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": "sealbench/result-summary", "version": 1, "run_id": "run-1",
        "benchmark_id": "1", "metrics_version": "brats-2023-gli/1",
        "aggregates": _BRATS.summarise([_BRATS.failure("BraTS-GLI-00001-000", "x")],
        InsecureFixedNoise()).to_json(),
    }
    doc.update(override)
    return doc


def _submit(client: TestClient, world: Any, tokens: Any, h: Any,
            summary: dict[str, Any]) -> Any:
    claims = h.result_claims(summary=summary, benchmark_id=world.benchmark_id,
                             sealed_digest=SEALED, data_digest=world.dataset_digest,
                             model_digest=world.model_digest)
    body = {"benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
            "model_id": world.model_id, "summary": summary, "sealed_result_digest": SEALED,
            "attestation_token": tokens.sign(claims)}
    return client.post(f"{API}/results", json=body, headers=world.data_owner.headers)


def _nothing_stored(client: TestClient, world: Any) -> None:
    r = client.get(f"{API}/results", headers=world.bench_owner.headers)
    assert r.json()["items"] == []


def test_benchmark_stores_the_plugin_it_pins(client: TestClient, world: Any) -> None:
    row = client.get(f"{API}/benchmarks/{world.benchmark_id}",
                     headers=world.bench_owner.headers).json()
    assert row["metrics_version"] == "brats-2023-gli/1"
    assert "plugin_name" not in row and "plugin_version" not in row  # the pin, stored once


def test_benchmark_pinning_no_plugin_refused(client: TestClient, world: Any, h: Any) -> None:
    body = {**h.benchmark_body(name="unpinned"), "metrics_version": "brats"}
    r = client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers)
    assert r.status_code == 422, r.text
    (detail,) = r.json()["details"]  # the schema refuses it, naming the field and the form
    assert detail["loc"][-1] == "metrics_version" and "<name>/<version>" in detail["msg"]


def test_attested_summary_of_another_schema_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    forged = _summary(aggregates={"dice": 0.99, "n_cases": 1})
    r = _submit(client, world, tokens, h, forged)
    assert r.status_code == 422 and r.json()["code"] == "result_rejected"
    assert "brats-2023-gli/1's schema" in r.json()["message"]
    _nothing_stored(client, world)


def test_summary_missing_a_region_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    """A release without ET's column is refused: dropped from a release (its sensitivity no
    longer matches its content), or as a consistent release of WT and TC alone (not the content
    the pin declares)."""
    doc = _summary()
    release = doc["aggregates"]["release"]
    del release["columns"][2]
    r = _submit(client, world, tokens, h, doc)
    assert r.status_code == 422 and "brats-2023-gli/1's schema" in r.json()["message"]
    _nothing_stored(client, world)
    # the same loss, noise scaled to the two columns left (and no headline moment, a summary
    # of version 2): valid as a release, not as the pin's
    del release["moments"]
    release["version"] = 1
    doc["aggregates"]["version"] = 2
    release["sensitivity"] = math.sqrt(2)
    release["sigma"] = release["sensitivity"] / math.sqrt(2 * release["rho"])
    for column in release["columns"]:
        column["sd"] = release["sigma"]
    Release.from_json(release)
    r = _submit(client, world, tokens, h, doc)
    assert r.status_code == 422 and "content" in r.json()["message"]
    _nothing_stored(client, world)


def test_summary_of_another_plugin_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    r = _submit(client, world, tokens, h, _summary(metrics_version="wdbc/1"))
    assert r.status_code == 422 and "another benchmark plug-in" in r.json()["message"]
    _nothing_stored(client, world)


def test_valid_summary_accepted(client: TestClient, world: Any, tokens: Any, h: Any) -> None:
    r = _submit(client, world, tokens, h, _summary())
    assert r.status_code in (200, 201), r.text


def test_withheld_summary_accepted_as_withheld(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    held = _summary(aggregates={}, withheld={"rule": "cases", "n_cases": 1, "minimum": 5})
    r = _submit(client, world, tokens, h, held)
    assert r.status_code in (200, 201), r.text
    assert r.json()["summary"]["withheld"] == {"rule": "cases", "n_cases": 1, "minimum": 5}


def test_withheld_summary_the_rule_does_not_give_refused(
    client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    for forged in (
        _summary(withheld={"rule": "cases", "n_cases": 1, "minimum": 5}),  # aggregates kept
        _summary(aggregates={}, withheld={"rule": "cases", "n_cases": 9, "minimum": 5}),
        _summary(aggregates={}, withheld={"rule": "cases", "n_cases": 1, "minimum": 1}),
        _summary(aggregates={}, withheld={"rule": "any", "n_cases": 1, "minimum": 5}),
    ):
        r = _submit(client, world, tokens, h, forged)
        assert r.status_code == 422 and r.json()["code"] == "result_rejected", r.text
    _nothing_stored(client, world)
