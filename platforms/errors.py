"""Errors raised by :mod:`sealbench.platforms`.

Every failure at the cloud boundary is a :class:`CloudError`. Foreign exceptions (google-api-core,
google-auth, requests, OS errors) are translated once, at the adapter that called the foreign
library, with ``raise ... from exc``. Messages name the resource (key, object, pool provider) and,
where known, the identity that was refused; they never contain key bytes, tokens or plaintext.

Key errors also derive from :class:`sealbench.crypto.errors.KeyUnwrapError`, so code written
against the ``KeyWrapper`` protocol catches them without knowing which wrapper it holds.

::

    CloudError
    ├── KmsError                        Cloud KMS refused or failed a request
    │   ├── KeyAccessDenied             the identity lacks permission on the key (names both)
    │   ├── KeyNotFound                 the key (or its ring/project) does not exist
    │   └── KmsIntegrityError           a CRC32C integrity field did not verify in transit
    ├── StorageError                    object storage refused or failed a request
    │   ├── InvalidObjectName           an object name is unsafe or malformed
    │   ├── InvalidStorageUri           a storage URI is not gs://bucket/prefix or file:///path
    │   ├── ObjectCorrupted             an object's bytes do not match the store's checksum
    │   ├── ObjectNotFound              no object of that name
    │   ├── ObjectTooLarge              an object exceeds the caller's size bound
    │   └── StorageAccessDenied         the identity may not read or write the object
    ├── ServicePerimeterDenied          a VPC Service Controls perimeter refused the request
    ├── AttesterError                   the TEE launcher did not return a token
    ├── CredentialError                 workload credentials cannot be built or exchanged
    └── PolicyWriteError                the identity provider or an IAM policy cannot be written
        ├── PolicyInputError            an allowed workload or coordinate is invalid
        └── ConcurrentPolicyChange      the IAM policy changed underneath us (etag conflict)

:func:`refused_after_exchange` tells a permission refusal of a request that carried a
credential (HTTP 403 ``PERMISSION_DENIED`` from KMS or storage: how a grant IAM has not applied
yet looks) from a refused token exchange (:class:`CredentialError`, the STS's reason) or an
unauthenticated request (401).
"""

from __future__ import annotations

from sealbench.crypto.errors import KeyUnwrapError

__all__ = [
    "AttesterError",
    "CloudError",
    "ConcurrentPolicyChange",
    "CredentialError",
    "InvalidObjectName",
    "InvalidStorageUri",
    "KeyAccessDenied",
    "KeyNotFound",
    "KmsError",
    "KmsIntegrityError",
    "ObjectCorrupted",
    "ObjectNotFound",
    "ObjectTooLarge",
    "OwnerCloudError",
    "OwnerSettingsError",
    "PolicyInputError",
    "PolicyWriteError",
    "ServicePerimeterDenied",
    "StorageAccessDenied",
    "StorageError",
    "refused_after_exchange",
]


class CloudError(Exception):
    """Base class of every error raised by :mod:`sealbench.platforms`."""


class KmsError(CloudError, KeyUnwrapError):
    """Cloud KMS refused or failed a request on ``key_name``."""

    def __init__(self, message: str, *, key_name: str) -> None:
        self.key_name = key_name
        super().__init__(message)


class KeyAccessDenied(KmsError):  # noqa: N818 - the agreed public name
    """``identity`` lacks the permission for ``operation`` on ``key_name``."""

    def __init__(self, *, key_name: str, operation: str, identity: str | None) -> None:
        self.operation = operation
        self.identity = identity
        who = identity if identity is not None else "the calling identity (unknown principal)"
        super().__init__(
            f"permission denied: {who} may not {operation} with key {key_name}", key_name=key_name
        )


class KeyNotFound(KmsError):  # noqa: N818 - the agreed public name
    """The key, its key ring or its project does not exist (or is hidden from the caller)."""

    def __init__(self, *, key_name: str) -> None:
        super().__init__(f"key not found: {key_name}", key_name=key_name)


class KmsIntegrityError(KmsError):
    """A CRC32C integrity field of a KMS request or response did not verify."""


class StorageError(CloudError):
    """Object storage refused or failed a request."""


