"""Platform-neutral verification of attestation tokens (signed JWTs): signature against a JWKS,
time, audience and issuer. What the claims *say* (the claim schema of one TEE platform and its
rules: debug state, hardware, image, overrides) is the platform's business
(:class:`sealbench.platforms.platform.Platform`; Confidential Space's in
:mod:`sealbench.gcp.confidential_space`).

:func:`verify_jwt` takes the compact JWS, a :class:`Jwks` and ``now``; it fetches nothing.
Order of checks: shape and size → header (``alg`` must be ``RS256``; ``none``, ``HS256`` and
everything else is refused before any key is looked at; no ``crit``) → key by ``kid`` →
RSASSA-PKCS1-v1_5/SHA-256 signature → ``iss`` → ``aud`` → ``exp``/``nbf``/``iat`` against the
injected clock with leeway → the payload as a read-only mapping. :func:`unverified_payload`
reads a payload without any of this, for a token that came over a trusted channel (the launcher
socket inside the TEE) or only to choose the issuer's key set.

Errors (see :mod:`sealbench.crypto.errors`) name the claim that failed, what was expected and
what was received; they never contain the token or its signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey, RSAPublicNumbers

from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.digest import Sha256Digest, parse_digest
from sealbench.crypto.errors import (
    AudienceMismatchError,
    IssuerMismatchError,
    KeyFormatError,
    TokenExpiredError,
    TokenInvalidError,
    TokenNotYetValidError,
)

__all__ = [
    "FAILURE_AUDIENCE",
    "MAX_JWKS_LENGTH",
    "MAX_TOKEN_LENGTH",
    "RESULT_AUDIENCE",
    "Jwks",
    "VerifiedPayload",
    "failure_nonce",
    "result_nonce",
    "show_claim",
    "unverified_payload",
    "verify_jwt",
]

#: A verified (or trusted-channel) token payload, read-only.
VerifiedPayload = Mapping[str, object]

RESULT_AUDIENCE: Final = "sealbench-result"
#: The audience of the token an enclave attests its own failure record with: never a result
#: token's (the registry verifies results at ``sealbench-result`` only) and never a pool's (pools
#: accept only the STS audience).
FAILURE_AUDIENCE: Final = "sealbench-failure"
#: The purpose member of a failure nonce's document, which a result nonce's never has.
_FAILURE_PURPOSE: Final = "sealbench-failure-v1"

#: Largest token accepted (real ones are 1-3 KiB); checked before anything is decoded.
MAX_TOKEN_LENGTH: Final = 64 * 1024
#: Largest JWKS document accepted.
MAX_JWKS_LENGTH: Final = 256 * 1024
MIN_RSA_BITS: Final = 2048

_SHOWN: Final = 80
_B64URL_RE: Final = re.compile(r"[A-Za-z0-9_-]+")


def show_claim(value: object) -> str:
    """A short, quoted rendering of a claim value for error messages (never the token)."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _b64url_decode(part: str, what: str) -> bytes:
    """Strict unpadded base64url: any other character (which lenient decoders skip, making
    tokens malleable) or an impossible length is refused."""
    if not _B64URL_RE.fullmatch(part) or len(part) % 4 == 1:
        raise TokenInvalidError(f"token {what} is not unpadded base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64url_uint(value: object, what: str) -> int:
    if not isinstance(value, str) or not value:
        raise KeyFormatError(f"JWKS key member {what!r} must be a base64url string")
    padded = value + "=" * (-len(value) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded)
    except (binascii.Error, ValueError):
        raise KeyFormatError(f"JWKS key member {what!r} is not base64url") from None
    return int.from_bytes(raw, "big")


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def _json_object(raw: bytes, what: str) -> dict[str, object]:
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, ValueError):
        raise TokenInvalidError(f"token {what} is not a JSON object") from None
    if not isinstance(value, dict):
        raise TokenInvalidError(f"token {what} is not a JSON object")
    return value


