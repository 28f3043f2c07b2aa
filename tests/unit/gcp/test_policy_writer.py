"""The policy writer's REST choreography against a scripted fake session: long-running
operations are awaited, etag conflicts retried, and persistent conflicts reported."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.policy import AssetPolicy, PoolProvider, provider_body
from sealbench.gcp.policy_writer import PolicyWriter
from sealbench.platforms.errors import ConcurrentPolicyChange, PolicyWriteError

KEY = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
PROVIDER = PoolProvider("42", "pool-a", "prov-a")
POLICY = AssetPolicy(
    PROVIDER,
    KEY,
    None,
    frozenset(
        {
            WorkloadIdentity(
                sha256_digest(b"i"), sha256_digest(b"d"), sha256_digest(b"m"), sha256_digest(b"r"),
                "1", "brats-2023-gli/1",
            )
        }
    ),
    include_data=True,
)


def _response(status: int, body: dict[str, Any]) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode()
    return response


@dataclass
class FakeSession:
    """Answers each (method, url-suffix) from a queue of scripted responses."""

    script: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]]
    calls: list[tuple[str, str, Any]] = field(default_factory=list)

    def request(
        self, method: str, url: str, *, json: Any = None, params: Any = None, timeout: float
    ) -> requests.Response:
        assert timeout > 0
        path = url.split("googleapis.com", 1)[1]
        self.calls.append((method, path, json))
        for (m, suffix), answers in self.script.items():
            if m == method and path.endswith(suffix):
                return _response(*(answers.pop(0) if len(answers) > 1 else answers[0]))
        raise AssertionError(f"unscripted call {method} {path}")


def _writer(session: FakeSession) -> PolicyWriter:
    return PolicyWriter(session, sleep=lambda _: None)  # type: ignore[arg-type]


def _existing_provider() -> dict[str, Any]:
    body = provider_body(POLICY)
    del body["disabled"]  # the API omits false booleans
    return {**body, "name": PROVIDER.name, "state": "ACTIVE"}


def test_pending_operations_are_awaited() -> None:
    session = FakeSession(
        {
            ("GET", "/v1/" + PROVIDER.pool_name): [(404, {"error": {"code": 404}})],
            ("POST", "/workloadIdentityPools"): [(200, {"name": "op/pool", "done": False})],
            ("GET", "/v1/op/pool"): [
                (200, {"name": "op/pool", "done": False}),
                (200, {"name": "op/pool", "done": True}),
            ],
            ("GET", "/providers/prov-a"): [(200, _existing_provider())],
            ("GET", ":getIamPolicy"): [(200, {"etag": "e", "bindings": []})],
            ("POST", ":setIamPolicy"): [(200, {})],
        }
    )
    report = _writer(session).sync(POLICY)
    assert report.pool_created and report.provider == "unchanged" and report.key.added
    assert [c[1] for c in session.calls].count("/v1/op/pool") == 2


def test_failed_operation_reported() -> None:
    session = FakeSession(
        {
            ("GET", "/v1/" + PROVIDER.pool_name): [(404, {})],
            ("POST", "/workloadIdentityPools"): [
                (200, {"name": "op/pool", "done": True, "error": {"message": "quota"}})
            ],
            ("GET", ":getIamPolicy"): [(200, {"etag": "e", "bindings": []})],
        }
    )
    with pytest.raises(PolicyWriteError, match="quota"):
        _writer(session).sync(POLICY)


def test_etag_conflict_retried_then_given_up() -> None:
    base = {
        ("GET", "/v1/" + PROVIDER.pool_name): [(200, {})],
        ("GET", "/providers/prov-a"): [(200, _existing_provider())],
        ("GET", ":getIamPolicy"): [(200, {"etag": "e", "bindings": []})],
    }
    once = FakeSession({**base, ("POST", ":setIamPolicy"): [(409, {}), (200, {})]})
    assert _writer(once).sync(POLICY).key.added
    always = FakeSession({**base, ("POST", ":setIamPolicy"): [(409, {})]})
    with pytest.raises(ConcurrentPolicyChange):
        _writer(always).sync(POLICY)


def test_changed_condition_patched_with_a_field_mask() -> None:
    stale = {**_existing_provider(), "attributeCondition": "true"}
    session = FakeSession(
        {
            ("GET", "/v1/" + PROVIDER.pool_name): [(200, {})],
            ("GET", "/providers/prov-a"): [(200, stale)],
            ("PATCH", "/providers/prov-a"): [(200, {"name": "op/p", "done": True})],
            ("GET", ":getIamPolicy"): [(200, {"etag": "e", "bindings": []})],
            ("POST", ":setIamPolicy"): [(200, {})],
        }
    )
    assert _writer(session).sync(POLICY).provider == "updated"
    patch = next(c for c in session.calls if c[0] == "PATCH")
    assert patch[2] == {"attributeCondition": provider_body(POLICY)["attributeCondition"]}


def test_http_error_names_the_call() -> None:
    session = FakeSession(
        {
            ("GET", "/v1/" + PROVIDER.pool_name): [(403, {"error": {"message": "denied"}})],
        }
    )
    with pytest.raises(PolicyWriteError, match="HTTP 403: denied"):
        _writer(session).sync(POLICY)
