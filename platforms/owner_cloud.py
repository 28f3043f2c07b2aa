"""An asset owner's cloud account, as the client uses it (:class:`OwnerCloud`): where its key,
bucket and key-release policy are, sealing into them, syncing the policy, and ``sealbench
doctor``'s checks of it (:class:`Check`).

A :class:`~sealbench.platforms.platform.Platform` hands out its owner's cloud
(:meth:`~sealbench.platforms.platform.Platform.owner_cloud`); the client names no
implementation. The shipped ones: Google Cloud (:mod:`sealbench.gcp.owner_cloud`) and the
INSECURE mock's account, the same code with the mock's endpoints
(:mod:`sealbench.mocktee.owner_cloud`).

Failures are raised as :class:`~sealbench.platforms.errors.OwnerCloudError` (with the command
that fixes them as ``hint``), bad settings as
:class:`~sealbench.platforms.errors.OwnerSettingsError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sealbench.contract.spec import ServiceEndpoints
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.crypto.envelope import KeyWrapper
    from sealbench.platforms.errors import OwnerCloudError
    from sealbench.platforms.storage import BlobStore

__all__ = [
    "AssetCoordinates",
    "BindingChanges",
    "Check",
    "Coordinates",
    "OwnerCloud",
    "PolicyReport",
    "RunnerSettings",
]


class Coordinates(Protocol):
    """Where an asset is sealed: its key, its objects, the pool provider its key release
    federates through (the registry's coordinates have these three fields)."""

    @property
    def kms_key_name(self) -> str: ...

    @property
    def storage_uri(self) -> str: ...

    @property
    def wip_provider(self) -> str: ...


@dataclass(frozen=True)
class AssetCoordinates:
    """An owner's default :class:`Coordinates` for one asset."""

    kms_key_name: str
    storage_uri: str
    wip_provider: str


class BindingChanges(Protocol):
    """The members a policy sync added to and removed from one grant."""

    @property
    def added(self) -> tuple[str, ...]: ...

    @property
    def removed(self) -> tuple[str, ...]: ...

    @property
    def changed(self) -> bool: ...


class PolicyReport(Protocol):
    """What one :meth:`OwnerCloud.sync_policy` changed."""

    @property
    def pool_created(self) -> bool: ...

    @property
    def provider(self) -> str: ...

    @property
    def key(self) -> BindingChanges: ...

    @property
    def bucket(self) -> BindingChanges | None: ...

    @property
    def result_bucket(self) -> BindingChanges | None: ...

    @property
    def changed(self) -> bool: ...


@dataclass(frozen=True)
class Check:
    """One ``sealbench doctor`` item: ``ok``, what was found, and (when not ok) the command that
    fixes it. ``verified`` False: nothing found is wrong, but doctor could not confirm it (a
    role held under an IAM Condition or through a group, a policy it may not read); ``fix`` then
    says what would make it certain."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    verified: bool = True


@dataclass(frozen=True)
class RunnerSettings:
    """Where the owner's confidential VMs run: zone, service account, machine type."""

    zone: str | None
    service_account: str | None
    machine_type: str = "n2d-standard-2"
    #: A confidential GPU (``--accelerator``), ``gpus`` of them: checked against the GPU quota.
    accelerator: str | None = None
    gpus: int = 0


@runtime_checkable
class OwnerCloud(Protocol):
    """What an asset owner does in its own cloud: its key and bucket, sealing into them, the
    coordinates it records on the registry, the key-release policy it syncs, and doctor's
    checks of all that."""

    @property
    def project_id(self) -> str: ...

    @property
    def project_number(self) -> str:
        """The project's number (what workload identity pool names carry)."""
        ...

    @property
    def key_name(self) -> str: ...

    @property
    def bucket(self) -> str:
        """The owner's own bucket (where its assets, and by default its results, go)."""
        ...

    @property
    def result_prefix(self) -> str:
        """Where its production runs write results unless told otherwise: a storage URI under
        :attr:`bucket` (Google: ``gs://BUCKET/results``)."""
        ...

    @property
    def issuer_uri(self) -> str:
        """The attestation issuer the owner's key-release policy trusts."""
        ...

    @property
    def pinned_endpoints(self) -> ServiceEndpoints | None:
        """The token destinations its policy pins and runs must name (None: the platform's
        own, which runs must not name)."""
        ...

    def credentials(self) -> Any:
        """The owner's own credentials (also what launches its confidential VMs)."""
        ...

    def names(self) -> dict[str, str]:
        """Its key, bucket and policy resources by label (what ``profile show`` prints)."""
        ...

    def default_coordinates(
        self, kind: Literal["dataset", "model"], asset_id: int
    ) -> AssetCoordinates: ...

    def ensure_key_and_bucket(self, *, key: bool = True, bucket: bool = True) -> list[str]:
        """Locate the owner's own key and bucket, creating what is missing."""
        ...

    def key_wrapper(self, key_name: str) -> KeyWrapper: ...

    def blob_store(self, uri: str) -> tuple[BlobStore, str]: ...

    def failure(
        self, exc: BaseException, doing: str, *, bucket: str | None = None
    ) -> OwnerCloudError:
        """``exc`` (raised while ``doing``) as one line naming the resource, with the fix."""
        ...

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
    ) -> PolicyReport:
        """Write the key-release policy for ``workloads``; a soft-deleted identity pool or
        provider is undeleted only with ``undelete`` (else refused, nothing written)."""
        ...

    def doctor_checks(
        self, runner: RunnerSettings | None = None, image_reference: str | None = None
    ) -> list[Check]:
        """``sealbench doctor``'s read-only checks of this account (and of ``runner``'s
        account and quota, and its access to ``image_reference``, when given). The first
        check is whether the account can be reached at all (credentials); when it fails, it is
        the only one."""
        ...

    def probe_condition(
        self,
        coordinates: Coordinates,
        workloads: frozenset[WorkloadIdentity],
        *,
        include_data: bool,
        experimental_gpu_images: frozenset[str] = frozenset(),
        experimental_benchmark_ids: frozenset[str] = frozenset(),
    ) -> Check:
        """``doctor --probe-condition``: whether the cloud accepts the policy
        :meth:`sync_policy` would write for these workloads (may write, then remove, a
        throwaway resource)."""
        ...