@dataclass(frozen=True)
class Jwks:
    """A JSON Web Key Set reduced to what RS256 verification needs: ``kid`` → RSA public key.

    Only ``kty == "RSA"`` keys are kept (other key types cannot verify RS256 and are ignored);
    a key that says ``use`` other than ``sig`` or ``alg`` other than ``RS256`` is dropped too.
    Malformed RSA keys, keys under 2048 bits and duplicate ``kid`` values raise
    :class:`KeyFormatError`.
    """

    keys: Mapping[str, RSAPublicKey]

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", MappingProxyType(dict(self.keys)))

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, object]) -> Jwks:
        if isinstance(data, bytes | str):
            if len(data) > MAX_JWKS_LENGTH:
                raise KeyFormatError(f"JWKS larger than {MAX_JWKS_LENGTH} bytes")
            try:
                parsed = json.loads(data, object_pairs_hook=_reject_duplicates)
            except ValueError:
                raise KeyFormatError("JWKS is not valid JSON") from None
        else:
            parsed = data
        if not isinstance(parsed, Mapping) or not isinstance(parsed.get("keys"), list):
            raise KeyFormatError("JWKS must be an object with a 'keys' array")
        keys: dict[str, RSAPublicKey] = {}
        for jwk in parsed["keys"]:
            if not isinstance(jwk, Mapping):
                raise KeyFormatError("JWKS 'keys' entries must be objects")
            if jwk.get("kty") != "RSA":
                continue
            if jwk.get("use", "sig") != "sig" or jwk.get("alg", "RS256") != "RS256":
                continue
            kid = jwk.get("kid")
            if not isinstance(kid, str) or not kid:
                raise KeyFormatError("JWKS RSA key without a 'kid'")
            if kid in keys:
                raise KeyFormatError(f"JWKS has two keys with kid {kid!r}")
            n = _b64url_uint(jwk.get("n"), "n")
            e = _b64url_uint(jwk.get("e"), "e")
            try:
                key = RSAPublicNumbers(e, n).public_key()
            except ValueError:
                raise KeyFormatError(f"JWKS key {kid!r} is not a valid RSA public key") from None
            keys[kid] = key
        return cls.from_keys(keys)

    @classmethod
    def from_keys(cls, keys: Mapping[str, RSAPublicKey]) -> Jwks:
        for kid, key in keys.items():
            if key.key_size < MIN_RSA_BITS:
                raise KeyFormatError(
                    f"JWKS key {kid!r}: expected at least {MIN_RSA_BITS} bits, "
                    f"received {key.key_size}"
                )
        return cls(keys=keys)

    def to_json(self) -> bytes:
        """The set as a JWKS document (``kty``, ``alg``, ``use``, ``kid``, ``n``, ``e``)."""

        def b64(value: int) -> str:
            raw = value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

        entries = []
        for kid, key in sorted(self.keys.items()):
            numbers = key.public_numbers()
            entries.append(
                {
                    "alg": "RS256",
                    "e": b64(numbers.e),
                    "kid": kid,
                    "kty": "RSA",
                    "n": b64(numbers.n),
                    "use": "sig",
                }
            )
        return canonical_json({"keys": entries})

    def get(self, kid: str) -> RSAPublicKey:
        try:
            return self.keys[kid]
        except KeyError:
            raise TokenInvalidError(f"token key id {show_claim(kid)} is not in the JWKS") from None


def _int_claim(payload: Mapping[str, object], name: str) -> int:
    value = payload.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenInvalidError(
            f"claim {name!r}: expected an integer, received {show_claim(value)}"
        )
    return value


def _parts(token: str) -> tuple[str, str, str]:
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        raise TokenInvalidError(f"token must be a string of at most {MAX_TOKEN_LENGTH} chars")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenInvalidError(
            f"token must be a compact JWS of 3 parts, received {len(parts)} parts"
        )
    return parts[0], parts[1], parts[2]


def unverified_payload(token: str) -> VerifiedPayload:
    """The payload of a compact JWS, **not verified**: only for a token that came over a trusted
    channel (the launcher socket inside the TEE) or to pick the issuer's key set. Raises
    :class:`TokenInvalidError` when it is not a compact JWS with a JSON-object payload."""
    _, payload_b64, _ = _parts(token)
    return MappingProxyType(_json_object(_b64url_decode(payload_b64, "payload"), "payload"))


