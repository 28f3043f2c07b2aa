"""Deleted workload identity pools and providers as Google keeps them: ``state: DELETED`` for 30
days, still readable, their IDs not reusable, ``:undelete`` restoring them, and the STS refusing
to exchange tokens through them. A mock that simply forgot a deleted provider would let a
throwaway provider's ID be reused at once and fail every assertion here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sealbench.mocktee._http import Response
from sealbench.mocktee.iam import SOFT_DELETE_S, MockIam
from sealbench.mocktee.identity import Identity
from sealbench.mocktee.state import MockState
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch
from tests.unit.mocktee.conftest import Clock, MakeRequest, create_project_with_apis
from tests.unit.mocktee.test_services import OWNER, PROVIDER, _form, _sts

BASE = "/v1/projects/111/locations/global/workloadIdentityPools"
PROVIDER_BODY = {
    "attributeMapping": {"google.subject": "assertion.submods.gce.instance_id"},
    "oidc": {"issuerUri": "https://issuer.example/"},
}


def _json(response: Response) -> Any:
    return json.loads(response.body)


@pytest.fixture
def iam(state: MockState, identity: Identity, clock: Clock) -> MockIam:
    create_project_with_apis(identity, state, "p1", "111", OWNER)
    return MockIam(state, identity, clock)


@pytest.fixture
def token(identity: Identity, iam: MockIam) -> str:
    return identity.issue(OWNER)[0]


def _create_pool(iam: MockIam, make_request: MakeRequest, token: str, pool: str) -> Response:
    return iam.handle(make_request("POST", BASE, {}, token, {"workloadIdentityPoolId": pool}))


def _create_provider(
    iam: MockIam, make_request: MakeRequest, token: str, pool: str, provider: str
) -> Response:
    return iam.handle(make_request(
        "POST", f"{BASE}/{pool}/providers", PROVIDER_BODY, token,
        {"workloadIdentityPoolProviderId": provider},
    ))


def test_deleted_provider_kept_thirty_days_and_its_id_not_reusable(
    iam: MockIam, token: str, identity: Identity, make_request: MakeRequest, clock: Clock
) -> None:
    assert _create_pool(iam, make_request, token, "pool-a").status == 200
    assert _create_provider(iam, make_request, token, "pool-a", "probe-1").status == 200
    path = f"{BASE}/pool-a/providers/probe-1"
    deleted = iam.handle(make_request("DELETE", path, token=token))
    assert deleted.status == 200 and _json(deleted)["done"] is True
    assert _json(deleted)["response"]["state"] == "DELETED"

    got = _json(iam.handle(make_request("GET", path, token=token)))
    assert got["state"] == "DELETED"
    assert got["expireTime"] == "2027-02-14T08:00:00.000000Z"  # the clock's now + 30 days
    assert "purgeAt" not in got

    again = _create_provider(iam, make_request, token, "pool-a", "probe-1")
    assert again.status == 409 and _json(again)["error"]["status"] == "ALREADY_EXISTS"
    listed = _json(iam.handle(make_request("GET", f"{BASE}/pool-a/providers", token=token)))
    assert listed["workloadIdentityPoolProviders"] == []
    shown = _json(iam.handle(make_request(
        "GET", f"{BASE}/pool-a/providers", token=token, query={"showDeleted": "true"}
    )))
    assert [p["state"] for p in shown["workloadIdentityPoolProviders"]] == ["DELETED"]
    patch = iam.handle(make_request(
        "PATCH", path, {"disabled": True}, token, {"updateMask": "disabled"}
    ))
    assert patch.status == 400
    assert iam.handle(make_request("DELETE", path, token=token)).status == 404

    clock.now += SOFT_DELETE_S + 1  # purged: the ID is free again
    token, _ = identity.issue(OWNER)
    assert iam.handle(make_request("GET", path, token=token)).status == 404
    assert _create_provider(iam, make_request, token, "pool-a", "probe-1").status == 200


def test_undelete_restores_a_deleted_provider_and_pool(
    iam: MockIam, token: str, make_request: MakeRequest
) -> None:
    assert _create_pool(iam, make_request, token, "pool-b").status == 200
    assert _create_provider(iam, make_request, token, "pool-b", "prov-b").status == 200
    provider = f"{BASE}/pool-b/providers/prov-b"
    assert iam.handle(make_request("POST", f"{provider}:undelete", {}, token)).status == 400
    assert iam.handle(make_request("DELETE", f"{BASE}/pool-b", token=token)).status == 200
    pool = _json(iam.handle(make_request("GET", f"{BASE}/pool-b", token=token)))
    assert pool["state"] == "DELETED" and pool["expireTime"]
    assert _create_pool(iam, make_request, token, "pool-b").status == 409
    assert _create_provider(iam, make_request, token, "pool-b", "prov-c").status == 400

    assert iam.handle(make_request("DELETE", provider, token=token)).status == 200
    refused = iam.handle(make_request("POST", f"{provider}:undelete", {}, token))
    assert refused.status == 400  # the pool first
    restored = iam.handle(make_request("POST", f"{BASE}/pool-b:undelete", {}, token))
    assert _json(restored)["response"]["state"] == "ACTIVE"
    assert "expireTime" not in _json(iam.handle(make_request("GET", f"{BASE}/pool-b", token=token)))
    assert iam.handle(make_request("POST", f"{provider}:undelete", {}, token)).status == 200
    assert _json(iam.handle(make_request("GET", provider, token=token)))["state"] == "ACTIVE"


def test_stranger_cannot_delete_a_provider(
    iam: MockIam, token: str, identity: Identity, make_request: MakeRequest
) -> None:
    assert _create_pool(iam, make_request, token, "pool-c").status == 200
    assert _create_provider(iam, make_request, token, "pool-c", "prov-c").status == 200
    stranger, _ = identity.issue("user:stranger@example.org")
    path = f"{BASE}/pool-c/providers/prov-c"
    assert iam.handle(make_request("DELETE", path, token=stranger)).status == 403
    assert _json(iam.handle(make_request("GET", path, token=token)))["state"] == "ACTIVE"


@pytest.mark.parametrize("deleted", ["provider", "pool"])
def test_sts_refuses_a_deleted_provider_or_pool(
    state: MockState,
    identity: Identity,
    verifier: MockVerifier,
    clock: Clock,
    make_request: MakeRequest,
    deleted: str,
) -> None:
    sts = _sts(state, identity, verifier, clock)
    token = verifier.mint(WorkloadLaunch("sha256:" + "a" * 64, "ref"))
    assert sts.handle(make_request("POST", "/v1/token", form=_form(token))).status == 200
    create_project_with_apis(identity, state, "p1", "111", OWNER)
    owner, _ = identity.issue(OWNER)
    path = f"/v1/{PROVIDER}" if deleted == "provider" else f"/v1/{PROVIDER.split('/providers/')[0]}"
    iam = MockIam(state, identity, clock)
    assert iam.handle(make_request("DELETE", path, token=owner)).status == 200
    refused = sts.handle(make_request("POST", "/v1/token", form=_form(token)))
    assert refused.status == 400 and _json(refused)["error"] == "invalid_target"
    assert "deleted" in _json(refused)["error_description"]