class InvalidObjectName(StorageError):  # noqa: N818 - the agreed public name
    """An object name is unsafe or malformed; ``reason`` says which rule it breaks."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        shown = name if len(name) <= 80 else name[:77] + "..."
        super().__init__(f"invalid object name {shown!r}: {reason}")


class InvalidStorageUri(StorageError):  # noqa: N818 - the agreed public name
    """A storage URI is neither ``gs://bucket[/prefix]`` nor ``file:///absolute/path``."""


class ObjectCorrupted(StorageError):  # noqa: N818 - the agreed public name
    """The bytes of object ``name`` did not match the checksum the store keeps for it: they were
    altered at rest or in transit. ``action`` is the transfer that found it (``read``,
    ``upload``). The message names the object, never its contents."""

    def __init__(self, name: str, where: str, action: str, cleanup: str | None = None) -> None:
        self.name = name
        self.action = action
        self.cleanup = cleanup
        super().__init__(
            f"object {name} in {where} failed its integrity check on {action}: "
            "its bytes do not match the store's checksum"
            + (f" ({cleanup})" if cleanup else "")
        )


class ObjectNotFound(StorageError):  # noqa: N818 - the agreed public name
    """No object ``name`` exists in the store."""

    def __init__(self, name: str, where: str) -> None:
        self.name = name
        super().__init__(f"object not found: {name} in {where}")


class ObjectTooLarge(StorageError):  # noqa: N818 - the agreed public name
    """Object ``name`` is larger than the caller's bound ``max_size``."""

    def __init__(self, name: str, max_size: int) -> None:
        self.name = name
        self.max_size = max_size
        super().__init__(f"object {name} exceeds the size bound of {max_size} bytes")


class StorageAccessDenied(StorageError):  # noqa: N818 - the agreed public name
    """The calling identity may not read or write the object or bucket."""


class ServicePerimeterDenied(CloudError):  # noqa: N818 - reads as what happened
    """A VPC Service Controls perimeter around the resource's project refused the request
    (Google's ``VPC_SERVICE_CONTROLS`` violation): no IAM grant admits it, so it is never
    retried as a grant not yet applied (:func:`refused_after_exchange` is False for it).
    ``service`` is the API (``cloudkms.googleapis.com``, ``storage.googleapis.com``),
    ``reference`` Google's ``vpcServiceControlsUniqueIdentifier`` (for the perimeter's
    audit log)."""

    def __init__(self, *, service: str, resource: str, reference: str) -> None:
        self.service = service
        self.resource = resource
        self.reference = reference
        super().__init__(
            f"a VPC Service Controls perimeter refused {service} access to {resource} "
            f"(vpcServiceControlsUniqueIdentifier {reference}): federated workloads reach "
            "it only through an ingress rule of the perimeter (docs/gcp-setup.md, "
            "'Inside a VPC Service Controls perimeter')"
        )


class AttesterError(CloudError):
    """The TEE launcher (attestation agent) did not return a token."""


class CredentialError(CloudError):
    """Workload credentials cannot be built, or the token exchange failed."""


class PolicyWriteError(CloudError):
    """The workload identity pool provider or an IAM policy cannot be read or written."""


class PolicyInputError(PolicyWriteError):
    """An allowed workload, digest or resource coordinate is invalid."""


class ConcurrentPolicyChange(PolicyWriteError):  # noqa: N818 - the agreed public name
    """The IAM policy was changed by someone else between read and write (etag mismatch) more
    often than the writer is willing to retry."""


class OwnerCloudError(CloudError):
    """An owner's cloud operation failed (or cannot start), translated once where it happened
    into one line naming the resource, with ``hint``: the command that fixes it. The client
    shows it as its own ``CloudError`` (exit 7)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class OwnerSettingsError(OwnerCloudError):
    """The owner's settings (a profile's cloud, an option) cannot work; the client shows it as
    its ``ConfigError`` (exit 3)."""


def refused_after_exchange(exc: BaseException) -> bool:
    """Whether ``exc`` is KMS's or storage's permission refusal (403) of a request made with a
    credential the token exchange issued: the identity was recognised and a grant is missing,
    or not yet applied. A refused exchange (:class:`CredentialError`) and an unauthenticated
    request (401) are not. The HTTP status is read from the translated exception's cause
    (google-api-core's ``code``); a refusal raised without one (a fake) counts."""
    if not isinstance(exc, KeyAccessDenied | StorageAccessDenied):
        return False
    code = getattr(exc.__cause__, "code", None)
    try:
        return code is None or int(code) == 403
    except (TypeError, ValueError):
        return False
