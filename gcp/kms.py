"""The :class:`~sealbench.crypto.envelope.KeyWrapper` over Cloud KMS (``google-cloud-kms``, REST
transport): a symmetric ``ENCRYPT_DECRYPT`` key wraps data-encryption keys with additional
authenticated data, and the CRC32C integrity fields are sent and checked exactly as Google's
"verifying end-to-end data integrity" guide does. Permission and not-found errors are translated
into :mod:`sealbench.platforms.errors` naming the key and the identity."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import google_crc32c
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exc
from google.cloud import kms

from sealbench.gcp.credentials import safe_auth_reason
from sealbench.gcp.failures import perimeter_violation
from sealbench.platforms.errors import (
    CredentialError,
    KeyAccessDenied,
    KeyNotFound,
    KmsError,
    KmsIntegrityError,
    ServicePerimeterDenied,
)

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = [
    "KMS_MAX_PAYLOAD",
    "KMS_TIMEOUT_S",
    "TRANSIT_ATTEMPTS",
    "KmsKeyWrapper",
    "describe_identity",
    "make_kms_client",
]

_log = logging.getLogger("sealbench.platforms")

#: Seconds allowed for one KMS request (including retries of that request).
KMS_TIMEOUT_S = 30.0
#: Cloud KMS accepts at most 64 KiB of plaintext and of AAD for software keys.
KMS_MAX_PAYLOAD = 64 * 1024


def make_kms_client(
    credentials: Credentials | None, api_endpoint: str | None = None
) -> kms.KeyManagementServiceClient:
    """A REST-transport KMS client; ``api_endpoint`` (``http://127.0.0.1:PORT`` for the mock)
    replaces ``cloudkms.googleapis.com`` while the credentials stay in use."""
    options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
    return kms.KeyManagementServiceClient(
        credentials=credentials, transport="rest", client_options=options
    )


def describe_identity(credentials: object) -> str | None:
    """Best-effort description of who ``credentials`` act as (no secrets), for error messages."""
    email = getattr(credentials, "service_account_email", None)
    if isinstance(email, str) and email and email != "default":
        return f"serviceAccount:{email}"
    audience = getattr(credentials, "_audience", None) or getattr(credentials, "audience", None)
    if isinstance(audience, str) and "workloadIdentityPools" in audience:
        return f"a workload federated through {audience}"
    return None


def _crc32c(data: bytes) -> int:
    return int(google_crc32c.value(data))


class KmsKeyWrapper:
    """Wraps and unwraps DEKs with one Cloud KMS key (``projects/…/cryptoKeys/NAME``)."""

    def __init__(
        self,
        key_name: str,
        client: kms.KeyManagementServiceClient,
        *,
        identity: str | None = None,
        timeout: float = KMS_TIMEOUT_S,
    ) -> None:
        parts = key_name.split("/")
        if (
            len(parts) != 8
            or parts[0::2] != ["projects", "locations", "keyRings", "cryptoKeys"]
            or not all(parts[1::2])
        ):
            raise ValueError(f"{key_name!r} is not projects/P/locations/L/keyRings/R/cryptoKeys/K")
        self._key_name = key_name
        self._client = client
        self._timeout = timeout
        self._identity = (
            identity
            if identity is not None
            else describe_identity(
                getattr(getattr(client, "_transport", None), "_credentials", None)
            )
        )

    def __repr__(self) -> str:
        return f"KmsKeyWrapper({self._key_name!r})"

    @property
    def key_name(self) -> str:
        return self._key_name

    def _translate(self, exc: Exception, operation: str) -> NoReturn:
        reference = perimeter_violation(exc)
        if reference is not None:  # no grant admits it: never a refusal to wait out
            raise ServicePerimeterDenied(service="cloudkms.googleapis.com",
                                         resource=self._key_name, reference=reference) from exc
        if isinstance(exc, gexc.PermissionDenied | gexc.Unauthenticated | gexc.Forbidden):
            raise KeyAccessDenied(
                key_name=self._key_name, operation=operation, identity=self._identity
            ) from exc
        if isinstance(exc, gexc.NotFound):
            raise KeyNotFound(key_name=self._key_name) from exc
        if isinstance(exc, auth_exc.GoogleAuthError):
            raise CredentialError(
                f"cannot obtain a credential to {operation} with {self._key_name}: "
                f"{safe_auth_reason(exc)}"
            ) from exc
        if isinstance(exc, gexc.GoogleAPICallError):
            raise KmsError(
                f"KMS {operation} with {self._key_name} failed: {exc.code} {exc.message}",
                key_name=self._key_name,
            ) from exc
        raise KmsError(
            f"KMS {operation} with {self._key_name} failed: {type(exc).__name__}",
            key_name=self._key_name,
        ) from exc

    def wrap(self, plaintext: bytes, aad: bytes) -> bytes:
        if len(plaintext) > KMS_MAX_PAYLOAD or len(aad) > KMS_MAX_PAYLOAD:
            raise KmsError("plaintext and AAD are limited to 64 KiB each", key_name=self._key_name)
        return _retrying_transit(lambda: self._wrap_once(plaintext, aad))

    def _wrap_once(self, plaintext: bytes, aad: bytes) -> bytes:
        request = {
            "name": self._key_name,
            "plaintext": plaintext,
            "additional_authenticated_data": aad,
            "plaintext_crc32c": _crc32c(plaintext),
            "additional_authenticated_data_crc32c": _crc32c(aad),
        }
        try:
            response = self._client.encrypt(request=request, timeout=self._timeout)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            self._translate(exc, "encrypt")
        if not response.verified_plaintext_crc32c:
            raise _TransitError(
                "KMS did not verify the plaintext CRC32C of the encrypt request",
                key_name=self._key_name,
            )
        if not response.verified_additional_authenticated_data_crc32c:
            raise _TransitError(
                "KMS did not verify the AAD CRC32C of the encrypt request",
                key_name=self._key_name,
            )
        if not str(response.name).startswith(self._key_name + "/cryptoKeyVersions/"):
            raise KmsIntegrityError(
                f"KMS answered for {response.name!r}, not a version of {self._key_name}",
                key_name=self._key_name,
            )
        ciphertext = bytes(response.ciphertext)
        if response.ciphertext_crc32c != _crc32c(ciphertext):
            raise _TransitError(
                "ciphertext corrupted in transit (CRC32C mismatch)", key_name=self._key_name
            )
        return ciphertext

    def unwrap(self, ciphertext: bytes, aad: bytes) -> bytes:
        return _retrying_transit(lambda: self._unwrap_once(ciphertext, aad))

    def _unwrap_once(self, ciphertext: bytes, aad: bytes) -> bytes:
        request = {
            "name": self._key_name,
            "ciphertext": ciphertext,
            "additional_authenticated_data": aad,
            "ciphertext_crc32c": _crc32c(ciphertext),
            "additional_authenticated_data_crc32c": _crc32c(aad),
        }
        try:
            response = self._client.decrypt(request=request, timeout=self._timeout)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            self._translate(exc, "decrypt")
        plaintext = bytes(response.plaintext)
        if response.plaintext_crc32c != _crc32c(plaintext):
            raise _TransitError(
                "plaintext corrupted in transit (CRC32C mismatch)", key_name=self._key_name
            )
        return plaintext


#: How many times a call whose checksums disagree is made in all: Google's data-integrity
#: guidance is to discard such an answer and retry "a limited number of times", a lasting
#: mismatch being a fault to report, not to retry forever.
TRANSIT_ATTEMPTS = 3


class _TransitError(KmsIntegrityError):
    """A CRC32C the request or the answer failed in transit: retried, then raised."""


def _retrying_transit(call: Callable[[], bytes]) -> bytes:
    for attempt in range(1, TRANSIT_ATTEMPTS + 1):
        try:
            return call()
        except _TransitError as exc:
            if attempt == TRANSIT_ATTEMPTS:
                raise KmsIntegrityError(
                    f"{exc} ({TRANSIT_ATTEMPTS} attempts)", key_name=exc.key_name) from exc
            _log.warning("KMS checksum mismatch (%s); retrying", exc)
    raise AssertionError("unreachable")
