"""The grid contract at the registry: a dataset on another grid than the benchmark's contract is
refused (422) when registered for the benchmark and when associated with it; a dataset on the
benchmark's grid, or any dataset of a benchmark that fixes no grid, is accepted."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastapi.testclient import TestClient

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "the grid is compared in Python before anything is stored"
)

FULL = {"shape": [240, 240, 155], "spacing_mm": [1.0, 1.0, 1.0]}
SMALL = {"shape": [64, 64, 48], "spacing_mm": [1.0, 1.0, 1.0]}
_names = itertools.count()


#: The plug-in pin of each grid (the grid is part of the pin); another contract pins WDBC, a
#: plug-in that fixes no grid.
PINS = {"240x240x155": "brats-2023-gli/1", "64x64x48": "brats-2023-gli/1-64x64x48"}


def _pin(contract: dict[str, Any]) -> str:
    shape = contract.get("shape")
    key = "x".join(map(str, shape)) if isinstance(shape, list) else ""
    return PINS.get(key, "wdbc/1")


def _benchmark(client: TestClient, world: Any, h: Any, contract: dict[str, Any]) -> int:
    body = {**h.benchmark_body(name=f"grid-{next(_names)}"), "metrics_version": _pin(contract),
            "data_contract": {"modalities": ["t1n", "t1c", "t2w", "t2f"], **contract}}
    bid = h.ok(client.post("/api/v1/benchmarks", json=body, headers=world.bench_owner.headers),
               201)["id"]
    h.ok(client.post(f"/api/v1/benchmarks/{bid}/approve", headers=world.admin.headers))
    return int(bid)


def _register(client: TestClient, world: Any, h: Any, name: str, statistics: dict[str, Any],
              prepared_for: int | None) -> Any:
    return client.post(
        "/api/v1/datasets",
        json={"name": name, "digest": h.digest_of(name), "case_count": 3,
              "statistics": statistics, "prepared_for_id": prepared_for},
        headers=world.data_owner.headers,
    )


def test_small_grid_dataset_refused_for_full_size_benchmark(
        client: TestClient, world: Any, h: Any) -> None:
    bid = _benchmark(client, world, h, FULL)
    refused = _register(client, world, h, "small-cases", {"grid": SMALL}, bid)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["message"]
    assert "64x64x48 at 1x1x1 mm" in detail and "240x240x155 at 1x1x1 mm" in detail
    listed = h.ok(client.get("/api/v1/datasets", headers=world.data_owner.headers))
    assert "small-cases" not in {d["name"] for d in listed["items"]}
    accepted = _register(client, world, h, "full-cases", {"grid": FULL}, bid)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["statistics"]["grid"] == FULL


def test_registration_for_a_gridded_benchmark_must_state_its_grid(
        client: TestClient, world: Any, h: Any) -> None:
    bid = _benchmark(client, world, h, FULL)
    refused = _register(client, world, h, "no-grid", {}, bid)
    assert refused.status_code == 422, refused.text
    assert "statistics.grid" in refused.json()["message"]


def test_other_spacing_refused(client: TestClient, world: Any, h: Any) -> None:
    bid = _benchmark(client, world, h, FULL)
    coarse = {"shape": [240, 240, 155], "spacing_mm": [1.0, 1.0, 2.0]}
    refused = _register(client, world, h, "coarse", {"grid": coarse}, bid)
    assert refused.status_code == 422
    assert "1x1x2 mm" in refused.json()["message"]


def test_malformed_grid_refused_by_the_schema(client: TestClient, world: Any, h: Any) -> None:
    for bad in ({"shape": [0, 64, 48]}, {"shape": "64x64x48"}, {"shape": [64, 64, 48],
                                                              "spacing_mm": [1.0, -1.0, 1.0]},
                {"shape": [64, 64, 48], "spacing_mm": [1.0]}, {"shape": []}):
        response = _register(client, world, h, "bad-grid", {"grid": bad}, None)
        assert response.status_code == 422, (bad, response.text)


def test_small_dataset_cannot_be_associated_with_a_full_size_benchmark(
        client: TestClient, world: Any, h: Any) -> None:
    """Registered for no benchmark (or for the small one), a small dataset still cannot join
    the full-size benchmark's leaderboard through an association."""
    full, small = _benchmark(client, world, h, FULL), _benchmark(client, world, h, SMALL)
    did = h.ok(_register(client, world, h, "small-cases", {"grid": SMALL}, small), 201)["id"]
    refused = client.post(f"/api/v1/benchmarks/{full}/datasets", json={"asset_id": did},
                          headers=world.data_owner.headers)
    assert refused.status_code == 422, refused.text
    assert "64x64x48" in refused.json()["message"]
    assert client.post(f"/api/v1/benchmarks/{small}/datasets", json={"asset_id": did},
                       headers=world.data_owner.headers).status_code == 201


def test_benchmark_without_a_grid_takes_any_dataset(
        client: TestClient, world: Any, h: Any) -> None:
    tabular = _benchmark(client, world, h, {"features": 30})
    assert _register(client, world, h, "rows", {}, tabular).status_code == 201
    assert _register(client, world, h, "vox", {"grid": SMALL}, tabular).status_code == 201


def test_unreadable_benchmark_grid_is_refused_by_the_plugin(
        client: TestClient, world: Any, h: Any) -> None:
    body = {**h.benchmark_body(name=f"grid-{next(_names)}"), "metrics_version": "brats-2023-gli/1",
            "data_contract": {"modalities": ["t1n", "t1c", "t2w", "t2f"], "shape": "large"}}
    refused = client.post("/api/v1/benchmarks", json=body, headers=world.bench_owner.headers)
    assert refused.status_code == 422, refused.text
    assert "'large' is not a list of positive voxel counts" in refused.json()["message"]


def test_a_plugin_not_installed_here_is_refused_at_creation(
        client: TestClient, world: Any, h: Any) -> None:
    """The registry reads no grid itself: a benchmark of a plug-in it lacks, whose grid (and
    results) it could not check, is never created (tests/unit/server/
    test_plugin_not_installed.py)."""
    body = {**h.benchmark_body(name=f"grid-{next(_names)}"), "metrics_version": "not-installed/1",
            "data_contract": {"shape": "large"}}
    refused = client.post("/api/v1/benchmarks", json=body, headers=world.bench_owner.headers)
    assert refused.status_code == 422 and "not-installed/1" in refused.json()["message"]


@pytest.mark.parametrize(("pin", "contract", "declared"), [
    ("brats-2023-gli/1", SMALL, "64x64x48 at 1x1x1 mm"),
    ("brats-2023-gli/1-64x64x48", FULL, "240x240x155 at 1x1x1 mm"),
    ("brats-2023-gli/1", {"shape": [240, 240, 155]}, "240x240x155"),  # spacing left out
])
def test_benchmark_whose_pin_fixes_another_grid_is_refused(
        client: TestClient, world: Any, h: Any, pin: str, contract: dict[str, Any],
        declared: str) -> None:
    body = {**h.benchmark_body(name=f"grid-{next(_names)}"), "metrics_version": pin,
            "data_contract": {"modalities": ["t1n", "t1c", "t2w", "t2f"], **contract}}
    refused = client.post("/api/v1/benchmarks", json=body, headers=world.bench_owner.headers)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["message"]
    assert pin in detail and f"declares {declared};" in detail
    listed = h.ok(client.get("/api/v1/benchmarks", headers=world.bench_owner.headers))
    assert body["name"] not in {b["name"] for b in listed["items"]}
