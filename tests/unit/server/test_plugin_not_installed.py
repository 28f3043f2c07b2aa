"""A benchmark pinning a plug-in the registry has not installed is refused at creation (422
naming the pin and how an operator installs one), and nothing is stored: the registry could
validate none of its results, so it must never reach the point where hospitals join it and
their runs' results are refused after the fact. A result of a benchmark whose plug-in the
registry no longer has is refused as such (``plugin_not_installed``), and the client says the
operator must install it, never to run again with --force."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks.interface import BenchmarkPin, PluginNotFoundError
from sealbench.benchmarks.registry import load
from sealbench.client.errors import ResultRejectedError
from sealbench.client.registry.api import RegistryClient
from sealbench.server.app import create_app
from sealbench.server.schemas import ResultCreate

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "the pin is checked against the installed plug-ins in Python before anything is stored"
)

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


# -- a result of a benchmark whose plug-in the registry lost -----------------------------------

SEALED = "sha256:" + "7" * 64


@pytest.fixture
def without_brats(settings: Any, clock: Any, jwks_fetcher: Any) -> Iterator[TestClient]:
    """The same registry after its operator uninstalled the BraTS plug-in (a benchmark created
    while it was installed stays)."""

    def plugins(ref: BenchmarkPin) -> Any:
        if ref.name.startswith("brats"):
            raise PluginNotFoundError(f"no benchmark plug-in named {ref.name!r} is installed")
        return load(ref)

    with TestClient(create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher,
                               plugins=plugins)) as app:
        yield app


def test_result_of_a_benchmark_whose_plugin_is_missing_says_so_and_not_to_rerun(
        client: TestClient, world: Any, tokens: Any, h: Any,
        without_brats: TestClient) -> None:
    summary = h.valid_summary()
    claims = h.result_claims(summary=summary, benchmark_id=world.benchmark_id,
                             sealed_digest=SEALED, data_digest=world.dataset_digest,
                             model_digest=world.model_digest)
    body = ResultCreate.model_validate({
        "benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
        "model_id": world.model_id, "summary": summary, "sealed_result_digest": SEALED,
        "attestation_token": tokens.sign(claims)})
    answer = without_brats.post(f"{API}/results", content=body.model_dump_json(),
                                headers={**world.data_owner.headers,
                                         "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "plugin_not_installed"
    assert "no benchmark plug-in named 'brats-2023-gli'" in answer.json()["message"]
    hospital = RegistryClient(without_brats, world.data_owner.token)
    with pytest.raises(ResultRejectedError) as refused:
        hospital.submit_result(body)
    assert refused.value.hint is not None
    assert "install the benchmark's plug-in" in refused.value.hint
    assert "--force" not in refused.value.hint and "would not help" in refused.value.hint
    assert client.get(f"{API}/results", headers=world.bench_owner.headers).json()["items"] == []