def verify_jwt(
    token: str,
    jwks: Jwks,
    *,
    issuer: str,
    audience: str,
    now: float,
    leeway: float = 30.0,
) -> VerifiedPayload:
    """Verify a compact RS256 JWS (signature, issuer, audience, time) and return its payload, or
    raise an :class:`~sealbench.crypto.errors.AttestationError` subclass naming what failed.
    The payload's other claims are not looked at: a platform maps them to its claim schema."""
    header_b64, payload_b64, signature_b64 = _parts(token)
    header = _json_object(_b64url_decode(header_b64, "header"), "header")
    alg = header.get("alg")
    if alg != "RS256":
        raise TokenInvalidError(f"token header 'alg': expected 'RS256', received {show_claim(alg)}")
    if "crit" in header:
        raise TokenInvalidError("token header 'crit' names extensions this verifier lacks")
    kid = header.get("kid")
    if not isinstance(kid, str):
        raise TokenInvalidError(
            f"token header 'kid': expected a string, received {show_claim(kid)}"
        )
    key = jwks.get(kid)
    signature = _b64url_decode(signature_b64, "signature")
    try:
        key.verify(
            signature,
            f"{header_b64}.{payload_b64}".encode("ascii"),
            padding.PKCS1v15(),
            hashes.SHA256(),
        )
    except (InvalidSignature, UnicodeEncodeError):
        raise TokenInvalidError("token signature does not verify") from None

    payload = _json_object(_b64url_decode(payload_b64, "payload"), "payload")
    if payload.get("iss") != issuer:
        raise IssuerMismatchError(
            f"claim 'iss': expected {issuer!r}, received {show_claim(payload.get('iss'))}"
        )
    if payload.get("aud") != audience:
        raise AudienceMismatchError(
            f"claim 'aud': expected {audience!r}, received {show_claim(payload.get('aud'))}"
        )
    exp = _int_claim(payload, "exp")
    nbf = _int_claim(payload, "nbf")
    iat = _int_claim(payload, "iat")
    if now > exp + leeway:
        raise TokenExpiredError(
            f"claim 'exp': expected at least {now:.0f} (-{leeway:g}s), received {exp}"
        )
    if nbf > now + leeway:
        raise TokenNotYetValidError(
            f"claim 'nbf': expected at most {now:.0f} (+{leeway:g}s), received {nbf}"
        )
    if iat > now + leeway:
        raise TokenNotYetValidError(
            f"claim 'iat': expected at most {now:.0f} (+{leeway:g}s), received {iat}"
        )
    return MappingProxyType(payload)


def result_nonce(summary: Mapping[str, object], sealed_result_digest: Sha256Digest) -> str:
    """The ``eat_nonce`` a result token must carry: hex SHA-256 over the canonical JSON
    ``{"sealed_result_sha256": <digest>, "summary": <summary>}`` (64 characters, inside the
    launcher's 10-74 byte nonce limit)."""
    digest = parse_digest(sealed_result_digest)
    document = canonical_json({"sealed_result_sha256": digest, "summary": dict(summary)})
    return hashlib.sha256(document).hexdigest()


def failure_nonce(record: bytes) -> str:
    """The ``eat_nonce`` a failure token must carry: hex SHA-256 over the canonical JSON
    ``{"failure_record_sha256": <sha256:hex of record>, "purpose": "sealbench-failure-v1"}``,
    where ``record`` is the exact bytes of ``failure.json`` (canonical JSON). Domain-separated
    from :func:`result_nonce`: its document has other members, so no failure record and no
    (summary, sealed result) pair share a nonce, and the two tokens' audiences differ too."""
    document = canonical_json({
        "failure_record_sha256": "sha256:" + hashlib.sha256(record).hexdigest(),
        "purpose": _FAILURE_PURPOSE,
    })
    return hashlib.sha256(document).hexdigest()
