"""Google's :class:`~sealbench.platforms.access.AssetAccess`: how the enclave reaches each owner's
storage and key on Google Cloud (and on the mock, which serves the same APIs), what
:meth:`~sealbench.gcp.confidential_space.ConfidentialSpacePlatform.asset_access` hands out.

:class:`CloudAccess` builds one workload credential per owner pool (google-auth identity-pool
credentials that ask the run's attester for a fresh default token, the launcher socket inside the
TEE, and exchange it at the run spec's STS URL; no token file is read), then
a Cloud KMS :class:`~sealbench.gcp.kms.KmsKeyWrapper` for the owner's key and a
:class:`~sealbench.gcp.gcs.GcsBlobStore` for ``gs://`` locations (or a
:class:`~sealbench.platforms.LocalBlobStore` for ``file://``), all against the endpoints the run
spec names, as the enclave checked them against the platform that attested the run (it takes the
attested run's checked destinations, so no unchecked spec can reach it). Credentials are lazy:
the token exchange happens on the first storage or KMS call.

The result destination is written with the **data owner's** pool credential: the data owner
grants its workloads ``roles/storage.objectCreator`` on the result bucket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sealbench.contract.spec import AssetLocation, ServiceEndpoints
from sealbench.crypto.envelope import KeyWrapper
from sealbench.platforms.attester import Attester
from sealbench.platforms.storage import BlobStore, parse_storage_uri

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = ["CloudAccess"]


class CloudAccess:
    """:class:`AssetAccess` over Google Cloud (or the mock, whose endpoints the spec names)."""

    def __init__(self, destinations: ServiceEndpoints, attester: Attester) -> None:
        self._destinations = destinations  # checked against the attesting platform
        self._attester = attester
        self._credentials: dict[str, Credentials] = {}

    def _credential(self, provider: str) -> Credentials:
        from sealbench.gcp.credentials import workload_credentials_from_attester

        if provider not in self._credentials:
            self._credentials[provider] = workload_credentials_from_attester(
                provider, attester=self._attester, sts_url=self._destinations.sts_url
            )
        return self._credentials[provider]

    def store(self, uri: str, pool_provider: str) -> tuple[BlobStore, str]:
        from sealbench.gcp.gcs import GcsBlobStore, make_storage_client

        location = parse_storage_uri(uri)
        endpoint = self._destinations.storage_endpoint

        def gcs(bucket: str) -> BlobStore:
            client = make_storage_client(None, self._credential(pool_provider), endpoint)
            return GcsBlobStore(client, bucket)

        return location.open(gcs)

    def key_wrapper(self, owner: AssetLocation) -> KeyWrapper:
        from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client

        client = make_kms_client(self._credential(owner.pool_provider),
                                 self._destinations.kms_endpoint)
        return KmsKeyWrapper(owner.kms_key, client)
