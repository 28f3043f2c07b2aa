"""Confidential Space attestation tokens: verification (the platform-neutral JWT checks of
:mod:`sealbench.crypto.attestation` followed by the Confidential Space claim schema) and the
sealbench policy on them (:mod:`sealbench.gcp.confidential_space`), one test per attack.

Tokens are signed here with a test RSA key by PyJWT (an independent JWS implementation); forged
ones are assembled by hand. The two real Confidential Space payloads in
``tests/vectors/confidential_space_example_tokens.json`` are re-signed with the test key.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from sealbench.crypto import attestation as at
from sealbench.crypto.errors import (
    AudienceMismatchError,
    IssuerMismatchError,
    KeyFormatError,
    PolicyViolationError,
    TokenExpiredError,
    TokenInvalidError,
    TokenNotYetValidError,
)
from sealbench.gcp import confidential_space as cs

KID = "test-kid-1"
NOW = 1_800_000_000
IMAGE = "sha256:" + "1" * 64
DATA = "sha256:" + "d" * 64
MODEL = "sha256:" + "e" * 64
RECIPIENT = "sha256:" + "f" * 64
NONCE = "a" * 64


EXAMPLES_FILE = Path(__file__).parents[2] / "vectors" / "confidential_space_example_tokens.json"


EXAMPLES: dict[str, Any] = json.loads(EXAMPLES_FILE.read_text())["tokens"]


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def jwks(signing_key: rsa.RSAPrivateKey) -> at.Jwks:
    # Round-trip through the JWKS JSON form so Jwks.from_json is exercised on every test.
    return at.Jwks.from_json(at.Jwks.from_keys({KID: signing_key.public_key()}).to_json())


def production_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "aud": at.RESULT_AUDIENCE,
        "iss": cs.CONFIDENTIAL_SPACE_ISSUER,
        "sub": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/i",
        "iat": NOW - 60,
        "nbf": NOW - 60,
        "exp": NOW + 3540,
        "eat_nonce": NONCE,
        "secboot": True,
        "oemid": 11129,
        "hwmodel": "GCP_AMD_SEV",
        "swname": "CONFIDENTIAL_SPACE",
        "swversion": ["251001"],
        "dbgstat": "disabled-since-boot",
        "submods": {
            "confidential_space": {"support_attributes": ["LATEST", "STABLE", "USABLE"]},
            "container": {
                "image_reference": "europe-docker.pkg.dev/p/r/eval@" + IMAGE,
                "image_digest": IMAGE,
                "image_id": "sha256:" + "2" * 64,
                "restart_policy": "Never",
                "args": ["/usr/bin/sealbench-enclave"],
                "env": {"PATH": "/usr/bin", "SEALBENCH_DATA_DIGEST": DATA},
                "env_override": {
                    "SEALBENCH_DATA_DIGEST": DATA,
                    "SEALBENCH_MODEL_DIGEST": MODEL,
                    "SEALBENCH_RECIPIENT_DIGEST": RECIPIENT,
                },
                "cmd_override": None,
            },
            "gce": {
                "zone": "europe-west4-a",
                "project_id": "hospital",
                "project_number": "123",
                "instance_name": "eval",
                "instance_id": "42",
            },
        },
        "google_service_accounts": ["runner@hospital.iam.gserviceaccount.com"],
        "a_claim_google_adds_next_year": {"x": 1},
    }
    payload.update(changes)
    return payload


def sign(key: rsa.RSAPrivateKey, payload: dict[str, Any], kid: str = KID) -> str:
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def verify(token: str, jwks: at.Jwks, audience: str = at.RESULT_AUDIENCE) -> cs.AttestationClaims:
    return cs.verify_token(
        token, jwks, issuer=cs.CONFIDENTIAL_SPACE_ISSUER, audience=audience, now=NOW
    )


POLICY = cs.AttestationPolicy(
    allowed_image_digests=frozenset({IMAGE}),
    expected_env_overrides={
        "SEALBENCH_DATA_DIGEST": DATA,
        "SEALBENCH_MODEL_DIGEST": MODEL,
        "SEALBENCH_RECIPIENT_DIGEST": RECIPIENT,
    },
    expected_nonce=NONCE,
)


def with_container(**changes: Any) -> dict[str, Any]:
    payload = production_payload()
    payload["submods"]["container"].update(changes)
    return payload


# -- the happy path ------------------------------------------------------------------------------


def test_production_token_verifies_and_passes_policy(signing_key: Any, jwks: at.Jwks) -> None:
    claims = verify(sign(signing_key, production_payload()), jwks)
    assert claims.eat_nonce == (NONCE,)
    assert claims.submods.container.image_digest == IMAGE
    assert claims.submods.gce is not None and claims.submods.gce.project_number == "123"
    POLICY.check(claims)


def test_nonce_list_is_normalised(signing_key: Any, jwks: at.Jwks) -> None:
    claims = verify(sign(signing_key, production_payload(eat_nonce=["x" * 10, NONCE])), jwks)
    assert claims.eat_nonce == ("x" * 10, NONCE)
    POLICY.check(claims)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_real_tokens_parse_but_debug_image_rejected(
    signing_key: Any, jwks: at.Jwks, name: str
) -> None:
    """Both real Confidential Space payloads fit the claims model; both come from debug images,
    which the production policy refuses on ``dbgstat`` even when their image is allowed."""
    payload = EXAMPLES[name]["payload"]
    claims = cs.verify_token(
        sign(signing_key, payload),
        jwks,
        issuer=cs.CONFIDENTIAL_SPACE_ISSUER,
        audience=payload["aud"],
        now=payload["iat"] + 5,
    )
    assert claims.dbgstat == "enabled"
    assert claims.swversion == tuple(payload["swversion"])
    assert claims.submods.confidential_space is not None
    assert claims.submods.confidential_space.support_attributes is None
    policy = cs.AttestationPolicy(
        allowed_image_digests=frozenset({payload["submods"]["container"]["image_digest"]})
    )
    with pytest.raises(PolicyViolationError) as info:
        policy.check(claims)
    assert info.value.claim == "dbgstat"
    assert info.value.received == "'enabled'"


# -- attacks on the token -----------------------------------------------------------------------


def test_debug_image_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    claims = verify(sign(signing_key, production_payload(dbgstat="enabled")), jwks)
    with pytest.raises(PolicyViolationError, match="dbgstat"):
        POLICY.check(claims)


@pytest.mark.parametrize("hwmodel", ["GCP_SHIELDED_VM", "GCP_AMD_SEV_ES", "INTEL_TDX", ""])
def test_token_from_non_confidential_hardware_rejected(
    signing_key: Any, jwks: at.Jwks, hwmodel: str
) -> None:
    claims = verify(sign(signing_key, production_payload(hwmodel=hwmodel)), jwks)
    with pytest.raises(PolicyViolationError, match="hwmodel") as info:
        POLICY.check(claims)
    assert info.value.claim == "hwmodel"


@pytest.mark.parametrize("hwmodel", sorted(cs.CONFIDENTIAL_HWMODELS))
def test_confidential_hardware_accepted(signing_key: Any, jwks: at.Jwks, hwmodel: str) -> None:
    POLICY.check(verify(sign(signing_key, production_payload(hwmodel=hwmodel)), jwks))


def test_token_without_secure_boot_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    claims = verify(sign(signing_key, production_payload(secboot=False)), jwks)
    with pytest.raises(PolicyViolationError, match="secboot"):
        POLICY.check(claims)


def test_forged_signature_rejected(jwks: at.Jwks) -> None:
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TokenInvalidError, match="signature"):
        verify(sign(attacker, production_payload()), jwks)


def test_signature_stripped_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    header, payload, _ = sign(signing_key, production_payload()).split(".")
    for token in (f"{header}.{payload}.", f"{header}.{payload}", f"{header}.{payload}.AAAA"):
        with pytest.raises(TokenInvalidError):
            verify(token, jwks)


def test_unknown_kid_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    with pytest.raises(TokenInvalidError, match="key id"):
        verify(sign(signing_key, production_payload(), kid="rotated-away"), jwks)


def test_alg_none_rejected(jwks: at.Jwks) -> None:
    header = b64(json.dumps({"alg": "none", "kid": KID, "typ": "JWT"}).encode())
    payload = b64(json.dumps(production_payload()).encode())
    for token in (f"{header}.{payload}.", f"{header}.{payload}.c2ln"):
        with pytest.raises(TokenInvalidError, match="alg"):
            verify(token, jwks)


def test_hs256_confusion_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    """The classic confusion: HMAC-sign with the *public* RSA key as the secret."""
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64(json.dumps({"alg": "HS256", "kid": KID, "typ": "JWT"}).encode())
    payload = b64(json.dumps(production_payload()).encode())
    mac = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    with pytest.raises(TokenInvalidError, match="alg"):
        verify(f"{header}.{payload}.{b64(mac)}", jwks)


def test_other_rsa_algorithms_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    for alg in ("RS512", "PS256"):
        token = jwt.encode(production_payload(), signing_key, algorithm=alg, headers={"kid": KID})
        with pytest.raises(TokenInvalidError, match="alg"):
            verify(token, jwks)


def test_expired_token_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    token = sign(signing_key, production_payload(iat=NOW - 4000, nbf=NOW - 4000, exp=NOW - 31))
    with pytest.raises(TokenExpiredError, match="exp"):
        verify(token, jwks)
    within_leeway = production_payload(iat=NOW - 4000, nbf=NOW - 4000, exp=NOW - 29)
    verify(sign(signing_key, within_leeway), jwks)


def test_not_yet_valid_token_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    with pytest.raises(TokenNotYetValidError, match="nbf"):
        verify(sign(signing_key, production_payload(nbf=NOW + 31)), jwks)
    with pytest.raises(TokenNotYetValidError, match="iat"):
        verify(sign(signing_key, production_payload(iat=NOW + 31)), jwks)
    verify(sign(signing_key, production_payload(nbf=NOW + 29, iat=NOW + 29)), jwks)


def test_missing_time_claims_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    for name in ("exp", "nbf", "iat"):
        payload = production_payload()
        del payload[name]
        with pytest.raises(TokenInvalidError, match=name):
            verify(sign(signing_key, payload), jwks)
    with pytest.raises(TokenInvalidError, match="exp"):
        verify(sign(signing_key, production_payload(exp=str(NOW + 100))), jwks)


def test_wrong_issuer_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    for iss in ("https://accounts.google.com", cs.CONFIDENTIAL_SPACE_ISSUER + "/"):
        with pytest.raises(IssuerMismatchError, match="iss"):
            verify(sign(signing_key, production_payload(iss=iss)), jwks)
    payload = production_payload()
    del payload["iss"]
    with pytest.raises(IssuerMismatchError, match="iss"):
        verify(sign(signing_key, payload), jwks)


def test_wrong_audience_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    with pytest.raises(AudienceMismatchError, match="aud"):
        verify(sign(signing_key, production_payload(aud=cs.STS_AUDIENCE)), jwks)
    with pytest.raises(AudienceMismatchError, match="aud"):
        verify(sign(signing_key, production_payload(aud=[at.RESULT_AUDIENCE, "x"])), jwks)


def test_payload_edited_after_signing_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    header, _, signature = sign(signing_key, production_payload(dbgstat="enabled")).split(".")
    edited = b64(json.dumps(production_payload()).encode())
    with pytest.raises(TokenInvalidError, match="signature"):
        verify(f"{header}.{edited}.{signature}", jwks)


def test_header_edited_after_signing_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    _, payload, signature = sign(signing_key, production_payload()).split(".")
    header = b64(json.dumps({"alg": "RS256", "kid": KID, "typ": "JWT", "x": 1}).encode())
    with pytest.raises(TokenInvalidError, match="signature"):
        verify(f"{header}.{payload}.{signature}", jwks)


def test_critical_header_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    token = jwt.encode(
        production_payload(), signing_key, algorithm="RS256", headers={"kid": KID, "crit": ["b64"]}
    )
    with pytest.raises(TokenInvalidError, match="crit"):
        verify(token, jwks)


def test_duplicate_claim_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    """A payload with two ``dbgstat`` members would mean different things to different
    parsers; it is refused even with a valid signature."""
    header = b64(json.dumps({"alg": "RS256", "kid": KID}).encode())
    body = json.dumps(production_payload())[:-1] + ', "dbgstat": "enabled"}'
    payload = b64(body.encode())
    signature = signing_key.sign(
        f"{header}.{payload}".encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )
    with pytest.raises(TokenInvalidError, match="payload"):
        verify(f"{header}.{payload}.{b64(signature)}", jwks)


@pytest.mark.parametrize(
    "token", ["", "a.b", "a.b.c.d", "!!!.e30.e30", "e30.e30.e30", "W10.e30.e30", "x" * 70000]
)
def test_malformed_token_rejected(jwks: at.Jwks, token: str) -> None:
    with pytest.raises(TokenInvalidError):
        verify(token, jwks)


def test_malformed_claims_rejected_without_echoing_values(signing_key: Any, jwks: at.Jwks) -> None:
    secret_looking = "ya29.this-must-not-appear-in-errors"
    payload = production_payload(secboot=secret_looking)
    with pytest.raises(TokenInvalidError) as info:
        verify(sign(signing_key, payload), jwks)
    assert "secboot" in str(info.value)
    assert secret_looking not in str(info.value)


def test_errors_never_contain_the_token(signing_key: Any, jwks: at.Jwks) -> None:
    token = sign(signing_key, production_payload(aud="someone-else"))
    with pytest.raises(AudienceMismatchError) as info:
        verify(token, jwks)
    for part in token.split("."):
        assert part not in str(info.value)


# -- attacks the policy stops --------------------------------------------------------------------


def _claims(signing_key: Any, jwks: at.Jwks, payload: dict[str, Any]) -> cs.AttestationClaims:
    return verify(sign(signing_key, payload), jwks)


def test_image_digest_not_allowed_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    other = "sha256:" + "9" * 64
    claims = _claims(signing_key, jwks, with_container(image_digest=other))
    with pytest.raises(PolicyViolationError) as info:
        POLICY.check(claims)
    assert info.value.claim == "submods.container.image_digest"
    assert other in info.value.received


def test_not_confidential_space_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    claims = _claims(signing_key, jwks, production_payload(swname="GCE"))
    with pytest.raises(PolicyViolationError, match="swname"):
        POLICY.check(claims)


def test_cmd_override_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    claims = _claims(signing_key, jwks, with_container(cmd_override=["/bin/sh", "-c", "cat"]))
    with pytest.raises(PolicyViolationError) as info:
        POLICY.check(claims)
    assert info.value.claim == "submods.container.cmd_override"
    POLICY.check(_claims(signing_key, jwks, with_container(cmd_override=[])))


def test_env_override_mismatch_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    payload = production_payload()
    env = payload["submods"]["container"]["env_override"]
    env["SEALBENCH_MODEL_DIGEST"] = "sha256:" + "0" * 64
    with pytest.raises(PolicyViolationError) as info:
        POLICY.check(_claims(signing_key, jwks, payload))
    assert info.value.claim == "submods.container.env_override.SEALBENCH_MODEL_DIGEST"
    assert MODEL in info.value.expected


def test_env_override_missing_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    payload = production_payload()
    del payload["submods"]["container"]["env_override"]["SEALBENCH_DATA_DIGEST"]
    with pytest.raises(PolicyViolationError) as info:
        POLICY.check(_claims(signing_key, jwks, payload))
    assert info.value.received == "absent"
    no_overrides = with_container(env_override=None)
    with pytest.raises(PolicyViolationError, match="absent"):
        POLICY.check(_claims(signing_key, jwks, no_overrides))


def test_unlisted_env_override_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    payload = production_payload()
    payload["submods"]["container"]["env_override"]["LD_PRELOAD"] = "/tmp/x.so"
    claims = _claims(signing_key, jwks, payload)
    with pytest.raises(PolicyViolationError, match="LD_PRELOAD") as info:
        POLICY.check(claims)
    assert info.value.claim == "submods.container.env_override"
    lenient = cs.AttestationPolicy(
        allowed_image_digests=POLICY.allowed_image_digests,
        expected_env_overrides=POLICY.expected_env_overrides,
        allowed_extra_env_overrides=frozenset({"LD_PRELOAD"}),
    )
    lenient.check(claims)


def test_missing_stable_support_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    for space in ({"support_attributes": ["EXPERIMENTAL"]}, {"monitoring_enabled": {}}, None):
        payload = production_payload()
        if space is None:
            del payload["submods"]["confidential_space"]
        else:
            payload["submods"]["confidential_space"] = space
        with pytest.raises(PolicyViolationError) as info:
            POLICY.check(_claims(signing_key, jwks, payload))
        assert info.value.claim == "submods.confidential_space.support_attributes"


def test_nonce_mismatch_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    for nonce in ("b" * 64, ["b" * 64, "c" * 64]):
        claims = _claims(signing_key, jwks, production_payload(eat_nonce=nonce))
        with pytest.raises(PolicyViolationError, match="eat_nonce"):
            POLICY.check(claims)
    payload = production_payload()
    del payload["eat_nonce"]
    with pytest.raises(PolicyViolationError, match="eat_nonce"):
        POLICY.check(_claims(signing_key, jwks, payload))


def test_policy_without_allowed_images_refused() -> None:
    with pytest.raises(ValueError):
        cs.AttestationPolicy(allowed_image_digests=frozenset())
    with pytest.raises(ValueError):
        cs.AttestationPolicy(allowed_image_digests=frozenset({"latest"}))


def test_policy_is_immutable() -> None:
    env = {"SEALBENCH_DATA_DIGEST": DATA}
    policy = cs.AttestationPolicy(frozenset({IMAGE}), expected_env_overrides=env)
    env["SEALBENCH_DATA_DIGEST"] = "sha256:" + "0" * 64
    assert policy.expected_env_overrides["SEALBENCH_DATA_DIGEST"] == DATA
    with pytest.raises(TypeError):
        policy.expected_env_overrides["X"] = "y"  # type: ignore[index]


# -- JWKS ---------------------------------------------------------------------------------------


def test_jwks_refuses_small_duplicate_and_malformed_keys(signing_key: Any) -> None:
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(KeyFormatError, match="2048"):
        at.Jwks.from_keys({"k": small.public_key()})
    doc = json.loads(at.Jwks.from_keys({KID: signing_key.public_key()}).to_json())
    duplicated = {"keys": doc["keys"] * 2}
    with pytest.raises(KeyFormatError, match="two keys"):
        at.Jwks.from_json(json.dumps(duplicated))
    broken = copy.deepcopy(doc)
    broken["keys"][0]["n"] = 7
    with pytest.raises(KeyFormatError):
        at.Jwks.from_json(broken)
    for bad in (b"[]", b"{}", b"not json", {"keys": [1]}):
        with pytest.raises(KeyFormatError):
            at.Jwks.from_json(bad)


def test_jwks_ignores_keys_not_for_rs256(signing_key: Any) -> None:
    doc = json.loads(at.Jwks.from_keys({KID: signing_key.public_key()}).to_json())
    enc_key = dict(doc["keys"][0], kid="enc", use="enc")
    ec_key = {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AA", "y": "AA"}
    jwks = at.Jwks.from_json({"keys": [*doc["keys"], enc_key, ec_key]})
    assert set(jwks.keys) == {KID}


# -- result nonce -------------------------------------------------------------------------------


def test_result_nonce_binds_summary_and_sealed_result() -> None:
    summary = {"dice_mean": 0.87, "cases": 12}
    sealed = "sha256:" + "5" * 64
    nonce = at.result_nonce(summary, sealed)  # type: ignore[arg-type]
    expected_doc = (
        b'{"sealed_result_sha256":"sha256:' + b"5" * 64 + b'",'
        b'"summary":{"cases":12,"dice_mean":0.87}}'
    )
    assert nonce == hashlib.sha256(expected_doc).hexdigest()
    assert len(nonce) == 64
    assert at.result_nonce({**summary, "cases": 13}, sealed) != nonce  # type: ignore[arg-type]
    assert at.result_nonce(summary, "sha256:" + "6" * 64) != nonce  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        at.result_nonce(summary, "5" * 64)  # type: ignore[arg-type]


def test_non_canonical_base64_rejected(signing_key: Any, jwks: at.Jwks) -> None:
    """Lenient base64 decoders skip foreign characters, so one signed token would have many
    spellings; only the strict unpadded base64url form is accepted."""
    header, payload, signature = sign(signing_key, production_payload()).split(".")
    for token in (
        f"{header}.{payload}.{signature}=",
        f"{header}.{payload}.{signature[:10]}!{signature[10:]}",
        f"{header}.{payload}.{signature[:10]}\n{signature[10:]}",
        f"{header}=.{payload}.{signature}",
    ):
        with pytest.raises(TokenInvalidError, match="base64url"):
            verify(token, jwks)
    verify(f"{header}.{payload}.{signature}", jwks)
