"""The platform seam: what every TEE platform implements, and nothing of any one of them.

- :mod:`~sealbench.platforms.platform` — the :class:`Platform` interface (attestation, token
  destinations, key-release conditions, the adapters it hands out) and its entry-point registry
  (group ``sealbench.platforms``);
- :mod:`~sealbench.platforms.launcher` — :class:`Launcher`, how the client starts a workload;
- :mod:`~sealbench.platforms.access` — :class:`AssetAccess`, how the enclave opens an owner's
  storage and key;
- :mod:`~sealbench.platforms.owner_cloud` — :class:`OwnerCloud`, an asset owner's account;
- :mod:`~sealbench.platforms.account` — an account's typed settings as a profile holds them, and
  where its runs go (:class:`AccountRoutes`, :class:`LaunchDefaults`);
- :mod:`~sealbench.platforms.attester`, :mod:`~sealbench.platforms.storage`,
  :mod:`~sealbench.platforms.errors` — evidence sources, object storage (with the local
  filesystem bucket) and the errors every implementation raises.

The implementations live in their own packages, found by entry point: Google's Confidential
Space in :mod:`sealbench.gcp`, the INSECURE mock in :mod:`sealbench.mocktee`. Importing this
package pulls in no cloud SDK.
"""

from sealbench.platforms.attester import Attester, LauncherAttester
from sealbench.platforms.errors import (
    AttesterError,
    CloudError,
    ConcurrentPolicyChange,
    CredentialError,
    InvalidObjectName,
    InvalidStorageUri,
    KeyAccessDenied,
    KeyNotFound,
    KmsError,
    KmsIntegrityError,
    ObjectCorrupted,
    ObjectNotFound,
    ObjectTooLarge,
    PolicyInputError,
    PolicyWriteError,
    StorageAccessDenied,
    StorageError,
)
from sealbench.platforms.storage import (
    BlobStore,
    LocalBlobStore,
    StorageLocation,
    join_name,
    open_storage_uri,
    parse_storage_uri,
    validate_object_name,
)

__all__ = [
    "Attester",
    "AttesterError",
    "BlobStore",
    "CloudError",
    "ConcurrentPolicyChange",
    "CredentialError",
    "InvalidObjectName",
    "InvalidStorageUri",
    "KeyAccessDenied",
    "KeyNotFound",
    "KmsError",
    "KmsIntegrityError",
    "LauncherAttester",
    "LocalBlobStore",
    "ObjectCorrupted",
    "ObjectNotFound",
    "ObjectTooLarge",
    "PolicyInputError",
    "PolicyWriteError",
    "StorageAccessDenied",
    "StorageError",
    "StorageLocation",
    "join_name",
    "open_storage_uri",
    "parse_storage_uri",
    "validate_object_name",
]
