"""The mock attestation verifier: an OIDC issuer of its own (never Google's) with an RSA-2048
signing key, ``/.well-known/openid-configuration``, a JWKS, and RS256 tokens carrying the full
Confidential Space claim set for a workload described by :class:`WorkloadLaunch`.

Profiles: a production image (``dbgstat: disabled-since-boot``, ``support_attributes``
``[LATEST, STABLE, USABLE]``) and a debug image (``dbgstat: enabled``, no ``support_attributes``),
exactly as the real verifier distinguishes them; a confidential-GPU launch (``gpu_cc_mode`` set)
runs the preview GPU image family, whose production tokens carry ``support_attributes``
``[EXPERIMENTAL]`` instead, and ``submods.nvidia_gpu.cc_mode``. TDX launches carry
``attester_tcb: [INTEL]`` as real TDX tokens do. INSECURE BY DESIGN: the signing key lives in the
state directory, and whoever calls :meth:`MockVerifier.mint` decides what the token claims; the
token proves nothing about hardware.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from sealbench.mocktee._http import Request, Response, google_error, json_response
from sealbench.mocktee.constants import MOCK_ZONE
from sealbench.mocktee.platform import MOCK_ENDPOINTS_MEMBER
from sealbench.mocktee.state import MockState, atomic_write

__all__ = [
    "DEFAULT_AUDIENCE",
    "MOCK_ENDPOINTS_MEMBER",
    "TOKEN_LIFETIME_S",
    "MockVerifier",
    "TokenMinter",
    "WorkloadLaunch",
    "build_claims",
]

_log = logging.getLogger("sealbench.mocktee")

DEFAULT_AUDIENCE = "https://sts.googleapis.com"

#: Real Confidential Space tokens live one hour.
TOKEN_LIFETIME_S = 3600
_KEY_FILE = "verifier-signing-key.pem"
_EAT_PROFILE = (
    "https://cloud.google.com/confidential-computing/confidential-space/docs/reference/token-claims"
)


@dataclass(frozen=True)
class WorkloadLaunch:
    """What the operator launched: the facts a real launcher measures and the verifier attests.

    ``env_overrides`` are the ``tee-env-*`` values; ``debug`` selects the debug image profile.
    ``gpu_cc_mode`` is the attached confidential GPU's mode (``ON``, ``OFF``, ``DEVTOOLS``;
    ``None``: no GPU): the VM then runs the preview GPU image (``confidential-space-preview-
    cgpu``), whose tokens say ``EXPERIMENTAL`` and never ``STABLE``.
    """

    image_digest: str
    image_reference: str
    env_overrides: Mapping[str, str] = field(default_factory=dict)
    debug: bool = False
    cmd_override: tuple[str, ...] | None = None
    image_id: str = "sha256:" + "0" * 64
    args: tuple[str, ...] = ("python", "-m", "sealbench.enclave")
    image_env: Mapping[str, str] = field(
        default_factory=lambda: {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        }
    )
    restart_policy: str = "Never"
    hwmodel: str = "GCP_AMD_SEV"
    secboot: bool = True
    swversion: str = "251001"
    project_id: str = "mock-operator-project"
    project_number: str = "100000000001"
    zone: str = MOCK_ZONE
    instance_name: str = "sealbench-mock-tee"
    instance_id: str = "7000000000000000001"
    service_accounts: tuple[str, ...] = ("runner@mock-operator-project.iam.gserviceaccount.com",)
    gpu_cc_mode: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "image_digest": self.image_digest,
            "image_reference": self.image_reference,
            "env_overrides": dict(self.env_overrides),
            "debug": self.debug,
            "cmd_override": list(self.cmd_override) if self.cmd_override is not None else None,
            "hwmodel": self.hwmodel,
            "secboot": self.secboot,
            "gpu_cc_mode": self.gpu_cc_mode,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkloadLaunch:
        allowed = {
            "image_digest",
            "image_reference",
            "env_overrides",
            "debug",
            "cmd_override",
            "hwmodel",
            "secboot",
            "gpu_cc_mode",
        }
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown launch fields: {sorted(unknown)}")
        env = data.get("env_overrides") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("env_overrides must map strings to strings")
        cmd = data.get("cmd_override")
        return cls(
            image_digest=str(data["image_digest"]),
            image_reference=str(data["image_reference"]),
            env_overrides=dict(env),
            debug=bool(data.get("debug", False)),
            cmd_override=tuple(str(c) for c in cmd) if cmd is not None else None,
            hwmodel=str(data.get("hwmodel", "GCP_AMD_SEV")),
            secboot=data.get("secboot", True) is True,
            gpu_cc_mode=None if data.get("gpu_cc_mode") is None else str(data["gpu_cc_mode"]),
        )


def build_claims(
    launch: WorkloadLaunch,
    *,
    issuer: str,
    audience: str,
    nonces: Sequence[str],
    now: int,
    lifetime: int = TOKEN_LIFETIME_S,
) -> dict[str, Any]:
    """The claim set the real verifier would issue for ``launch`` (pure)."""
    env = dict(launch.image_env)
    env["HOSTNAME"] = launch.instance_name
    env.update(launch.env_overrides)
    container: dict[str, Any] = {
        "image_reference": launch.image_reference,
        "image_digest": launch.image_digest,
        "restart_policy": launch.restart_policy,
        "image_id": launch.image_id,
        "env": env,
        "args": list(launch.cmd_override or launch.args),
        "env_override": dict(launch.env_overrides) if launch.env_overrides else None,
        "cmd_override": list(launch.cmd_override) if launch.cmd_override is not None else None,
    }
    confidential_space: dict[str, Any] = {"monitoring_enabled": {"memory": False}}
    if not launch.debug:  # the preview (GPU) family is EXPERIMENTAL only
        confidential_space["support_attributes"] = (
            ["EXPERIMENTAL"] if launch.gpu_cc_mode is not None else ["LATEST", "STABLE", "USABLE"]
        )
    claims: dict[str, Any] = {
        "aud": audience,
        "iss": issuer,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
        "sub": (
            f"https://www.googleapis.com/compute/v1/projects/{launch.project_id}/zones/"
            f"{launch.zone}/instances/{launch.instance_name}"
        ),
        "eat_profile": _EAT_PROFILE,
        "secboot": launch.secboot,
        "oemid": 11129,
        "hwmodel": launch.hwmodel,
        "swname": "CONFIDENTIAL_SPACE",
        "swversion": [launch.swversion],
        "dbgstat": "enabled" if launch.debug else "disabled-since-boot",
        "submods": {
            "confidential_space": confidential_space,
            "container": container,
            "gce": {
                "zone": launch.zone,
                "project_id": launch.project_id,
                "project_number": launch.project_number,
                "instance_name": launch.instance_name,
                "instance_id": launch.instance_id,
            },
        },
        "google_service_accounts": list(launch.service_accounts),
    }
    if launch.hwmodel == "GCP_INTEL_TDX":
        claims["attester_tcb"] = ["INTEL"]
    if launch.gpu_cc_mode is not None:
        claims["submods"]["nvidia_gpu"] = {"cc_mode": launch.gpu_cc_mode}
    if nonces:
        claims["eat_nonce"] = nonces[0] if len(nonces) == 1 else list(nonces)
    return claims


class TokenMinter(Protocol):
    """Mints attestation tokens for a launched workload (the verifier, in-process or remote)."""

    def mint(self, launch: WorkloadLaunch, audience: str, nonces: Sequence[str]) -> str: ...


def _b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class MockVerifier:
    """The mock issuer: holds the signing key, answers discovery and JWKS, mints tokens."""

    def __init__(
        self, state: MockState, issuer: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self._clock = clock
        #: The mock cloud's token destinations, published in discovery (see
        #: :meth:`openid_configuration`); set by :class:`~sealbench.mocktee.server.MockCloud`.
        self.service_endpoints: dict[str, str] | None = None
        path = state.secret_path(_KEY_FILE)
        if path.exists():
            loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(loaded, rsa.RSAPrivateKey):
                raise ValueError(f"{path} does not hold an RSA key")
            self._key = loaded
        else:
            self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = self._key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            atomic_write(path, pem, mode=0o600)
        der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.kid = hashlib.sha256(der).hexdigest()[:40]
        _log.warning(
            "INSECURE mock attestation verifier (issuer %s, kid %s): its tokens prove nothing "
            "about hardware",
            self.issuer,
            self.kid,
        )

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "alg": "RS256",
                    "use": "sig",
                    "kid": self.kid,
                    "n": _b64url_uint(numbers.n),
                    "e": _b64url_uint(numbers.e),
                }
            ]
        }

    def openid_configuration(self) -> dict[str, Any]:
        """The discovery document. Beyond the real verifier's members it carries
        ``sealbench_insecure_mock_endpoints`` (``sts_url``, ``kms_endpoint``,
        ``storage_endpoint``): the only endpoints a workload this issuer attests may send tokens
        to, which the enclave checks before sending any (Google's are fixed and known)."""
        extra: dict[str, Any] = {}
        if self.service_endpoints is not None:
            extra[MOCK_ENDPOINTS_MEMBER] = dict(self.service_endpoints)
        return extra | {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid"],
            "claims_supported": [
                "sub",
                "aud",
                "exp",
                "iat",
                "iss",
                "jti",
                "nbf",
                "dbgstat",
                "eat_nonce",
                "google_service_accounts",
                "hwmodel",
                "oemid",
                "secboot",
                "submods",
                "swname",
                "swversion",
            ],
        }

    def mint(
        self,
        launch: WorkloadLaunch,
        audience: str = DEFAULT_AUDIENCE,
        nonces: Sequence[str] = (),
        *,
        lifetime: int = TOKEN_LIFETIME_S,
    ) -> str:
        claims = build_claims(
            launch,
            issuer=self.issuer,
            audience=audience,
            nonces=nonces,
            now=int(self._clock()),
            lifetime=lifetime,
        )
        return self.sign(claims)

    def sign(self, claims: Mapping[str, Any]) -> str:
        """Sign arbitrary claims with the issuer key (tests use it to forge edge cases)."""
        headers = {"kid": self.kid, "typ": "JWT"}
        return jwt.encode(dict(claims), self._key, algorithm="RS256", headers=headers)

    def handle(self, request: Request) -> Response:
        if request.method != "GET":
            return google_error(404, f"{request.method} {request.path} not found")
        if request.path == "/.well-known/openid-configuration":
            return json_response(200, self.openid_configuration())
        if request.path == "/jwks":
            return json_response(200, self.jwks())
        return google_error(404, f"{request.path} not found")
