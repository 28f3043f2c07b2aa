"""An asset owner's Google Cloud project as the client uses it (the
:class:`~sealbench.platforms.owner_cloud.OwnerCloud` the Confidential Space platform hands out):
where its KMS key, bucket and workload identity pool are, and the production clients (Cloud
KMS, Cloud Storage, the IAM REST API through google-auth's authorized session) acting as the
owner. Failures are translated here, once, into one-line
:class:`~sealbench.platforms.errors.OwnerCloudError` s naming the resource with the ``gcloud``
command that fixes them (:func:`~sealbench.gcp.failures.cloud_failure`).

:class:`GcpOwnerCloud` is the owner's Google Cloud project (Application Default Credentials,
optionally impersonating; Google's endpoints unless a profile overrides them, the only other
difference the clients see); the INSECURE mock's account
(:class:`sealbench.mocktee.owner_cloud.InsecureMockOwnerCloud`) is the same class with the local
mock's endpoints, an owner token and the mock's platform.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, Literal

from sealbench.gcp.failures import api_disabled, bucket_create_command, cloud_failure
from sealbench.platforms.errors import OwnerCloudError as CloudError
from sealbench.platforms.errors import OwnerSettingsError as ConfigError
from sealbench.platforms.owner_cloud import AssetCoordinates, Check, Coordinates, RunnerSettings

if TYPE_CHECKING:  # the cloud SDKs load only when a command needs them
    from google.auth.credentials import Credentials

    from sealbench.contract.spec import ServiceEndpoints
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.gcp.kms import KmsKeyWrapper
    from sealbench.gcp.policy import AssetPolicy, PoolProvider
    from sealbench.gcp.policy_writer import SyncReport
    from sealbench.platforms.storage import BlobStore

__all__ = [
    "POOL_ID",
    "PROVIDER_ID",
    "GcpOwnerCloud",
    "GoogleApis",
    "PlatformPolicy",
    "confidential_space_platform",
    "gcp_credentials",
    "gcp_owner_cloud",
    "pool_provider_from_name",
    "project_number_of",
]

log = logging.getLogger("sealbench.client")

POOL_ID: Final = "sealbench"
PROVIDER_ID: Final = "attestation"
_PROVIDER_NAME = re.compile(
    r"^projects/([0-9]+)/locations/global/workloadIdentityPools/([a-z0-9-]{4,32})"
    r"/providers/([a-z0-9-]{4,32})$"
)


def pool_provider_from_name(name: str) -> PoolProvider:
    """A :class:`~sealbench.gcp.policy.PoolProvider` from its full resource name."""
    from sealbench.gcp.policy import PoolProvider

    match = _PROVIDER_NAME.match(name)
    if not match:
        raise ConfigError(
            f"{name!r} is not a workload identity pool provider name",
            hint="expected projects/NUMBER/locations/global/workloadIdentityPools/POOL/"
            "providers/PROVIDER",
        )
    return PoolProvider(*match.groups())


@dataclass(frozen=True)
class PlatformPolicy:
    """What an owner's key-release policy pins for the TEE platform its workloads run on: the
    attestation issuer its pool trusts and the token destinations runs may name (None:
    Google's own, so the endpoint overrides must be absent)."""

    name: str
    issuer_uri: str
    endpoints: ServiceEndpoints | None


def confidential_space_platform(overrides: Mapping[str, str] | None = None) -> PlatformPolicy:
    """Google Cloud Confidential Space: Google's verifier, Google's endpoints; or, with a
    profile's endpoint ``overrides`` (``attestation``, ``sts``, ``kms``, ``storage``), the
    issuer and token destinations they name, pinned exactly."""
    from sealbench.contract.spec import ServiceEndpoints
    from sealbench.gcp.credentials import DEFAULT_STS_URL
    from sealbench.gcp.policy import CONFIDENTIAL_SPACE_ISSUER_URI

    given = dict(overrides or {})
    issuer = given.get("attestation", CONFIDENTIAL_SPACE_ISSUER_URI)
    if not issuer.endswith("/"):
        issuer += "/"
    endpoints = None
    if given.keys() & {"sts", "kms", "storage"}:
        endpoints = ServiceEndpoints(
            given.get("sts", DEFAULT_STS_URL),
            given.get("kms", GoogleApis.kms),
            given.get("storage", GoogleApis.storage),
        )
    return PlatformPolicy("confidential-space", issuer, endpoints)


@dataclass(frozen=True)
class GoogleApis:
    """The API endpoints an owner's clients call: Google's, or (tests, the mock) others, the
    only difference the clients see."""

    kms: str = "https://cloudkms.googleapis.com"
    storage: str = "https://storage.googleapis.com"
    iam: str = "https://iam.googleapis.com"
    compute: str = "https://compute.googleapis.com"
    serviceusage: str = "https://serviceusage.googleapis.com"
    cloudresourcemanager: str = "https://cloudresourcemanager.googleapis.com"
    artifactregistry: str = "https://artifactregistry.googleapis.com"

    @classmethod
    def with_overrides(cls, overrides: Mapping[str, str]) -> GoogleApis:
        """Google's endpoints, with those ``overrides`` names replaced (other names, such as
        ``sts`` and ``attestation``, are the platform's: see
        :func:`confidential_space_platform`)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v.rstrip("/") for k, v in overrides.items() if k in names})


@dataclass(frozen=True)
class GcpOwnerCloud:
    """An owner's Google Cloud project: a KMS key ring and key, a bucket and a workload identity
    pool, reached with the owner's own credentials (Application Default Credentials, or a
    service account they impersonate; never a key file written by sealbench) through
    google-cloud-kms, google-cloud-storage and the IAM REST API.

    Default names, derived from the project and overridable per command::

        KMS key  projects/<project>/locations/<location>/keyRings/<key_ring>/cryptoKeys/<key>
        bucket   <bucket>            (assets under datasets/<id>/, models/<id>/)
        pool     projects/<number>/locations/global/workloadIdentityPools/<pool>
                 /providers/<provider>
    """

    project_id: str
    project_number: str
    #: The owner's credentials, resolved on first use (names need none).
    credentials_source: Callable[[], Credentials] = field(repr=False)
    platform: PlatformPolicy
    location: str = "global"
    key_ring: str = "sealbench"
    key: str = "assets"
    bucket: str = ""
    pool_id: str = POOL_ID
    provider_id: str = PROVIDER_ID
    apis: GoogleApis = field(default_factory=GoogleApis)
    #: Where a bucket created here lives; None: a missing bucket is not created (see
    #: :meth:`ensure_key_and_bucket`).
    bucket_location: str | None = None

    def __post_init__(self) -> None:
        if not self.project_number.isdigit():
            raise ConfigError(
                f"project number {self.project_number!r} is not a number",
                hint="'gcloud projects describe PROJECT --format=value(projectNumber)' prints it",
            )
        if not self.bucket:
            object.__setattr__(self, "bucket", f"{self.project_id}-sealbench")

    @property
    def issuer_uri(self) -> str:
        return self.platform.issuer_uri

    @property
    def result_prefix(self) -> str:
        return f"gs://{self.bucket}/results"

    def credentials(self) -> Credentials:
        return self.credentials_source()

    @property
    def key_name(self) -> str:
        return (
            f"projects/{self.project_id}/locations/{self.location}/keyRings/{self.key_ring}"
            f"/cryptoKeys/{self.key}"
        )

    def pool_provider_name(self) -> str:
        return (
            f"projects/{self.project_number}/locations/global/workloadIdentityPools/"
            f"{self.pool_id}/providers/{self.provider_id}"
        )

    @property
    def pinned_endpoints(self) -> ServiceEndpoints | None:
        return self.platform.endpoints

    def names(self) -> dict[str, str]:
        """The key, bucket and pool provider (no credentials needed: ``profile show``)."""
        return {
            "KMS key": self.key_name,
            "bucket": f"gs://{self.bucket}",
            "bucket location": self.bucket_location or "not chosen (required to create it)",
            "KMS location": self.location,
            "pool provider": self.pool_provider_name(),
        }

    def failure(
        self, exc: BaseException, doing: str, *, bucket: str | None = None
    ) -> CloudError:
        return cloud_failure(exc, doing, project=self.project_id, bucket=bucket)

    def default_coordinates(
        self, kind: Literal["dataset", "model"], asset_id: int
    ) -> AssetCoordinates:
        return AssetCoordinates(
            kms_key_name=self.key_name,
            storage_uri=f"gs://{self.bucket}/{kind}s/{asset_id}",
            wip_provider=self.pool_provider_name(),
        )

    def ensure_key_and_bucket(self, *, key: bool = True, bucket: bool = True) -> list[str]:
        """Locate the key ring, the ``ENCRYPT_DECRYPT`` key (``key``) and the bucket
        (``bucket``), creating what is missing (what an owner otherwise does by hand with
        gcloud); existing ones are used as they are. Returns what was created."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        from sealbench.gcp.gcs import make_storage_client
        from sealbench.gcp.kms import make_kms_client

        kms_client = make_kms_client(self.credentials(), self.apis.kms)
        parent = f"projects/{self.project_id}/locations/{self.location}"
        ring = f"{parent}/keyRings/{self.key_ring}"
        storage = make_storage_client(self.project_id, self.credentials(), self.apis.storage)
        where = f"--location {self.location} --project {self.project_id}"
        steps: list[tuple[str, Callable[[], object], Callable[[], object], str]] = [
            (f"key ring {ring}", lambda: kms_client.get_key_ring(request={"name": ring}),
             lambda: kms_client.create_key_ring(
                 request={"parent": parent, "key_ring_id": self.key_ring, "key_ring": {}}),
             f"gcloud kms keyrings create {self.key_ring} {where}"),
            (f"key {self.key_name}",
             lambda: kms_client.get_crypto_key(request={"name": self.key_name}),
             lambda: kms_client.create_crypto_key(
                 request={"parent": ring, "crypto_key_id": self.key,
                          "crypto_key": {"purpose": "ENCRYPT_DECRYPT"}}),
             f"gcloud kms keys create {self.key} --keyring {self.key_ring} --purpose "
             f"encryption {where}"),
        ] if key else []
        if bucket:
            steps.append((f"bucket gs://{self.bucket}",
                          lambda: storage.get_bucket(self.bucket),
                          lambda: self._create_bucket(storage),
                          bucket_create_command(self.bucket, self.project_id,
                                                self.bucket_location or "LOCATION")))
        created = []
        for what, locate, create, command in steps:
            try:
                locate()
                continue
            except gexc.NotFound:
                pass
            except gexc.Forbidden as exc:  # may be usable without being visible to the caller
                if api_disabled(exc) is None:
                    log.info("cannot look up %s (%s): using it as named", what, exc.message)
                    continue
                raise cloud_failure(exc, f"locating {what}", project=self.project_id) from exc
            except (gexc.GoogleAPICallError, auth_exc.GoogleAuthError) as exc:
                raise cloud_failure(exc, f"locating {what}", project=self.project_id) from exc
            try:
                create()
            except gexc.Conflict:
                continue  # created meanwhile: use it
            except gexc.GoogleAPICallError as exc:
                raise CloudError(
                    f"{what} does not exist and creating it failed: {exc.code} "
                    f"{str(exc.message)[:200]}",
                    hint=f"someone allowed to (roles/cloudkms.admin, roles/storage.admin) "
                    f"creates it: {command}",
                ) from exc
            log.info("created %s", what)
            created.append(what)
        return created

    def _create_bucket(self, storage: Any) -> object:
        """Create the owner's bucket where its profile says (never in Google's default, the US
        multi-region, by omission), with uniform bucket-level access (Google lets workload
        identity federation principals into Cloud Storage only on such buckets, and
        secure-by-default organisations refuse a bucket without it) and public access
        prevention enforced."""
        if self.bucket_location is None:
            raise ConfigError(
                f"bucket gs://{self.bucket} does not exist, and no location is chosen for it",
                hint="choose where your data lives (data residency): add the profile again "
                "with --bucket-location (EU, europe-west4, US, ...), or create the bucket "
                f"yourself: {bucket_create_command(self.bucket, self.project_id)}")
        bucket = storage.bucket(self.bucket)
        bucket.iam_configuration.uniform_bucket_level_access_enabled = True
        bucket.iam_configuration.public_access_prevention = "enforced"
        return storage.create_bucket(bucket, location=self.bucket_location)

    def key_wrapper(self, key_name: str) -> KmsKeyWrapper:
        from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client

        return KmsKeyWrapper(key_name, make_kms_client(self.credentials(), self.apis.kms))

    def blob_store(self, uri: str) -> tuple[BlobStore, str]:
        """``(store, prefix)`` for ``gs://bucket/prefix`` as the owner."""
        from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
        from sealbench.platforms.errors import InvalidStorageUri
        from sealbench.platforms.storage import open_storage_uri

        client = make_storage_client(self.project_id, self.credentials(), self.apis.storage)
        try:
            return open_storage_uri(uri, lambda bucket: GcsBlobStore(client, bucket))
        except InvalidStorageUri as exc:
            raise ConfigError(str(exc), hint="use --storage gs://BUCKET/PREFIX") from exc

    def sync_policy(
        self,
        coordinates: Coordinates,
        workloads: frozenset[WorkloadIdentity],
        *,
        include_data: bool,
        result_bucket: str | None = None,
        experimental_gpu_images: frozenset[str] = frozenset(),
        experimental_benchmark_ids: frozenset[str] = frozenset(),
        undelete: bool = False,
    ) -> SyncReport:
        """Write the pool provider (its condition pins the platform's issuer and endpoints; each
        workload's uid names its benchmark and plug-in pin) and the key's and bucket's (and
        ``result_bucket``'s) IAM bindings for ``workloads``; returns the writer's
        :class:`~sealbench.gcp.policy_writer.SyncReport`. Nothing is written when a check
        fails first: a soft-deleted pool or provider (undeleted only with ``undelete``), a
        bucket without uniform bucket-level access, an allow policy past 1,500 principals."""
        from sealbench.gcp.policy_writer import (
            BucketNotUniform,
            PolicyTooLarge,
            PolicyWriter,
            PoolDeleted,
        )
        from sealbench.platforms.errors import CloudError as AdapterError
        from sealbench.platforms.storage import parse_storage_uri

        location = parse_storage_uri(coordinates.storage_uri)
        policy = self.asset_policy(
            coordinates, workloads, include_data=include_data, result_bucket=result_bucket,
            experimental_gpu_images=experimental_gpu_images,
            experimental_benchmark_ids=experimental_benchmark_ids,
        )
        writer = PolicyWriter.from_credentials(
            self.credentials(),
            iam_url=self.apis.iam,
            kms_url=self.apis.kms,
            storage_url=self.apis.storage,
        )
        try:
            return writer.sync(policy, undelete=undelete)
        except PoolDeleted as exc:
            raise CloudError(f"writing the key-release policy: {exc}",
                             hint=f"run the same 'sealbench policy sync' with --undelete (or: "
                             f"{exc.command})") from exc
        except BucketNotUniform as exc:
            raise CloudError(f"writing the key-release policy: {exc}",
                             hint=exc.command) from exc
        except PolicyTooLarge as exc:
            raise CloudError(f"writing the key-release policy: {exc}",
                             hint="see docs/gcp-setup.md, 'How many approvals a key and a "
                             "bucket hold'") from exc
        except AdapterError as exc:
            raise cloud_failure(exc, "writing the key-release policy", project=self.project_id,
                                bucket=location.bucket) from exc

    def asset_policy(
        self,
        coordinates: Coordinates,
        workloads: frozenset[WorkloadIdentity],
        *,
        include_data: bool,
        result_bucket: str | None = None,
        experimental_gpu_images: frozenset[str] = frozenset(),
        experimental_benchmark_ids: frozenset[str] = frozenset(),
    ) -> AssetPolicy:
        """The :class:`~sealbench.gcp.policy.AssetPolicy` :meth:`sync_policy` writes (and
        ``doctor --probe-condition`` probes) for ``workloads``."""
        from sealbench.gcp.policy import AssetPolicy
        from sealbench.platforms.errors import CloudError as AdapterError
        from sealbench.platforms.storage import parse_storage_uri

        location = parse_storage_uri(coordinates.storage_uri)
        try:
            return AssetPolicy(
                provider=pool_provider_from_name(coordinates.wip_provider),
                key_name=coordinates.kms_key_name,
                bucket=location.bucket,
                workloads=workloads,
                include_data=include_data,
                issuer_uri=self.platform.issuer_uri,
                result_bucket=result_bucket,
                endpoints=self.platform.endpoints,
                experimental_gpu_images=experimental_gpu_images,
                experimental_benchmark_ids=experimental_benchmark_ids,
            )
        except ConfigError:
            raise
        except AdapterError as exc:
            raise ConfigError(str(exc), hint="check the bucket and key names") from exc

    def doctor_checks(
        self, runner: RunnerSettings | None = None, image_reference: str | None = None
    ) -> list[Check]:
        """``sealbench doctor``'s checks of this project (:mod:`sealbench.gcp.doctor`)."""
        from sealbench.gcp.doctor import check_owner_cloud

        return check_owner_cloud(self, runner, image_reference)

    def probe_condition(
        self,
        coordinates: Coordinates,
        workloads: frozenset[WorkloadIdentity],
        *,
        include_data: bool,
        experimental_gpu_images: frozenset[str] = frozenset(),
        experimental_benchmark_ids: frozenset[str] = frozenset(),
    ) -> Check:
        """``doctor --probe-condition`` (:mod:`sealbench.gcp._doctor_probe`)."""
        from sealbench.gcp._doctor_probe import probe_condition

        return probe_condition(
            self, coordinates, workloads, include_data=include_data,
            experimental_gpu_images=experimental_gpu_images,
            experimental_benchmark_ids=experimental_benchmark_ids,
        )


