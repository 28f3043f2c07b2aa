"""A benchmark pinning a plug-in the registry has not installed is refused at creation (422
naming the pin and how an operator installs one), and nothing is stored: the registry could
validate none of its results, so it must never reach the point where hospitals join it and
their runs' results are refused after the fact."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1"


def _names(client: TestClient, world: Any) -> set[str]:
    listed = client.get(f"{API}/benchmarks", headers=world.bench_owner.headers).json()
    return {b["name"] for b in listed["items"]}


def test_benchmark_of_an_uninstalled_plugin_is_refused_naming_it_and_the_fix(
        client: TestClient, world: Any, h: Any) -> None:
    body = {**h.benchmark_body(name="knee"), "metrics_version": "knee-seg/1",
            "data_contract": {"size": [32, 32]}}
    refused = client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers)
    assert refused.status_code == 422, refused.text
    message = refused.json()["message"]
    assert "knee-seg/1" in message and "no benchmark plug-in named 'knee-seg'" in message
    assert "sealbench.benchmarks" in message and "pip install" in message  # how to fix it
    assert "knee" not in _names(client, world)


def test_benchmark_of_another_version_of_an_installed_plugin_is_refused(
        client: TestClient, world: Any, h: Any) -> None:
    body = {**h.benchmark_body(name="future-wdbc"), "metrics_version": "wdbc/7",
            "data_contract": {}}
    refused = client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers)
    assert refused.status_code == 422, refused.text
    assert "wdbc/7" in refused.json()["message"] and "not '7'" in refused.json()["message"]
    assert "future-wdbc" not in _names(client, world)


def test_benchmark_of_an_installed_plugin_is_created(
        client: TestClient, world: Any, h: Any) -> None:
    body = {**h.benchmark_body(name="tabular"), "metrics_version": "wdbc/1",
            "data_contract": {}}
    created = client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers)
    assert created.status_code == 201, created.text
    assert "tabular" in _names(client, world)
