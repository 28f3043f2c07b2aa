"""The mock's Google-compatible project APIs answer as Google does, read through Google's own
client code: a disabled API is the 403 ``SERVICE_DISABLED`` that google-api-core parses (reason
and service), Service Usage enables it again, only owners read a project's services and IAM
policy, the token endpoint refreshes only the refresh tokens it issued, the Compute stand-in
reports the quota it enforces, the fault endpoint refuses what it does not know, and a disabled
Compute API reaches the launcher as that, with the command that enables it."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exc
from google.auth import external_account_authorized_user
from google.auth.transport.requests import AuthorizedSession, Request
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials

from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.gcp.launcher import (
    ComputeNotFound,
    ConfidentialSpaceLauncher,
    VmSettings,
)
from sealbench.mocktee.provision import enable_services
from sealbench.mocktee.server import MockCloud, MockEndpoints

PROJECT, NUMBER, OWNER = "apis-gcp", "810000000081", "user:owner@apis.example"


def _post(url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read() or b"{}")
        return answer


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCloud]:
    with MockCloud(tmp_path_factory.mktemp("mock-apis") / "state") as cloud:
        ep = cloud.endpoints
        _post(f"{ep.control}/mock/v1/projects",
              {"projectId": PROJECT, "projectNumber": NUMBER, "owner": OWNER})
        enable_services(ep, PROJECT, _token(ep))  # a new project has them off, as at Google
        yield cloud


def _token(ep: MockEndpoints, principal: str = OWNER) -> str:
    return str(_post(f"{ep.control}/mock/v1/ownerTokens", {"principal": principal})[
        "access_token"])


def _session(ep: MockEndpoints, principal: str = OWNER) -> AuthorizedSession:
    return AuthorizedSession(Credentials(_token(ep, principal)))  # type: ignore[no-untyped-call]


def test_a_disabled_api_is_googles_service_disabled_until_enabled(mock: MockCloud) -> None:
    ep = mock.endpoints
    session = _session(ep)
    service = f"{ep.apis}/v1/projects/{PROJECT}/services/cloudkms.googleapis.com"
    assert session.get(service).json()["state"] == "ENABLED"
    mock.inject({"fault": "api-disabled", "project": PROJECT,
                 "service": "cloudkms.googleapis.com"})
    assert session.get(service).json()["state"] == "DISABLED"
    refused = session.get(f"{ep.kms}/v1/projects/{PROJECT}/locations/global/keyRings/x")
    error = gexc.from_http_response(refused)  # type: ignore[no-untyped-call]
    assert isinstance(error, gexc.Forbidden) and error.reason == "SERVICE_DISABLED"
    assert error.metadata == {"service": "cloudkms.googleapis.com",
                              "consumer": f"projects/{NUMBER}"}
    assert session.post(f"{service}:enable", json={}).status_code == 200
    assert session.get(service).json()["state"] == "ENABLED"
    found = session.get(f"{ep.kms}/v1/projects/{PROJECT}/locations/global/keyRings/x")
    assert found.status_code == 404  # the API answers again: the ring simply does not exist


def test_only_owners_read_services_and_the_project_policy(mock: MockCloud) -> None:
    ep = mock.endpoints
    stranger = _session(ep, "user:stranger@apis.example")
    assert stranger.get(
        f"{ep.apis}/v1/projects/{PROJECT}/services/storage.googleapis.com").status_code == 403
    assert stranger.post(f"{ep.apis}/v1/projects/{PROJECT}:getIamPolicy",
                         json={}).status_code == 403
    policy = _session(ep).post(f"{ep.apis}/v1/projects/{PROJECT}:getIamPolicy", json={}).json()
    assert {"role": "roles/owner", "members": [OWNER]} in policy["bindings"]
    stale = {"policy": {"bindings": [], "etag": "BwY999999999="}}
    assert _session(ep).post(f"{ep.apis}/v1/projects/{PROJECT}:setIamPolicy",
                             json=stale).status_code == 409


def test_the_token_endpoint_refreshes_only_its_own_refresh_tokens(mock: MockCloud) -> None:
    ep = mock.endpoints
    issued = _post(f"{ep.control}/mock/v1/refreshTokens", {"principal": OWNER})["refresh_token"]

    def credentials(refresh: str) -> Any:
        return external_account_authorized_user.Credentials(  # type: ignore[no-untyped-call]
            audience="//iam.googleapis.com/locations/global/workforcePools/t/providers/x",
            refresh_token=refresh, token_url=f"{ep.apis}/token",
            client_id="tests.example", client_secret="not-a-secret",
        )

    good = credentials(issued)
    good.refresh(Request())  # type: ignore[no-untyped-call]
    assert good.token and good.token != issued
    answer = AuthorizedSession(good).get(  # type: ignore[no-untyped-call]
        f"{ep.apis}/v1/projects/{PROJECT}/services/iam.googleapis.com")
    assert answer.json()["state"] == "ENABLED"
    with pytest.raises(auth_exc.OAuthError, match="invalid_grant"):
        credentials(issued + "x").refresh(Request())  # type: ignore[no-untyped-call]


def test_compute_reports_the_quota_it_enforces(mock: MockCloud) -> None:
    ep = mock.endpoints
    regions = compute_v1.RegionsClient(
        credentials=Credentials(_token(ep)),  # type: ignore[no-untyped-call]
        transport="rest", client_options=ClientOptions(api_endpoint=ep.compute),
    )
    quotas = {q.metric: q for q in regions.get(project=PROJECT, region="europe-west4").quotas}
    assert quotas["N2D_CPUS"].limit == 64 and quotas["N2D_CPUS"].usage == 0
    mock.inject({"fault": "quota-exceeded", "project": PROJECT, "metric": "C3_CPUS",
                 "limit": 3})
    quotas = {q.metric: q for q in regions.get(project=PROJECT, region="europe-west4").quotas}
    assert quotas["C3_CPUS"].limit == 3 and quotas["N2D_CPUS"].limit == 64


def test_the_fault_endpoint_refuses_an_unknown_fault(mock: MockCloud) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        _post(f"{mock.endpoints.control}/mock/v1/faults", {"fault": "meteor"})
    assert info.value.code == 400
    assert "api-disabled" in info.value.read().decode()


def test_a_disabled_compute_api_reaches_the_launcher_with_the_enable_command(
    mock: MockCloud,
) -> None:
    ep = mock.endpoints
    mock.inject({"fault": "api-disabled", "project": PROJECT,
                 "service": "compute.googleapis.com"})
    launcher = ConfidentialSpaceLauncher(
        VmSettings(project=PROJECT, zone="us-central1-a",
                   service_account=f"runner@{PROJECT}.iam.gserviceaccount.com",
                   image_reference=f"repo/eval@sha256:{'ab' * 32}"),
        credentials=Credentials(_token(ep)),  # type: ignore[no-untyped-call]
        api_endpoint=ep.compute,
    )
    location = {"uri": f"gs://{PROJECT}-sealbench/x/",
                "kms_key": f"projects/{PROJECT}/locations/global/keyRings/r/cryptoKeys/k",
                "pool_provider": f"projects/{NUMBER}/locations/global/workloadIdentityPools/"
                                 "sealbench/providers/attestation"}
    digest = "sha256:" + "11" * 32
    spec = RunSpec(  # never reaches a VM
        run_id="r1", benchmark_id="1", metrics_version="brats-2023-gli/1",
        dataset=AssetLocation(asset_id="d", **location),
        model=AssetLocation(asset_id="m", **location),
        result_uri=f"gs://{PROJECT}-sealbench/results/r1",
        recipient_public_key=base64.b64encode(bytes(32)).decode(),
        data_digest=digest, model_digest=digest, recipient_digest=digest,
    )
    with pytest.raises(ComputeNotFound) as info:
        launcher.start(spec)
    assert f"Compute Engine API is disabled in project {PROJECT}" in str(info.value)
    assert info.value.hint == (
        "gcloud services enable compute.googleapis.com confidentialcomputing.googleapis.com "
        f"--project {PROJECT}"
    )
