"""An asset owner's cloud account as the client uses it: where its KMS key, bucket and workload
identity pool are, and the production clients (Cloud KMS, Cloud Storage, the policy writer)
acting as the owner.

Today the one implementation is :class:`InsecureMockOwnerCloud`, the owner's account in the
local mock confidential cloud (``sealbench mock-tee up``): it provisions the owner's project,
key ring, key and bucket on first use, exactly as an owner does by hand on Google Cloud, and
gets an owner access token from the mock's INSECURE control endpoint. Everything else goes
through the same Google client libraries and REST calls as production.

Naming in the mock, derived from the owner's registry email so that each owner is separate::

    project      sb-<slug of the email>            (number: 12 digits from its SHA-256)
    KMS key      projects/<project>/locations/global/keyRings/sealbench/cryptoKeys/assets
    bucket       <project>-assets                  (assets under datasets/<id>/, models/<id>/)
    pool         projects/<number>/locations/global/workloadIdentityPools/sealbench
                 /providers/attestation
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from sealbench.client.errors import CloudError, ConfigError
from sealbench.server.schemas import CoordinatesPublic, CoordinatesUpdate

if TYPE_CHECKING:  # the cloud SDKs load only when a command needs them
    from google.oauth2.credentials import Credentials

    from sealbench.cloud.kms import KmsKeyWrapper
    from sealbench.cloud.policy import PoolProvider
    from sealbench.cloud.policy_writer import SyncReport
    from sealbench.cloud.storage import BlobStore
    from sealbench.crypto.workload import WorkloadIdentity
    from sealbench.mocktee import MockEndpoints, OwnerSetup

__all__ = [
    "POOL_ID",
    "PROVIDER_ID",
    "InsecureMockOwnerCloud",
    "mock_project_for",
    "pool_provider_from_name",
]

log = logging.getLogger("sealbench.client")

POOL_ID: Final = "sealbench"
PROVIDER_ID: Final = "attestation"
_PROVIDER_NAME = re.compile(
    r"^projects/([0-9]+)/locations/global/workloadIdentityPools/([a-z0-9-]{4,32})"
    r"/providers/([a-z0-9-]{4,32})$"
)


def mock_project_for(email: str) -> tuple[str, str]:
    """(project id, project number) of an owner in the mock, from its email."""
    slug = re.sub(r"[^a-z0-9]+", "-", email.lower()).strip("-")[:20].strip("-") or "owner"
    digest = hashlib.sha256(email.lower().encode()).hexdigest()
    number = 10**11 + int(digest[:15], 16) % (9 * 10**11)
    return f"sb-{slug}-{digest[:6]}", str(number)


def pool_provider_from_name(name: str) -> PoolProvider:
    """A :class:`~sealbench.cloud.policy.PoolProvider` from its full resource name."""
    from sealbench.cloud.policy import PoolProvider

    match = _PROVIDER_NAME.match(name)
    if not match:
        raise ConfigError(
            f"{name!r} is not a workload identity pool provider name",
            hint="expected projects/NUMBER/locations/global/workloadIdentityPools/POOL/"
            "providers/PROVIDER",
        )
    return PoolProvider(*match.groups())


@dataclass(frozen=True)
class InsecureMockOwnerCloud:
    """One owner's account in the INSECURE local mock cloud (never for real data)."""

    endpoints: MockEndpoints
    setup: OwnerSetup  # holds an owner access token: never log it

    @classmethod
    def connect(cls, state_dir: Path, email: str) -> InsecureMockOwnerCloud:
        """Read the running mock's endpoints from ``state_dir`` and provision the owner."""
        from sealbench.mocktee import MockEndpoints, ProvisionError, provision_owner

        try:
            endpoints = MockEndpoints.load(state_dir)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"no running mock TEE found in {state_dir}",
                hint="start one with 'sealbench mock-tee up --state-dir DIR' and pass that "
                "directory with --mock-tee (or 'sealbench profile add ... --mock-tee DIR')",
            ) from exc
        project_id, number = mock_project_for(email)
        try:
            setup = provision_owner(
                endpoints, email=email, project_id=project_id, project_number=number
            )
        except ProvisionError as exc:
            raise CloudError(
                f"the mock cloud refused to set up {email}: {exc}",
                hint="check that 'sealbench mock-tee up' is still running",
            ) from exc
        from sealbench.mocktee.state import warn_insecure_once

        warn_insecure_once("sealbench.client", "INSECURE mock cloud: never for real data")
        log.info("using the mock cloud in %s for %s", state_dir, email)
        return cls(endpoints, setup)

    @property
    def issuer_uri(self) -> str:
        """The attestation issuer the owner's pool trusts (the mock verifier, never Google)."""
        return f"{self.endpoints.issuer}/"

    @property
    def key_name(self) -> str:
        return str(self.setup.key_name)

    def pool_provider_name(self) -> str:
        return (
            f"projects/{self.setup.project_number}/locations/global/workloadIdentityPools/"
            f"{POOL_ID}/providers/{PROVIDER_ID}"
        )

    def default_coordinates(
        self, kind: Literal["dataset", "model"], asset_id: int
    ) -> CoordinatesUpdate:
        return CoordinatesUpdate(
            kms_key_name=self.key_name,
            storage_uri=f"gs://{self.setup.bucket}/{kind}s/{asset_id}",
            wip_provider=self.pool_provider_name(),
        )

    def credentials(self) -> Credentials:
        from google.oauth2.credentials import Credentials

        return Credentials(self.setup.access_token)  # type: ignore[no-untyped-call]

    def key_wrapper(self, key_name: str) -> KmsKeyWrapper:
        from sealbench.cloud.kms import KmsKeyWrapper, make_kms_client

        return KmsKeyWrapper(key_name, make_kms_client(self.credentials(), self.endpoints.kms))

    def blob_store(self, uri: str) -> tuple[BlobStore, str]:
        """``(store, prefix)`` for ``gs://bucket/prefix`` as the owner."""
        from sealbench.cloud.errors import InvalidStorageUri
        from sealbench.cloud.gcs import GcsBlobStore, make_storage_client
        from sealbench.cloud.storage import open_storage_uri

        client = make_storage_client(
            self.setup.project_id, self.credentials(), self.endpoints.storage
        )
        try:
            return open_storage_uri(uri, lambda bucket: GcsBlobStore(client, bucket))
        except InvalidStorageUri as exc:
            raise ConfigError(str(exc), hint="use --storage gs://BUCKET/PREFIX") from exc

    def sync_policy(
        self,
        coordinates: CoordinatesPublic | CoordinatesUpdate,
        workloads: frozenset[WorkloadIdentity],
        *,
        include_data: bool,
        result_bucket: str | None = None,
        metrics_versions: frozenset[str] = frozenset(),
    ) -> SyncReport:
        """Write the pool provider (its condition pins ``metrics_versions`` and the mock's own
        endpoints) and the key's and bucket's (and ``result_bucket``'s) IAM
        bindings for ``workloads``; returns the writer's
        :class:`~sealbench.cloud.policy_writer.SyncReport`."""
        from sealbench.cloud.errors import CloudError as AdapterError
        from sealbench.cloud.policy import AssetPolicy
        from sealbench.cloud.policy_writer import PolicyWriter
        from sealbench.cloud.storage import parse_storage_uri

        location = parse_storage_uri(coordinates.storage_uri)
        try:
            policy = AssetPolicy(
                provider=pool_provider_from_name(coordinates.wip_provider),
                key_name=coordinates.kms_key_name,
                bucket=location.bucket,
                workloads=workloads,
                include_data=include_data,
                issuer_uri=self.issuer_uri,
                result_bucket=result_bucket,
                metrics_versions=metrics_versions,
                endpoints=self.endpoints.service_endpoints(),
            )
        except AdapterError as exc:
            raise ConfigError(str(exc), hint="check the bucket and key names") from exc
        writer = PolicyWriter.from_credentials(
            self.credentials(),
            iam_url=self.endpoints.iam,
            kms_url=self.endpoints.kms,
            storage_url=self.endpoints.storage,
        )
        try:
            return writer.sync(policy)
        except AdapterError as exc:
            raise CloudError(f"writing the policy failed: {exc}") from exc