def project_number_of(
    project: str, credentials: Credentials, resource_manager: str = GoogleApis.cloudresourcemanager
) -> str:
    """The number of ``project`` (Resource Manager ``projects.get`` as the caller, what
    ``gcloud projects describe`` prints)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
    try:
        reply = session.get(f"{resource_manager}/v1/projects/{project}", timeout=30)
        if reply.status_code != 200:
            raise gexc.from_http_response(reply)  # type: ignore[no-untyped-call]
        number = str(reply.json().get("projectNumber", ""))
    except (gexc.GoogleAPICallError, auth_exc.GoogleAuthError, OSError, ValueError) as exc:
        raise cloud_failure(exc, f"looking up the number of project {project}",
                            project=project) from exc
    if not number.isdigit():
        raise CloudError(f"Resource Manager gave no number for project {project}")
    return number


def gcp_credentials(impersonate_service_account: str | None = None) -> Credentials:
    """The owner's Application Default Credentials (``gcloud auth application-default login``,
    or the VM's), optionally impersonating ``impersonate_service_account``."""
    import google.auth
    from google.auth import exceptions as auth_exc
    from google.auth import impersonated_credentials

    scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    try:
        credentials, _ = google.auth.default(scopes=scopes)
    except auth_exc.DefaultCredentialsError as exc:
        raise CloudError(
            "no Google Cloud credentials found",
            hint="run 'gcloud auth application-default login' (or run on a VM with a service "
            "account)",
        ) from exc
    if impersonate_service_account:
        target: Credentials = impersonated_credentials.Credentials(  # type: ignore[no-untyped-call]
            source_credentials=credentials,
            target_principal=impersonate_service_account,
            target_scopes=scopes,
        )
        return target
    result: Credentials = credentials
    return result


