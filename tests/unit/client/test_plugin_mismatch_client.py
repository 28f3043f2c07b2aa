"""The client's side of plug-ins that cannot break the registry:

- a dataset prepared for a benchmark of one plug-in is refused for a benchmark of another
  before anything is sent (``dataset associate`` sends no request, the registry holds no link);
- ``benchmark create`` of a definition whose plug-in this client has but the registry has not
  says what the registry says: the pin, and how its operator installs a plug-in."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks.interface import PluginNotFoundError
from sealbench.benchmarks.registry import load
from sealbench.client.assets import lifecycle
from sealbench.client.errors import ConfigError, InvalidRequestError
from sealbench.client.registry import governance
from sealbench.client.registry.api import RegistryClient
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest
from sealbench.server.app import create_app
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate

IMAGE = sha256_digest(b"evaluation image")
FULL = {"shape": [240, 240, 155], "spacing_mm": [1.0, 1.0, 1.0]}


@dataclass
class Sent:
    """The requests the clients sent (method and path)."""

    requests: list[tuple[str, str]] = field(default_factory=list)

    def hook(self, request: httpx.Request) -> None:
        self.requests.append((request.method, request.url.path))


def _benchmark(api: dict[str, RegistryClient], name: str, pin: str,
               contract: dict[str, Any]) -> int:
    body = BenchmarkCreate(name=name, version="1", data_contract=contract, metrics_spec={},
                           metrics_version=BenchmarkPin.parse(pin),
                           image_reference=f"example/eval@{IMAGE}", image_digest=IMAGE)
    bid = api["authority"].create_benchmark(body).id
    api["admin"].approve_benchmark(bid)
    return bid


def test_dataset_prepared_for_another_plugin_is_refused_before_anything_is_sent(
        http: TestClient, registry: Any) -> None:
    sent = Sent()
    http.event_hooks["request"].append(sent.hook)
    api = {name: RegistryClient(http, token) for name, token in registry.tokens.items()}
    tabular = _benchmark(api, "wdbc-site", "wdbc/1", {})
    brats = _benchmark(api, "brats-site", "brats-2023-gli/1", FULL)
    dataset = api["hospital"].register_dataset(DatasetCreate(
        name="rows", digest=sha256_digest(b"rows"), case_count=3, prepared_for_id=tabular))
    sent.requests.clear()
    with pytest.raises(ConfigError) as refused:
        lifecycle.associate_asset(api["hospital"], "dataset", dataset.id, brats)
    message = str(refused.value)
    assert "wdbc/1" in message and "brats-2023-gli/1" in message
    assert "nothing was sent" in message
    assert all(method == "GET" for method, _ in sent.requests), sent.requests
    assert api["authority"].list_associations("dataset", brats) == ()
    # the benchmark it was prepared for takes it
    done = lifecycle.associate_asset(api["hospital"], "dataset", dataset.id, tabular)
    assert done.row.status == "pending"


@pytest.fixture
def registry_without_wdbc(registry: Any) -> Iterator[TestClient]:
    """A registry whose operator did not install the WDBC plug-in this client has."""

    def plugins(ref: BenchmarkPin) -> Any:
        if ref.name == "wdbc":
            raise PluginNotFoundError("no benchmark plug-in named 'wdbc' is installed")
        return load(ref)

    with TestClient(create_app(registry.settings, plugins=plugins)) as client:
        yield client


def test_benchmark_create_of_a_plugin_the_registry_lacks_says_so(
        registry_without_wdbc: TestClient, registry: Any) -> None:
    client = RegistryClient(registry_without_wdbc, registry.tokens["authority"])
    with pytest.raises(InvalidRequestError) as refused:
        governance.create_benchmark(client, "wdbc", image_reference=f"example/eval@{IMAGE}",
                                    image_digest=IMAGE)
    message = str(refused.value)
    assert "wdbc/1" in message and "no benchmark plug-in named 'wdbc'" in message
    assert "sealbench.benchmarks" in message and "restarting 'sealbench-server'" in message
    assert client.list_benchmarks() == ()
