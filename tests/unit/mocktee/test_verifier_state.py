"""The mock verifier's profiles, discovery and key persistence; the state directory's layout."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable

import pytest

from sealbench.crypto.attestation import Jwks
from sealbench.crypto.errors import IssuerMismatchError, PolicyViolationError
from sealbench.gcp.confidential_space import AttestationPolicy, verify_token
from sealbench.mocktee.cel import CelError, evaluate_string, explain_false
from sealbench.mocktee.identity import Identity
from sealbench.mocktee.state import MockState
from sealbench.mocktee.verifier import MockVerifier, WorkloadLaunch, build_claims

IMAGE = "sha256:" + "c" * 64


def test_production_and_debug_profiles_differ_as_real_tokens_do() -> None:
    launch = WorkloadLaunch(IMAGE, "ref")
    prod = build_claims(launch, issuer="i", audience="a", nonces=(), now=100)
    debug = build_claims(
        WorkloadLaunch(IMAGE, "ref", debug=True), issuer="i", audience="a", nonces=(), now=100
    )
    assert prod["dbgstat"] == "disabled-since-boot"
    assert prod["submods"]["confidential_space"]["support_attributes"] == [
        "LATEST",
        "STABLE",
        "USABLE",
    ]
    assert debug["dbgstat"] == "enabled"
    assert "support_attributes" not in debug["submods"]["confidential_space"]
    assert prod["exp"] - prod["iat"] == 3600 and prod["nbf"] == prod["iat"]
    assert prod["submods"]["container"]["env_override"] is None
    assert prod["submods"]["container"]["cmd_override"] is None


# The payload of a real Confidential Space default token (debug image, 2024; signature omitted),
# from a public repository's test fixtures, as recorded in the project's reference notes.
REAL_TOKEN_PAYLOAD = json.loads(
    """
{
 "aud": "https://sts.googleapis.com",
 "exp": 1716106629,
 "iat": 1716103029,
 "iss": "https://confidentialcomputing.googleapis.com",
 "nbf": 1716103029,
 "sub": "https://www.googleapis.com/compute/v1/projects/bionic-mercury-421809/zones/us-west1-b/instances/inference-demo",
 "secboot": true,
 "oemid": 11129,
 "hwmodel": "GCP_AMD_SEV",
 "swname": "CONFIDENTIAL_SPACE",
 "swversion": [
  "240402"
 ],
 "dbgstat": "enabled",
 "submods": {
  "confidential_space": {
   "monitoring_enabled": {
    "memory": false
   }
  },
  "container": {
   "image_reference": "asia-docker.pkg.dev/bionic-mercury-421809/aizel/aizel_inference:0.1.0",
   "image_digest": "sha256:01070a858de7f4874b3bbf69c0ab42862342b39d5c1b48c7ef55fb84231f8d31",
   "restart_policy": "Never",
   "image_id": "sha256:10f9741b10d698d9edae6cc3fcf1ba5cc8f10ab44b33f392e68cb9038a9bdb97",
   "env": {
    "HOSTNAME": "inference-demo",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
   },
   "args": [
    "/bin/sh",
    "-c",
    "/bin/bash bootstrap.sh"
   ]
  },
  "gce": {
   "zone": "us-west1-b",
   "project_id": "bionic-mercury-421809",
   "project_number": "991449629434",
   "instance_name": "inference-demo",
   "instance_id": "2385621892399900072"
  }
 },
 "google_service_accounts": [
  "991449629434-compute@developer.gserviceaccount.com"
 ]
}
"""
)


def test_claim_set_has_every_claim_of_a_real_token() -> None:
    real = REAL_TOKEN_PAYLOAD
    mock = build_claims(WorkloadLaunch(IMAGE, "ref"), issuer="i", audience="a", nonces=(), now=1)

    def keys(doc: object, prefix: str = "") -> set[str]:
        if not isinstance(doc, dict):
            return set()
        return {prefix + k for k in doc} | {
            x for k, v in doc.items() for x in keys(v, f"{prefix}{k}.")
        }

    assert keys(real) - keys(mock) == set()


def test_mock_tokens_verify_against_the_mock_jwks_only(
    verifier: MockVerifier, clock: Callable[[], float]
) -> None:
    token = verifier.mint(WorkloadLaunch(IMAGE, "ref"))
    jwks = Jwks.from_json(verifier.jwks())
    claims = verify_token(
        token, jwks, issuer=verifier.issuer, audience="https://sts.googleapis.com", now=clock()
    )
    AttestationPolicy(allowed_image_digests=frozenset({IMAGE})).check(claims)
    with pytest.raises(IssuerMismatchError):
        verify_token(
            token,
            jwks,
            issuer="https://confidentialcomputing.googleapis.com",
            audience="https://sts.googleapis.com",
            now=clock(),
        )
    debug = verify_token(
        verifier.mint(WorkloadLaunch(IMAGE, "ref", debug=True)),
        jwks,
        issuer=verifier.issuer,
        audience="https://sts.googleapis.com",
        now=clock(),
    )
    with pytest.raises(PolicyViolationError):
        AttestationPolicy(allowed_image_digests=frozenset({IMAGE})).check(debug)


def test_discovery_document_points_at_the_jwks(verifier: MockVerifier) -> None:
    config = verifier.openid_configuration()
    assert config["issuer"] == verifier.issuer
    assert config["jwks_uri"] == verifier.issuer + "/jwks"
    assert config["id_token_signing_alg_values_supported"] == ["RS256"]
    assert not verifier.issuer.startswith("https://confidentialcomputing.googleapis.com")


def test_signing_key_persists_with_owner_only_permissions(state: MockState) -> None:
    first = MockVerifier(state, "http://127.0.0.1:9")
    second = MockVerifier(MockState(state.state_dir), "http://127.0.0.1:9")
    assert first.kid == second.kid and first.jwks() == second.jwks()
    key_file = state.secret_path("verifier-signing-key.pem")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.secrets_dir.stat().st_mode) == 0o700


def test_access_tokens_persist_as_hashes_and_expire(
    state: MockState, clock: Callable[[], float]
) -> None:
    identity = Identity(state, clock)
    token, _ = identity.issue("user:a@example.org", lifetime=60)
    assert token not in (state.state_dir / "state.json").read_text()
    from sealbench.mocktee._http import Request

    request = Request("GET", "/", "/", {}, {"authorization": f"Bearer {token}"}, b"")
    restarted = Identity(MockState(state.state_dir), clock)
    assert getattr(restarted.authenticate(request), "principal", None) == "user:a@example.org"
    later = Identity(MockState(state.state_dir), lambda: clock() + 61)
    assert later.authenticate(request).status == 401  # type: ignore[union-attr]


def test_missing_claim_fails_cel_mapping_and_diagnosis_names_the_clause() -> None:
    with pytest.raises(CelError):
        evaluate_string(
            "assertion.submods.container.env_override.X",
            {"assertion": {"submods": {"container": {"env_override": None}}}},
        )
    why = explain_false(
        "assertion.a == 'x' && ('y' in assertion.b || false)", {"assertion": {"a": "x", "b": ["z"]}}
    )
    assert why == "clause is false: ('y' in assertion.b || false)"