def gcp_owner_cloud(
    *,
    project: str,
    project_number: str | None = None,
    impersonate_service_account: str | None = None,
    location: str = "global",
    key_ring: str = "sealbench",
    key: str = "assets",
    bucket: str | None = None,
    bucket_location: str | None = None,
    pool: str = POOL_ID,
    provider: str = PROVIDER_ID,
    api_endpoints: Mapping[str, str] | None = None,
) -> GcpOwnerCloud:
    """The production owner cloud a profile's ``gcp`` settings name; the owner's Application
    Default Credentials (impersonating ``impersonate_service_account`` when set) are looked up
    when a call first needs them. A ``project_number`` of None is asked of Resource Manager now
    (:func:`project_number_of`, with those credentials). Endpoint overrides
    (``api_endpoints``) replace Google's endpoints and, for ``attestation``, ``sts``, ``kms``
    and ``storage``, what the key-release policy pins (the client warns of a replaced
    verifier)."""
    import functools

    overrides = dict(api_endpoints or {})
    apis = GoogleApis.with_overrides(overrides)
    credentials = functools.cache(functools.partial(gcp_credentials, impersonate_service_account))
    if project_number is None:
        project_number = project_number_of(project, credentials(), apis.cloudresourcemanager)
    return GcpOwnerCloud(
        project_id=project,
        project_number=project_number,
        credentials_source=credentials,
        location=location,
        key_ring=key_ring,
        key=key,
        bucket=bucket or "",
        bucket_location=bucket_location,
        pool_id=pool,
        provider_id=provider,
        apis=apis,
        platform=confidential_space_platform(overrides),
    )
