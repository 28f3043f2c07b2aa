"""The registry's side of key release to the aggregator (issue 27): a benchmark names its
aggregator image at creation (shown in its API output and its audit event, never the
evaluation image), and the grant set a dataset's approvals require gains the aggregator's
identity for each model approved beside it, computed here independently of the client; a
model's does not change."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

from fastapi.testclient import TestClient

from sealbench.contract.pool import PoolAnchor
from sealbench.contract.workload import WorkloadIdentity, grant_set_digest
from sealbench.crypto.sealing import public_key_to_raw

API = "/api/v1"
PIN = "brats-2023-gli/1"


def _pooled_world(client: TestClient, world: Any, h: Any) -> dict[str, Any]:
    """A second benchmark with an aggregator; the world's model and a dataset with a recipient
    join it."""
    aggregator = h.digest_of("aggregator image")
    body = h.benchmark_body("brats-pooled") | {"aggregator_image_digest": aggregator}
    created = h.ok(client.post(f"{API}/benchmarks", json=body,
                               headers=world.bench_owner.headers), 201)
    b = created["id"]
    h.ok(client.post(f"{API}/benchmarks/{b}/approve", headers=world.admin.headers))
    recipient = h.digest_of("recipient")
    d = h.ok(client.post(f"{API}/datasets", json={
        "name": "hospital-b", "digest": h.digest_of("hospital-b"), "case_count": 5,
        "statistics": {"result_recipient_digest": recipient}},
        headers=world.data_owner.headers), 201)["id"]
    for kind, asset, owner in (("datasets", d, world.data_owner),
                               ("models", world.model_id, world.model_owner)):
        h.ok(client.post(f"{API}/benchmarks/{b}/{kind}", json={"asset_id": asset},
                         headers=owner.headers), 201)
        h.ok(client.post(f"{API}/benchmarks/{b}/{kind}/{asset}/approve",
                         headers=world.bench_owner.headers))
    return {"benchmark": b, "dataset": d, "aggregator": aggregator, "recipient": recipient,
            "created": created}


def test_the_benchmark_names_its_aggregator(client: TestClient, world: Any, h: Any) -> None:
    pooled = _pooled_world(client, world, h)
    assert pooled["created"]["aggregator_image_digest"] == pooled["aggregator"]
    shown = h.ok(client.get(f"{API}/benchmarks/{pooled['benchmark']}",
                            headers=world.other.headers))
    assert shown["aggregator_image_digest"] == pooled["aggregator"]
    # its pool recipient: the registry's pool-release key, fixed at creation and logged
    key = client.app.state.registry.pool_key.public_key()  # type: ignore[attr-defined]
    assert shown["pool_recipient_key"] == base64.b64encode(public_key_to_raw(key)).decode()
    plain = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}", headers=world.other.headers))
    assert plain["aggregator_image_digest"] is None and plain["pool_recipient_key"] is None


def test_the_aggregator_cannot_be_the_evaluation_image(
    client: TestClient, world: Any, h: Any
) -> None:
    body = h.benchmark_body("brats-same") | {"aggregator_image_digest": h.IMAGE_DIGEST}
    response = client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers)
    assert response.status_code == 422
    assert "aggregator_image_digest" in response.text
    malformed = h.benchmark_body("brats-bad") | {"aggregator_image_digest": "sha256:abc"}
    assert client.post(f"{API}/benchmarks", json=malformed,
                       headers=world.bench_owner.headers).status_code == 422


def test_a_datasets_required_grants_name_the_aggregator(
    client: TestClient, world: Any, h: Any
) -> None:
    pooled = _pooled_world(client, world, h)
    b = str(pooled["benchmark"])
    evaluation = WorkloadIdentity(h.IMAGE_DIGEST, h.digest_of("hospital-b"), world.model_digest,
                                  pooled["recipient"], b, PIN)
    aggregator = WorkloadIdentity(pooled["aggregator"], None, world.model_digest,
                                  _anchor_digest(pooled["created"]),
                                  b, PIN)
    status = h.ok(client.get(f"{API}/datasets/{pooled['dataset']}/grants",
                             headers=world.data_owner.headers))
    assert status["required_digest"] == grant_set_digest(
        [(evaluation, False), (aggregator, False)])
    assert status["required_count"] == 2


def test_a_models_required_grants_do_not_name_the_aggregator(
    client: TestClient, world: Any, h: Any
) -> None:
    pooled = _pooled_world(client, world, h)
    # the world's own dataset has no recipient: withdraw it so every pair can be computed
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets/{world.dataset_id}/"
                     "withdraw", headers=world.data_owner.headers))
    evaluation = WorkloadIdentity(h.IMAGE_DIGEST, None, world.model_digest, pooled["recipient"],
                                  str(pooled["benchmark"]), PIN)
    status = h.ok(client.get(f"{API}/models/{world.model_id}/grants",
                             headers=world.model_owner.headers))
    assert status["required_digest"] == grant_set_digest([(evaluation, False)])
    assert status["required_count"] == 1


def _anchor_digest(created: dict[str, Any]) -> str:
    anchor = PoolAnchor.of(SimpleNamespace(**created))
    assert anchor is not None
    return anchor.digest()
