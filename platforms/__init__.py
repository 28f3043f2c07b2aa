"""The boundary to key management, object storage and identity federation: Google Cloud
implementations (Cloud KMS, Cloud Storage, google-auth external_account credentials, policy
writer) and local ones (a filesystem bucket).

This package module re-exports only the interfaces and the SDK-free pieces, so that importing it
pulls in no cloud SDK. The Google Cloud adapters live in their modules:

- :mod:`sealbench.gcp.gcs` — ``GcsBlobStore``, ``make_storage_client``
- :mod:`sealbench.gcp.kms` — ``KmsKeyWrapper``, ``make_kms_client``
- :mod:`sealbench.gcp.credentials` — ``workload_credentials``,
  ``workload_credentials_from_attester``
- :mod:`sealbench.gcp.policy` — the workload identity provider and IAM policy writer

The platform seam (SDK-free): :mod:`sealbench.platforms.platform` — the ``Platform`` interface and
its entry-point registry; :mod:`sealbench.gcp.confidential_space` — the Confidential Space
implementation (claim schema, rules, CEL and ``principalSet``).
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
