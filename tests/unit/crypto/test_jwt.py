"""Platform-neutral token verification (:func:`verify_jwt`): signature, issuer, audience and time,
and nothing about what the claims say, so a token of any TEE platform's schema verifies; the
platform maps it (tests/unit/platforms, tests/unit/gcp). Tokens are signed by PyJWT, an
independent implementation."""

from __future__ import annotations

from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from sealbench.crypto.attestation import Jwks, unverified_payload, verify_jwt
from sealbench.crypto.errors import (
    AudienceMismatchError,
    IssuerMismatchError,
    TokenExpiredError,
    TokenInvalidError,
)

NOW = 1_800_000_000
ISSUER = "https://sharedeus.eus.attest.azure.net"  # an Azure Attestation-shaped issuer
KID = "k1"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _token(key: rsa.RSAPrivateKey, **changes: Any) -> str:
    payload: dict[str, Any] = {
        "iss": ISSUER,
        "aud": "sealbench-result",
        "iat": NOW - 10,
        "nbf": NOW - 10,
        "exp": NOW + 600,
        # An Azure confidential-container claim set: nothing Confidential Space would accept.
        "x-ms-attestation-type": "sevsnpvm",
        "x-ms-sevsnpvm-hostdata": "ab" * 32,
    }
    payload.update(changes)
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": KID})


def _verify(key: rsa.RSAPrivateKey, token: str, **kw: Any) -> Any:
    jwks = Jwks.from_keys({KID: key.public_key()})
    args: dict[str, Any] = {"issuer": ISSUER, "audience": "sealbench-result", "now": NOW}
    args.update(kw)
    return verify_jwt(token, jwks, **args)


def test_any_platforms_claims_verify_and_come_back_read_only(key: rsa.RSAPrivateKey) -> None:
    payload = _verify(key, _token(key))
    assert payload["x-ms-attestation-type"] == "sevsnpvm"
    assert "swname" not in payload and "submods" not in payload
    with pytest.raises(TypeError):
        payload["iss"] = "https://elsewhere.example"


def test_foreign_issuer_refused(key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(IssuerMismatchError):
        _verify(key, _token(key, iss="https://attacker.example"))


def test_other_audience_refused(key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(AudienceMismatchError):
        _verify(key, _token(key, aud="https://sts.googleapis.com"))


def test_expired_token_refused(key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(TokenExpiredError):
        _verify(key, _token(key, exp=NOW - 31))


def test_key_of_another_signer_refused(key: rsa.RSAPrivateKey) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TokenInvalidError, match="signature"):
        _verify(key, _token(other))


def test_unverified_payload_reads_without_checking(key: rsa.RSAPrivateKey) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert unverified_payload(_token(other, exp=1))["iss"] == ISSUER
    for bad in ("a.b", "not a token", "e30.W10.c2ln"):  # the last: a JSON array payload
        with pytest.raises(TokenInvalidError):
            unverified_payload(bad)
