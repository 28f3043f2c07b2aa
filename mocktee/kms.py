"""The mock Cloud KMS REST API: key rings, symmetric ``ENCRYPT_DECRYPT`` keys, ``:encrypt``,
``:decrypt``, ``:getIamPolicy`` and ``:setIamPolicy``, with the JSON shapes of
``cloudkms.googleapis.com/v1`` (base64 bytes, int64 CRC32C fields as decimal strings) so that
``google-cloud-kms`` with the REST transport talks to it unchanged.

Authorization as Cloud KMS: the bearer token's principal (or one of its principal sets, such as
``principalSet://…/attribute.workload_uid/<uid>``) must hold ``roles/cloudkms.cryptoKeyDecrypter``
(or ``…EncrypterDecrypter``) on the key to decrypt, an encrypter role or project ownership to
encrypt; project owners administer keys and policies. Otherwise 403 ``PERMISSION_DENIED``. A
federated caller on a key of a project inside a VPC Service Controls perimeter gets the
perimeter's refusal first (:mod:`sealbench.mocktee.orgpolicy`).

Mock ciphertext format (version 1; opaque to clients, like real KMS ciphertext)::

    0x01 | key version (4 bytes, big-endian) | nonce (12) | AES-256-GCM(ciphertext || tag 16)

with GCM associated data = key name || 0x00 || the request's additionalAuthenticatedData.
Key material is kept (INSECURE BY DESIGN) in ``insecure-secrets/kms-keys.json``, mode 0600.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import google_crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sealbench.mocktee._http import Request, Response, google_error, json_response
from sealbench.mocktee.identity import (
    Caller,
    Identity,
    condition_refusal,
    has_role,
    version_refusal,
)
from sealbench.mocktee.orgpolicy import perimeter_refusal
from sealbench.mocktee.state import MockState, atomic_write

__all__ = ["DECRYPT_ROLES", "ENCRYPT_ROLES", "MockKms"]

_log = logging.getLogger("sealbench.mocktee")

DECRYPT_ROLES = ("roles/cloudkms.cryptoKeyDecrypter", "roles/cloudkms.cryptoKeyEncrypterDecrypter")
ENCRYPT_ROLES = ("roles/cloudkms.cryptoKeyEncrypter", "roles/cloudkms.cryptoKeyEncrypterDecrypter")
_SECRETS_FILE = "kms-keys.json"
_MAX_PAYLOAD = 64 * 1024
_CT_VERSION = 1
_RING_PATH = r"projects/([^/]+)/locations/([^/]+)/keyRings"
_RINGS = re.compile(rf"^/v1/{_RING_PATH}$")
_RING = re.compile(rf"^/v1/({_RING_PATH}/[^/:]+)$")
_KEYS = re.compile(rf"^/v1/({_RING_PATH}/[^/]+)/cryptoKeys$")
_PROJECT = re.compile(r"^/v1/projects/([^/]+)/")
_KEY = re.compile(rf"^/v1/({_RING_PATH}/[^/]+/cryptoKeys/[^/:]+)(?::(\w+))?$")
_ID = re.compile(r"^[a-zA-Z0-9_-]{1,63}$")


def _crc(data: bytes) -> int:
    return int(google_crc32c.value(data))


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _BadRequestError(Exception):
    pass


def _b64_field(body: dict[str, Any], field: str, *, required: bool) -> bytes:
    value = body.get(field)
    if value is None or value == "":
        if required:
            raise _BadRequestError(f"{field} is required.")
        return b""
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise _BadRequestError(f"Invalid value at '{field}': not valid base64.") from None


def _check_crc(body: dict[str, Any], field: str, data: bytes) -> bool:
    """Whether a CRC32C was supplied for ``data``; raises _BadRequest if it does not match."""
    value = body.get(field)
    if value is None:
        return False
    if int(value) != _crc(data):
        raise _BadRequestError(
            f"The checksum in field {field} did not match the data in the corresponding field."
        )
    return True


class MockKms:
    """``handle(request)`` serves the Cloud KMS REST endpoints listed in the module docstring."""

    def __init__(
        self, state: MockState, identity: Identity, clock: Callable[[], float] = time.time
    ) -> None:
        self._state = state
        self._identity = identity
        self._clock = clock
        self._lock = threading.Lock()
        self._secrets_path = state.secret_path(_SECRETS_FILE)
        self._material: dict[str, str] = (
            json.loads(self._secrets_path.read_bytes()) if self._secrets_path.exists() else {}
        )

    def handle(self, request: Request) -> Response:
        caller = self._identity.authenticate(request)
        if isinstance(caller, Response):
            return caller
        project = _PROJECT.match(request.path)
        if project and (off := self._identity.service_disabled(
                project.group(1), "cloudkms.googleapis.com")):
            return off
        if project and (resolved := self._identity.resolve_project(project.group(1))):
            refused = perimeter_refusal(self._state.read(), resolved[0], caller.principal,
                                        "cloudkms.googleapis.com")
            if refused is not None:  # VPC Service Controls (sealbench.mocktee.orgpolicy)
                return Response(refused[0], refused[1])
        try:
            return self._route(request, caller)
        except _BadRequestError as exc:
            return google_error(400, str(exc))
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError):
            return google_error(400, "Invalid JSON payload received.")

    def _route(self, request: Request, caller: Caller) -> Response:
        path, method = request.path, request.method
        if m := _RINGS.match(path):
            if method == "POST":
                return self._create_ring(request, caller, m.group(1), m.group(2))
        elif m := _RING.match(path):
            if method == "GET":
                return self._get(caller, m.group(1), m.group(2), "key_rings", "KeyRing")
        elif m := _KEYS.match(path):
            if method == "POST":
                return self._create_key(request, caller, m.group(1), m.group(2))
        elif m := _KEY.match(path):
            name, project, verb = m.group(1), m.group(2), m.group(4)
            if verb is None and method == "GET":
                return self._get(caller, name, project, "crypto_keys", "CryptoKey")
            if verb == "encrypt" and method == "POST":
                return self._encrypt(request, caller, name, project)
            if verb == "decrypt" and method == "POST":
                return self._decrypt(request, caller, name, project)
            if verb == "getIamPolicy" and method in ("GET", "POST"):
                return self._get_policy(caller, name, project, _requested_version(request))
            if verb == "setIamPolicy" and method == "POST":
                return self._set_policy(request, caller, name, project)
        return google_error(404, f"{method} {path} is not served by the mock KMS")

    # -- helpers ---------------------------------------------------------------------------

    def _denied(self, permission: str, name: str) -> Response:
        return google_error(
            403, f"Permission '{permission}' denied on resource '{name}' (or it may not exist)."
        )

    def _key_or_error(
        self, caller: Caller, name: str, project: str, permission: str, roles: tuple[str, ...]
    ) -> dict[str, Any] | Response:
        doc = self._state.read()
        key = doc["crypto_keys"].get(name)
        owner = self._identity.is_owner(caller, project)
        policy = self._identity.policy_in_effect(doc["iam"].get(name))
        allowed = owner or (key is not None and has_role(policy, caller, roles))
        if not allowed:
            _log.info("mock KMS: %s denied %s on %s", caller.describe(), permission, name)
            return self._denied(permission, name)
        if key is None:
            return google_error(404, f"CryptoKey {name} not found.")
        state = key["primary"].get("state", "ENABLED")
        if state != "ENABLED":  # destroyed (or disabled) by its owner: nothing is sealed or opened
            return google_error(
                400,
                f"{key['primary']['name']} is not enabled, current state is: {state}.",
                "FAILED_PRECONDITION",
            )
        result: dict[str, Any] = key
        return result

    def _get(self, caller: Caller, name: str, project: str, section: str, kind: str) -> Response:
        if not self._identity.is_owner(caller, project):
            return self._denied("cloudkms.*.get", name)
        value = self._state.read()[section].get(name)
        if value is None:
            return google_error(404, f"{kind} {name} not found.")
        return json_response(200, value)

    # -- administration --------------------------------------------------------------------

    def _create_ring(
        self, request: Request, caller: Caller, project: str, location: str
    ) -> Response:
        parent = f"projects/{project}/locations/{location}"
        if not self._identity.is_owner(caller, project):
            return self._denied("cloudkms.keyRings.create", parent)
        ring_id = request.query.get("keyRingId", "")
        if not _ID.match(ring_id):
            return google_error(400, "key_ring_id must match [a-zA-Z0-9_-]{1,63}.")
        name = f"{parent}/keyRings/{ring_id}"
        ring = {"name": name, "createTime": _now_rfc3339()}
        with self._state.edit() as doc:
            if name in doc["key_rings"]:
                return google_error(409, f"KeyRing {name} already exists.")
            doc["key_rings"][name] = ring
        return json_response(200, ring)

    def _create_key(self, request: Request, caller: Caller, ring: str, project: str) -> Response:
        if not self._identity.is_owner(caller, project):
            return self._denied("cloudkms.cryptoKeys.create", ring)
        key_id = request.query.get("cryptoKeyId", "")
        if not _ID.match(key_id):
            return google_error(400, "crypto_key_id must match [a-zA-Z0-9_-]{1,63}.")
        body = request.json()
        if body.get("purpose") not in ("ENCRYPT_DECRYPT", 1):
            return google_error(400, "The mock KMS only supports purpose ENCRYPT_DECRYPT.")
        name = f"{ring}/cryptoKeys/{key_id}"
        now = _now_rfc3339()
        key = {
            "name": name,
            "purpose": "ENCRYPT_DECRYPT",
            "createTime": now,
            "primary": {
                "name": f"{name}/cryptoKeyVersions/1",
                "state": "ENABLED",
                "protectionLevel": "SOFTWARE",
                "algorithm": "GOOGLE_SYMMETRIC_ENCRYPTION",
                "createTime": now,
            },
            "versionTemplate": {
                "protectionLevel": "SOFTWARE",
                "algorithm": "GOOGLE_SYMMETRIC_ENCRYPTION",
            },
        }
        with self._state.edit() as doc:
            if ring not in doc["key_rings"]:
                return google_error(404, f"KeyRing {ring} not found.")
            if name in doc["crypto_keys"]:
                return google_error(409, f"CryptoKey {name} already exists.")
            with self._lock:
                self._material[f"{name}/cryptoKeyVersions/1"] = base64.b64encode(
                    AESGCM.generate_key(256)
                ).decode()
                atomic_write(self._secrets_path, json.dumps(self._material).encode(), mode=0o600)
            doc["crypto_keys"][name] = key
        _log.warning("INSECURE mock KMS: created %s (key material kept in the state dir)", name)
        return json_response(200, key)

    def destroy_primary(self, name: str) -> None:
        """Mark the primary version of key ``name`` DESTROYED and drop its material, as
        ``gcloud kms keys versions destroy`` does once the schedule has run (fault injection)."""
        with self._state.edit() as doc:
            key = doc["crypto_keys"].get(name)
            if key is None:
                raise ValueError(f"no key {name}")
            key["primary"]["state"] = "DESTROYED"
            with self._lock:
                self._material.pop(key["primary"]["name"], None)
                atomic_write(self._secrets_path, json.dumps(self._material).encode(), mode=0o600)

    # -- cryptography ----------------------------------------------------------------------

    def _aead(self, version_name: str) -> AESGCM:
        with self._lock:
            return AESGCM(base64.b64decode(self._material[version_name]))

    def _encrypt(self, request: Request, caller: Caller, name: str, project: str) -> Response:
        key = self._key_or_error(
            caller, name, project, "cloudkms.cryptoKeyVersions.useToEncrypt", ENCRYPT_ROLES
        )
        if isinstance(key, Response):
            return key
        body = request.json()
        plaintext = _b64_field(body, "plaintext", required=True)
        aad = _b64_field(body, "additionalAuthenticatedData", required=False)
        if len(plaintext) > _MAX_PAYLOAD or len(aad) > _MAX_PAYLOAD:
            return google_error(
                400, "plaintext and additional_authenticated_data are limited to 64 KiB."
            )
        verified_pt = _check_crc(body, "plaintextCrc32c", plaintext)
        verified_aad = _check_crc(body, "additionalAuthenticatedDataCrc32c", aad)
        version_name = str(key["primary"]["name"])
        version = int(version_name.rsplit("/", 1)[1])
        nonce = secrets.token_bytes(12)
        sealed = self._aead(version_name).encrypt(nonce, plaintext, name.encode() + b"\0" + aad)
        ciphertext = bytes([_CT_VERSION]) + version.to_bytes(4, "big") + nonce + sealed
        return json_response(
            200,
            {
                "name": version_name,
                "ciphertext": base64.b64encode(ciphertext).decode(),
                "ciphertextCrc32c": str(_crc(ciphertext)),
                "verifiedPlaintextCrc32c": verified_pt,
                "verifiedAdditionalAuthenticatedDataCrc32c": verified_aad,
                "protectionLevel": "SOFTWARE",
            },
        )

    def _decrypt(self, request: Request, caller: Caller, name: str, project: str) -> Response:
        key = self._key_or_error(
            caller, name, project, "cloudkms.cryptoKeyVersions.useToDecrypt", DECRYPT_ROLES
        )
        if isinstance(key, Response):
            return key
        body = request.json()
        ciphertext = _b64_field(body, "ciphertext", required=True)
        aad = _b64_field(body, "additionalAuthenticatedData", required=False)
        _check_crc(body, "ciphertextCrc32c", ciphertext)
        _check_crc(body, "additionalAuthenticatedDataCrc32c", aad)
        invalid = google_error(400, "Decryption failed: the ciphertext is invalid.")
        if len(ciphertext) < 1 + 4 + 12 + 16 or ciphertext[0] != _CT_VERSION:
            return invalid
        version = int.from_bytes(ciphertext[1:5], "big")
        version_name = f"{name}/cryptoKeyVersions/{version}"
        if version_name not in self._material:
            return invalid
        try:
            plaintext = self._aead(version_name).decrypt(
                ciphertext[5:17], ciphertext[17:], name.encode() + b"\0" + aad
            )
        except InvalidTag:
            return invalid
        _log.info("mock KMS: released a key from %s to %s", name, caller.describe())
        return json_response(
            200,
            {
                "plaintext": base64.b64encode(plaintext).decode(),
                "plaintextCrc32c": str(_crc(plaintext)),
                "usedPrimary": version_name == key["primary"]["name"],
                "protectionLevel": "SOFTWARE",
            },
        )

    # -- IAM -------------------------------------------------------------------------------

    def _get_policy(self, caller: Caller, name: str, project: str, requested: int) -> Response:
        if not self._identity.is_owner(caller, project):
            return self._denied("cloudkms.cryptoKeys.getIamPolicy", name)
        doc = self._state.read()
        if name not in doc["crypto_keys"]:
            return google_error(404, f"CryptoKey {name} not found.")
        policy = doc["iam"].get(name) or {"version": 1, "etag": _etag(0), "bindings": []}
        refusal = version_refusal(policy.get("bindings", []), requested)
        if refusal:
            return google_error(400, refusal)
        return json_response(200, _public_policy(policy))

    def _set_policy(self, request: Request, caller: Caller, name: str, project: str) -> Response:
        if not self._identity.is_owner(caller, project):
            return self._denied("cloudkms.cryptoKeys.setIamPolicy", name)
        policy = request.json().get("policy")
        reason = _validate_policy(policy)
        if reason:
            return google_error(400, reason)
        with self._state.edit() as doc:
            if name not in doc["crypto_keys"]:
                return google_error(404, f"CryptoKey {name} not found.")
            current = doc["iam"].get(name) or {"version": 1, "etag": _etag(0), "bindings": []}
            if policy.get("etag") and policy["etag"] != current["etag"]:
                return google_error(
                    409,
                    "There were concurrent policy changes. Please retry the whole "
                    "read-modify-write with exponential backoff.",
                    "ABORTED",
                )
            serial = int(current.get("serial", 0)) + 1
            bindings = policy.get("bindings", [])
            stored = {
                "version": 3 if any("condition" in b for b in bindings) else 1,
                "bindings": bindings,
                "serial": serial,
                "etag": _etag(serial),
                "history": self._identity.policy_history(doc["iam"].get(name), bindings),
            }
            doc["iam"][name] = stored
        return json_response(200, _public_policy(stored))


def _etag(serial: int) -> str:
    return base64.b64encode(serial.to_bytes(8, "big")).decode()


def _public_policy(policy: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in policy.items() if k in ("version", "etag", "bindings")}


def _validate_policy(policy: object) -> str | None:
    if not isinstance(policy, dict):
        return "policy is required."
    bindings = policy.get("bindings", [])
    if not isinstance(bindings, list):
        return "policy.bindings must be a list."
    for binding in bindings:
        if not isinstance(binding, dict) or not isinstance(binding.get("role"), str):
            return "each binding needs a role."
        members = binding.get("members", [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            return "binding members must be strings."
    return condition_refusal(bindings, policy.get("version"))


def _requested_version(request: Request) -> int:
    """``options.requestedPolicyVersion`` of a getIamPolicy call (query on GET, body on POST;
    0 when absent)."""
    raw: object = request.query.get("options.requestedPolicyVersion")
    if raw is None and request.method == "POST" and request.body:
        options = request.json().get("options")
        raw = options.get("requestedPolicyVersion") if isinstance(options, dict) else None
    try:
        return int(raw) if raw is not None else 0  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return -1
