"""A dataset prepared for a benchmark of one plug-in (or one grid variant of a contract) cannot
join a benchmark of another: the registry refuses the association (422 naming both pins) and
stores nothing, whoever opens it, so a 32x32 knee dataset is never offered to a BraTS authority
for approval. Another benchmark of the same plug-in and contract, an exact release of it
included, takes the dataset."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastapi.testclient import TestClient

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "the two pins are compared in Python before anything is stored"
)

API = "/api/v1"
FULL = {"shape": [240, 240, 155], "spacing_mm": [1.0, 1.0, 1.0]}
_names = itertools.count()


def _benchmark(client: TestClient, world: Any, h: Any, pin: str,
               contract: dict[str, Any]) -> int:
    body = {**h.benchmark_body(name=f"other-{next(_names)}"), "metrics_version": pin,
            "data_contract": contract}
    bid = h.ok(client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers),
               201)["id"]
    h.ok(client.post(f"{API}/benchmarks/{bid}/approve", headers=world.admin.headers))
    return int(bid)


def _dataset(client: TestClient, world: Any, h: Any, prepared_for: int,
             statistics: dict[str, Any]) -> int:
    name = f"ds-{next(_names)}"
    body = {"name": name, "digest": h.digest_of(name), "case_count": 3,
            "statistics": statistics, "prepared_for_id": prepared_for}
    return int(h.ok(client.post(f"{API}/datasets", json=body,
                                headers=world.data_owner.headers), 201)["id"])


def _associate(client: TestClient, world: Any, bid: int, did: int, *, who: str = "data_owner",
               consent: bool = False) -> Any:
    return client.post(f"{API}/benchmarks/{bid}/datasets",
                       json={"asset_id": did, "exact_release_consent": consent},
                       headers=getattr(world, who).headers)


def _links(client: TestClient, world: Any, bid: int) -> list[Any]:
    listed = client.get(f"{API}/benchmarks/{bid}/datasets", headers=world.bench_owner.headers)
    return list(listed.json()["items"])


def test_tabular_dataset_cannot_join_a_brats_benchmark(
        client: TestClient, world: Any, h: Any) -> None:
    tabular = _benchmark(client, world, h, "wdbc/1", {})
    brats = _benchmark(client, world, h, "brats-2023-gli/1", FULL)
    did = _dataset(client, world, h, tabular, {})
    for who in ("data_owner", "bench_owner"):  # a request and an invitation alike
        refused = _associate(client, world, brats, did, who=who)
        assert refused.status_code == 422, refused.text
        message = refused.json()["message"]
        assert "wdbc/1" in message and "brats-2023-gli/1" in message
        assert f"prepared for benchmark {tabular}" in message
    assert _links(client, world, brats) == []


def test_dataset_of_another_grid_variant_cannot_join(
        client: TestClient, world: Any, h: Any) -> None:
    full = _benchmark(client, world, h, "brats-2023-gli/1", FULL)
    small = _benchmark(client, world, h, "brats-2023-gli/1-64x64x48",
                       {"shape": [64, 64, 48], "spacing_mm": [1.0, 1.0, 1.0]})
    did = _dataset(client, world, h, full, {"grid": FULL})
    refused = _associate(client, world, small, did)
    assert refused.status_code == 422, refused.text
    assert "brats-2023-gli/1-64x64x48" in refused.json()["message"]
    assert _links(client, world, small) == []


def test_dataset_joins_other_benchmarks_of_its_plugin_and_their_exact_release(
        client: TestClient, world: Any, h: Any) -> None:
    first = _benchmark(client, world, h, "brats-2023-gli/1", FULL)
    second = _benchmark(client, world, h, "brats-2023-gli/1", FULL)
    exact = _benchmark(client, world, h, "brats-2023-gli/1-exact", FULL)
    did = _dataset(client, world, h, first, {"grid": FULL})
    for bid in (first, second):
        assert _associate(client, world, bid, did).status_code == 201
    assert _associate(client, world, exact, did, consent=True).status_code == 201
