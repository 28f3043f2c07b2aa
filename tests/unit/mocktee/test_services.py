"""The mock's KMS, STS and IAM handlers called directly (no sockets): Google's error shapes,
integrity checks, etags, and authorization."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import google_crc32c
import pytest

from sealbench.crypto.attestation import Jwks
from sealbench.mocktee._http import Request, Response
from sealbench.mocktee.iam import MockIam
from sealbench.mocktee.identity import Identity
from sealbench.mocktee.kms import MockKms
from sealbench.mocktee.state import MockState
from sealbench.mocktee.sts import GRANT_TYPE, MockSts
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch
from tests.unit.mocktee.conftest import create_project_with_apis

MakeRequest = Callable[..., Request]
RING = "projects/p1/locations/global/keyRings/r"
KEY = f"{RING}/cryptoKeys/k"
OWNER = "user:owner@example.org"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _crc(data: bytes) -> str:
    return str(int(google_crc32c.value(data)))


def _json(response: Response) -> Any:
    return json.loads(response.body)


@pytest.fixture
def kms(state: MockState, identity: Identity, make_request: MakeRequest) -> tuple[MockKms, str]:
    create_project_with_apis(identity, state, "p1", "111", OWNER)
    token, _ = identity.issue(OWNER)
    service = MockKms(state, identity)
    assert (
        service.handle(
            make_request(
                "POST", "/v1/projects/p1/locations/global/keyRings", {}, token, {"keyRingId": "r"}
            )
        ).status
        == 200
    )
    assert (
        service.handle(
            make_request(
                "POST",
                f"/v1/{RING}/cryptoKeys",
                {"purpose": "ENCRYPT_DECRYPT"},
                token,
                {"cryptoKeyId": "k"},
            )
        ).status
        == 200
    )
    return service, token


def _encrypt(service: MockKms, make_request: MakeRequest, token: str, aad: bytes) -> bytes:
    response = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:encrypt",
            {
                "plaintext": _b64(b"dek" * 10),
                "additionalAuthenticatedData": _b64(aad),
                "plaintextCrc32c": _crc(b"dek" * 10),
            },
            token,
        )
    )
    body = _json(response)
    assert body["verifiedPlaintextCrc32c"] is True
    assert body["verifiedAdditionalAuthenticatedDataCrc32c"] is False
    assert body["name"] == f"{KEY}/cryptoKeyVersions/1"
    ciphertext = base64.b64decode(body["ciphertext"])
    assert body["ciphertextCrc32c"] == _crc(ciphertext)
    return ciphertext


def test_request_corrupted_in_transit_rejected_by_crc32c(
    kms: tuple[MockKms, str], make_request: MakeRequest
) -> None:
    service, token = kms
    response = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:encrypt",
            {"plaintext": _b64(b"dek"), "plaintextCrc32c": _crc(b"dek") + "1"},
            token,
        )
    )
    assert response.status == 400 and "checksum" in _json(response)["error"]["message"]


def test_ciphertext_bound_to_its_aad(kms: tuple[MockKms, str], make_request: MakeRequest) -> None:
    service, token = kms
    ciphertext = _encrypt(service, make_request, token, b"asset-1")
    ok = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:decrypt",
            {"ciphertext": _b64(ciphertext), "additionalAuthenticatedData": _b64(b"asset-1")},
            token,
        )
    )
    assert base64.b64decode(_json(ok)["plaintext"]) == b"dek" * 10
    swapped = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:decrypt",
            {"ciphertext": _b64(ciphertext), "additionalAuthenticatedData": _b64(b"asset-2")},
            token,
        )
    )
    assert swapped.status == 400 and _json(swapped)["error"]["status"] == "INVALID_ARGUMENT"
    flipped = bytearray(ciphertext)
    flipped[-1] ^= 1
    tampered = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:decrypt",
            {"ciphertext": _b64(bytes(flipped)), "additionalAuthenticatedData": _b64(b"asset-1")},
            token,
        )
    )
    assert tampered.status == 400


def test_request_without_bearer_token_unauthenticated(
    kms: tuple[MockKms, str], make_request: MakeRequest
) -> None:
    service, _ = kms
    response = service.handle(make_request("POST", f"/v1/{KEY}:decrypt", {"ciphertext": "AA=="}))
    assert response.status == 401 and _json(response)["error"]["status"] == "UNAUTHENTICATED"


def test_stranger_denied_decrypt_and_policy_change(
    kms: tuple[MockKms, str], identity: Identity, make_request: MakeRequest
) -> None:
    service, token = kms
    ciphertext = _encrypt(service, make_request, token, b"")
    stranger, _ = identity.issue("user:stranger@example.org")
    denied = service.handle(
        make_request("POST", f"/v1/{KEY}:decrypt", {"ciphertext": _b64(ciphertext)}, stranger)
    )
    error = _json(denied)["error"]
    assert denied.status == 403 and error["status"] == "PERMISSION_DENIED"
    assert "cloudkms.cryptoKeyVersions.useToDecrypt" in error["message"] and KEY in error["message"]
    grab = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:setIamPolicy",
            {
                "policy": {
                    "bindings": [
                        {
                            "role": "roles/cloudkms.cryptoKeyDecrypter",
                            "members": ["user:stranger@example.org"],
                        }
                    ]
                }
            },
            stranger,
        )
    )
    assert grab.status == 403


def test_stale_etag_policy_write_aborted(
    kms: tuple[MockKms, str], make_request: MakeRequest
) -> None:
    service, token = kms
    policy = _json(service.handle(make_request("GET", f"/v1/{KEY}:getIamPolicy", None, token)))
    first = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:setIamPolicy",
            {
                "policy": {
                    **policy,
                    "bindings": [{"role": "roles/cloudkms.viewer", "members": [OWNER]}],
                }
            },
            token,
        )
    )
    assert first.status == 200 and _json(first)["etag"] != policy["etag"]
    stale = service.handle(
        make_request("POST", f"/v1/{KEY}:setIamPolicy", {"policy": policy}, token)
    )
    assert stale.status == 409 and _json(stale)["error"]["status"] == "ABORTED"


def test_conditional_binding_refused_rather_than_ignored(
    kms: tuple[MockKms, str], make_request: MakeRequest
) -> None:
    service, token = kms
    response = service.handle(
        make_request(
            "POST",
            f"/v1/{KEY}:setIamPolicy",
            {
                "policy": {
                    "bindings": [
                        {
                            "role": "roles/cloudkms.cryptoKeyDecrypter",
                            "members": [OWNER],
                            "condition": {"expression": "true", "title": "t"},
                        }
                    ]
                }
            },
            token,
        )
    )
    assert response.status == 400


# -- STS -----------------------------------------------------------------------------------------

PROVIDER = "projects/111/locations/global/workloadIdentityPools/pool-a/providers/prov-a"


def _sts(
    state: MockState, identity: Identity, verifier: MockVerifier, clock: Callable[[], float]
) -> MockSts:
    with state.edit() as doc:
        doc["pools"][PROVIDER.split("/providers/")[0]] = {"disabled": False}
        doc["providers"][PROVIDER] = {
            "attributeMapping": {"google.subject": "assertion.submods.gce.instance_id"},
            "attributeCondition": "assertion.swname == 'CONFIDENTIAL_SPACE'",
            "oidc": {
                "issuerUri": verifier.issuer + "/",
                "allowedAudiences": ["https://sts.googleapis.com"],
            },
        }
    jwks = Jwks.from_json(verifier.jwks())
    return MockSts(state, identity, lambda: jwks, clock)


def _form(token: str, audience: str = "//iam.googleapis.com/" + PROVIDER) -> dict[str, str]:
    return {
        "grant_type": GRANT_TYPE,
        "audience": audience,
        "subject_token": token,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
    }


def test_sts_exchange_issues_an_opaque_expiring_token(
    state: MockState,
    identity: Identity,
    verifier: MockVerifier,
    clock: Callable[[], float],
    make_request: MakeRequest,
) -> None:
    sts = _sts(state, identity, verifier, clock)
    token = verifier.mint(WorkloadLaunch("sha256:" + "a" * 64, "ref"))
    response = sts.handle(make_request("POST", "/v1/token", form=_form(token)))
    body = _json(response)
    assert response.status == 200 and body["token_type"] == "Bearer"
    assert body["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert (
        0 < body["expires_in"] <= 3600
        and "." not in body["access_token"].split("mock-insecure.")[1]
    )
    # Only a hash of the access token is persisted.
    assert body["access_token"] not in (state.state_dir / "state.json").read_text()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"grant_type": "password"}, "unsupported_grant_type"),
        ({"audience": "projects/111/pools/x"}, "invalid_request"),
        (
            {
                "audience": "//iam.googleapis.com/projects/111/locations/global/"
                "workloadIdentityPools/pool-a/providers/nope"
            },
            "invalid_target",
        ),
        ({"subject_token": ""}, "invalid_request"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:saml2"}, "invalid_request"),
        ({"subject_token": "not.a.jwt"}, "invalid_grant"),
    ],
)
def test_malformed_sts_request_refused_with_google_error(
    state: MockState,
    identity: Identity,
    verifier: MockVerifier,
    clock: Callable[[], float],
    make_request: MakeRequest,
    change: dict[str, str],
    error: str,
) -> None:
    sts = _sts(state, identity, verifier, clock)
    form = {**_form(verifier.mint(WorkloadLaunch("sha256:" + "a" * 64, "ref"))), **change}
    response = sts.handle(make_request("POST", "/v1/token", form=form))
    assert response.status == 400 and _json(response)["error"] == error
    assert _json(response)["error_description"]


# -- IAM -----------------------------------------------------------------------------------------


def test_provider_with_invalid_cel_or_mapping_refused(
    state: MockState, identity: Identity, make_request: MakeRequest
) -> None:
    create_project_with_apis(identity, state, "p1", "111", OWNER)
    token, _ = identity.issue(OWNER)
    iam = MockIam(state, identity)
    base = "/v1/projects/111/locations/global/workloadIdentityPools"
    assert (
        iam.handle(
            make_request("POST", base, {}, token, {"workloadIdentityPoolId": "pool-a"})
        ).status
        == 200
    )
    good = {
        "attributeMapping": {"google.subject": "assertion.sub"},
        "oidc": {"issuerUri": "https://issuer.example/"},
    }
    for bad in (
        {**good, "attributeCondition": "assertion.swname == "},
        {**good, "attributeMapping": {"attribute.x": "assertion.sub"}},
        {**good, "attributeMapping": {"google.subject": "assertion.sub", "Bad-Key": "x"}},
        {**good, "oidc": {"issuerUri": "http://evil.example/"}},
        {**good, "unknownField": 1},
    ):
        response = iam.handle(
            make_request(
                "POST",
                f"{base}/pool-a/providers",
                bad,
                token,
                {"workloadIdentityPoolProviderId": "prov-a"},
            )
        )
        assert response.status == 400, bad
    created = iam.handle(
        make_request(
            "POST",
            f"{base}/pool-a/providers",
            good,
            token,
            {"workloadIdentityPoolProviderId": "prov-a"},
        )
    )
    assert _json(created)["done"] is True
    stranger, _ = identity.issue("user:stranger@example.org")
    patch = iam.handle(
        make_request(
            "PATCH",
            f"{base}/pool-a/providers/prov-a",
            {"attributeCondition": "true"},
            stranger,
            {"updateMask": "attributeCondition"},
        )
    )
    assert patch.status == 403


def test_condition_reading_a_missing_claim_denies(
    state: MockState,
    identity: Identity,
    verifier: MockVerifier,
    clock: Callable[[], float],
    make_request: MakeRequest,
) -> None:
    sts = _sts(state, identity, verifier, clock)
    with state.edit() as doc:
        doc["providers"][PROVIDER]["attributeCondition"] = (
            "'STABLE' in assertion.submods.confidential_space.support_attributes"
        )
    debug = verifier.mint(WorkloadLaunch("sha256:" + "a" * 64, "ref", debug=True))
    response = sts.handle(make_request("POST", "/v1/token", form=_form(debug)))
    body = _json(response)
    assert response.status == 400 and body["error"] == "unauthorized_client"
    assert "support_attributes" in body["error_description"]
    production = verifier.mint(WorkloadLaunch("sha256:" + "a" * 64, "ref"))
    assert sts.handle(make_request("POST", "/v1/token", form=_form(production))).status == 200
