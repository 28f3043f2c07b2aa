"""An asset owner's steps that touch its cloud: seal a dataset or model into its bucket and
record the coordinates on the registry, and sync its key's policy with the registry's approved
associations (reporting to the registry the grant set it wrote). Shared by ``sealbench dataset
seal|model seal|policy sync`` and ``sealbench demo``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from pydantic import ValidationError

from sealbench.client.assets.grants import AllowedWorkload, allowed_workloads, grants_digest
from sealbench.client.errors import CloudError, ConfigError, NotFoundError, RegistryError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.profiles import GcpSettings, PlatformAccount, ResolvedProfile
from sealbench.crypto.digest import Sha256Digest
from sealbench.platforms.errors import OwnerCloudError, OwnerSettingsError
from sealbench.platforms.owner_cloud import OwnerCloud, PolicyReport
from sealbench.server.schemas import CoordinatesPublic, CoordinatesUpdate, GrantsReport

if TYPE_CHECKING:
    from sealbench.client.assets.store import SealReport
    from sealbench.contract.spec import ServiceEndpoints

__all__ = [
    "PolicySync",
    "RunEndpoints",
    "SealOutcome",
    "account_issuer",
    "account_owner_cloud",
    "client_errors",
    "default_result_uri",
    "gcp_owner_cloud",
    "look_up_project_number",
    "owner_cloud",
    "platform_account",
    "run_endpoints",
    "seal_asset",
    "sharing_grants",
    "spec_endpoints",
    "sync_policy",
]

log = logging.getLogger("sealbench.client")


@contextlib.contextmanager
def client_errors() -> Iterator[None]:
    """The owner cloud's failures as the client's errors, with their message and hint:
    :class:`~sealbench.platforms.errors.OwnerSettingsError` as :class:`ConfigError` (exit 3),
    any other :class:`~sealbench.platforms.errors.OwnerCloudError` as :class:`CloudError`
    (exit 7)."""
    try:
        yield
    except OwnerSettingsError as exc:
        raise ConfigError(str(exc), hint=exc.hint) from exc
    except OwnerCloudError as exc:
        raise CloudError(str(exc), hint=exc.hint) from exc


class _ClientFacing:
    """An owner cloud whose every call raises the client's errors (:func:`client_errors`)."""

    def __init__(self, cloud: OwnerCloud) -> None:
        self._cloud = cloud

    def __repr__(self) -> str:
        return repr(self._cloud)

    def __getattr__(self, name: str) -> Any:
        with client_errors():
            found = getattr(self._cloud, name)
        if not callable(found):
            return found

        @functools.wraps(found)
        def call(*args: Any, **kwargs: Any) -> Any:
            with client_errors():
                return found(*args, **kwargs)

        return call


def _client_facing(build: Callable[[], OwnerCloud]) -> OwnerCloud:
    with client_errors():
        return cast(OwnerCloud, _ClientFacing(build()))


def owner_cloud(
    profile: ResolvedProfile, client: RegistryClient, mock_tee: Path | None
) -> OwnerCloud:
    """The owner's cloud for ``profile``, as its platform hands it out: its Google Cloud
    project (``gcp``, production: Confidential Space, Google's endpoints, the owner's
    Application Default Credentials), its account in the INSECURE mock cloud (``--mock-tee``
    or the profile's ``mock_tee``), or its account on another installed platform
    (``account``, :func:`account_owner_cloud`)."""
    from sealbench.client.backends import TeeBackend

    state = mock_tee or profile.profile.mock_tee
    if state is not None:
        email = client.me().email
        return _client_facing(lambda: TeeBackend.MOCK.platform.owner_cloud(
            state_dir=Path(state), email=email))
    if profile.profile.gcp is not None:
        return gcp_owner_cloud(profile.profile.gcp)
    if profile.profile.account is not None:
        return account_owner_cloud(profile.profile.account)
    raise ConfigError(
        f"profile {profile.name} has no cloud configured",
        hint="add one with 'sealbench profile add NAME --server URL --cloud gcp --project P "
        "--project-number N' (Google Cloud), or '--mock-tee DIR' (the state directory of "
        "'sealbench mock-tee up')",
    )


def _gcp_cloud(settings: GcpSettings, **changes: Any) -> OwnerCloud:
    """The Confidential Space platform's owner cloud for a profile's ``gcp`` settings."""
    from sealbench.client.backends import TeeBackend

    options: dict[str, Any] = {
        "project": settings.project,
        "project_number": settings.project_number,
        "impersonate_service_account": settings.impersonate_service_account,
        "location": settings.location,
        "key_ring": settings.key_ring,
        "key": settings.key,
        "bucket": settings.bucket,
        "bucket_location": settings.bucket_location,
        "pool": settings.pool,
        "provider": settings.provider,
        "api_endpoints": settings.api_endpoints,
    } | changes
    return _client_facing(
        lambda: TeeBackend.CONFIDENTIAL_SPACE.platform.owner_cloud(**options))


def account_owner_cloud(account: PlatformAccount) -> OwnerCloud:
    """The owner cloud of a profile's account on an installed platform this version does not
    ship, built by that platform (found by its entry-point name) from the account's settings;
    a :class:`ConfigError` when the platform is not installed here."""
    from sealbench.platforms.platform import UnknownPlatformError, load_platform

    try:
        platform = load_platform(account.platform)
    except UnknownPlatformError as exc:
        raise ConfigError(str(exc), hint=f"install the package that provides the "
                          f"{account.platform!r} platform") from exc
    return _client_facing(lambda: platform.owner_cloud(**account.settings))


#: The platforms whose accounts a profile holds in settings of their own (``gcp``, and the
#: mock's state directory), not as a :class:`PlatformAccount`.
_OWN_SETTINGS: Final = {"confidential-space": "--cloud gcp", "insecure-mock": "--mock-tee DIR"}


def platform_account(platform: str, settings: dict[str, str]) -> PlatformAccount:
    """A profile's account on the installed platform ``platform`` (one this version does not
    ship), its ``settings`` checked by that platform (it builds the owner cloud from them, without
    I/O); a :class:`ConfigError` saying what is wrong otherwise."""
    from sealbench.platforms.platform import installed_launcher_backends

    if platform in _OWN_SETTINGS:
        raise ConfigError(f"a {platform} account is not given as settings",
                          hint=f"use {_OWN_SETTINGS[platform]}")
    installed = sorted(set(installed_launcher_backends()) - set(_OWN_SETTINGS))
    if platform not in installed:
        raise ConfigError(
            f"no TEE platform named {platform[:40]!r} is installed",
            hint=("installed besides Google Cloud and the mock: " + ", ".join(installed))
            if installed else "use --cloud gcp or --mock-tee DIR, or install the platform",
        )
    try:
        account = PlatformAccount(platform=platform, settings=settings)
    except ValidationError as exc:
        raise ConfigError(f"cannot use these settings: {exc.errors()[0]['msg']}") from None
    account_owner_cloud(account).names()  # the platform refuses settings it cannot use
    return account


def account_issuer(account: PlatformAccount) -> str:
    """The attestation issuer (the ``iss`` its tokens carry) that an account's policies trust."""
    return account_owner_cloud(account).issuer_uri.rstrip("/")


def gcp_owner_cloud(settings: GcpSettings) -> OwnerCloud:
    """The production owner cloud a profile's ``gcp`` settings name; the owner's Application
    Default Credentials are looked up when a call first needs them. Endpoint overrides
    (``api_endpoints``) replace Google's endpoints and, for ``attestation``, ``sts``, ``kms``
    and ``storage``, what the key-release policy pins."""
    if "attestation" in settings.api_endpoints:
        log.warning("this profile trusts attestation tokens from %s instead of Google's "
                    "Confidential Space verifier", settings.api_endpoints["attestation"])
    return _gcp_cloud(settings)


def look_up_project_number(settings: GcpSettings) -> str:
    """The number of the profile's project, asked of the cloud with the credentials the
    profile will use (its endpoint overrides honoured)."""
    cloud = _gcp_cloud(settings, project_number=None)  # the platform looks it up
    return cloud.project_number


def gcp_issuer(settings: GcpSettings) -> str:
    """The attestation issuer the key-release policies of a profile's project trust."""
    return _gcp_cloud(settings).issuer_uri


@dataclass(frozen=True)
class RunEndpoints:
    """The token destinations a profile's runs name in their run spec (what
    :func:`sealbench.client.runs.single.build_spec` reads)."""

    endpoints: ServiceEndpoints

    def service_endpoints(self) -> ServiceEndpoints:
        return self.endpoints


def spec_endpoints(profile: ResolvedProfile) -> Any:
    """What runs of a profile's own cloud name as token destinations (:func:`run_endpoints` of
    a Google Cloud profile; for another platform's account, what its owner cloud pins; None for
    the mock's profile, whose endpoints ``sealbench run`` reads from the running mock). Typed
    ``Any`` as the mock's endpoints are where ``sealbench run`` passes both to
    :func:`~sealbench.client.runs.single.build_spec`, which reads only ``service_endpoints()``."""
    if profile.profile.mock_tee is not None:
        return None
    if profile.profile.gcp is not None:
        return run_endpoints(profile.profile.gcp)
    if profile.profile.account is not None:
        pinned = account_owner_cloud(profile.profile.account).pinned_endpoints
        return None if pinned is None else RunEndpoints(pinned)
    return None


def default_result_uri(profile: ResolvedProfile) -> str | None:
    """Where a production run of ``profile`` writes its result unless ``--result-uri`` says
    otherwise: ``results/`` in the owner's own bucket, as its platform spells a storage URI
    (None without a cloud of its own)."""
    if profile.profile.gcp is not None:
        return gcp_owner_cloud(profile.profile.gcp).result_prefix
    if profile.profile.account is not None:
        return account_owner_cloud(profile.profile.account).result_prefix
    return None


def run_endpoints(settings: GcpSettings) -> RunEndpoints | None:
    """What runs of a Google Cloud profile name as token destinations: None (Google's own)
    unless the profile overrides them, and then exactly what its policies pin."""
    pinned = _gcp_cloud(settings).pinned_endpoints
    return None if pinned is None else RunEndpoints(pinned)


def gcp_owner_cloud_names(settings: GcpSettings) -> dict[str, str]:
    """The key, bucket and pool provider a profile's ``gcp`` settings name (no credentials
    needed: what ``profile show`` prints)."""
    return gcp_owner_cloud(settings).names()


def coordinates(
    cloud: OwnerCloud,
    kind: AssetKind,
    asset_id: int,
    *,
    kms_key: str | None,
    storage: str | None,
    pool_provider: str | None,
) -> CoordinatesUpdate:
    """The owner's defaults for the asset, with any option given replacing its field."""
    default = cloud.default_coordinates(kind, asset_id)
    try:
        return CoordinatesUpdate(
            kms_key_name=kms_key or default.kms_key_name,
            storage_uri=storage or default.storage_uri,
            wip_provider=pool_provider or default.wip_provider,
        )
    except ValidationError as exc:
        option = {"kms_key_name": "--kms-key", "storage_uri": "--storage"}
        field = str(exc.errors()[0]["loc"][0])
        raise ConfigError(
            f"{option.get(field, '--pool-provider')} is not valid: {exc.errors()[0]['msg']}",
            hint="a key is projects/P/locations/L/keyRings/R/cryptoKeys/K, storage is "
            "gs://BUCKET/PREFIX, a pool provider is projects/NUMBER/locations/global/"
            "workloadIdentityPools/POOL/providers/PROVIDER",
        ) from None


@dataclass(frozen=True)
class SealOutcome:
    report: SealReport
    coordinates: CoordinatesPublic


def seal_asset(
    client: RegistryClient,
    cloud: OwnerCloud,
    kind: Literal["dataset", "model"],
    asset_id: int,
    source: Path,
    where: CoordinatesUpdate,
    progress: Callable[[int, int], None] | None = None,
) -> SealOutcome:
    """Seal ``source`` (a prepared dataset directory or an ONNX file) as registry asset
    ``asset_id`` to ``where``, after checking its digest is the registered one; then record
    ``where`` as the asset's coordinates. Interrupted seals resume when run again."""
    from sealbench.client.assets import store as sealing
    from sealbench.client.assets.prepare import prepared_digest
    from sealbench.crypto.digest import sha256_file

    if kind == "dataset":
        registered = client.get_dataset(asset_id).digest
    else:
        registered = client.get_model(asset_id).digest
    try:
        local = prepared_digest(source) if kind == "dataset" else sha256_file(source)
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc.strerror}") from exc
    if local != registered:
        raise ConfigError(
            f"{source} has digest {local}, but {kind} {asset_id} was registered as {registered}",
            hint=f"seal exactly what you registered, or register this {kind} anew",
        )
    from sealbench.platforms.storage import parse_storage_uri

    bucket = parse_storage_uri(where.storage_uri).bucket
    with client_errors():
        own_bucket = bucket == parse_storage_uri(
            cloud.default_coordinates(kind, asset_id).storage_uri).bucket
        cloud.ensure_key_and_bucket(key=where.kms_key_name == cloud.key_name, bucket=own_bucket)
        store, prefix = cloud.blob_store(where.storage_uri)
        wrapper = cloud.key_wrapper(where.kms_key_name)
    seal = sealing.seal_dataset if kind == "dataset" else sealing.seal_model
    try:
        report = seal(
            source, asset_id=str(asset_id), key_wrapper=wrapper, store=store, prefix=prefix,
            progress=progress,
        )
    except sealing.SealingError as exc:
        shown = cloud.failure(exc, f"sealing {kind} {asset_id}", bucket=bucket)
        failure = CloudError(str(shown), hint=shown.hint)
        if failure.hint and failure.hint.startswith("'sealbench doctor'"):
            failure.hint = ("fix the cause and run the same command again: sealing resumes "
                            "where it stopped")
        raise failure from exc
    stored = client.put_coordinates(kind, asset_id, where)
    return SealOutcome(report, stored)


@dataclass(frozen=True)
class PolicySync:
    grants: tuple[AllowedWorkload, ...]
    report: PolicyReport
    #: The grant-set digest reported to the registry for each asset whose grants the sync
    #: wrote (the asset and those sharing its key), by asset id; an asset is missing when the
    #: registry did not record its report (a warning says why).
    reported: dict[int, Sha256Digest] = field(default_factory=dict)


def sharing_grants(
    client: RegistryClient, kind: AssetKind, asset_id: int, coords: CoordinatesPublic
) -> dict[int, tuple[AllowedWorkload, ...]]:
    """The grants of ``asset_id`` and of every other asset of the caller's, of the same kind,
    sealed under the same key and pool provider, by asset: the key's bindings and the
    provider's condition are shared, so a sync must write all of them (syncing one dataset used
    to revoke the workloads, and unpin the metrics version, of the owner's other datasets, e.g.
    a hospital in two benchmarks)."""
    me = client.me().id
    rows = client.list_datasets(me) if kind == "dataset" else client.list_models(me)
    grants = {asset_id: allowed_workloads(client, kind, asset_id)}
    for row in rows:
        if row.id == asset_id or row.owner_id != me:
            continue
        try:
            other = client.get_coordinates(kind, row.id)
        except NotFoundError:
            continue  # not sealed: nothing to grant
        if (other.kms_key_name, other.wip_provider) == (coords.kms_key_name,
                                                        coords.wip_provider):
            grants[row.id] = allowed_workloads(client, kind, row.id)
    return grants


def _report_grants(
    client: RegistryClient, kind: AssetKind, by_asset: dict[int, tuple[AllowedWorkload, ...]],
    synced_at: datetime,
) -> dict[int, Sha256Digest]:
    """Tell the registry which grant set the sync wrote for each asset; a refusal is a warning
    (the grants are written: only the registry's view of them, and its "policy sync needed"
    notice, stay behind)."""
    reported: dict[int, Sha256Digest] = {}
    for asset_id, grants in by_asset.items():
        digest = grants_digest(grants)
        try:
            client.report_grants(kind, asset_id, GrantsReport(grants_digest=digest,
                                                              synced_at=synced_at))
        except RegistryError as exc:
            log.warning("the registry did not record the grants of %s %d: %s", kind, asset_id,
                        exc)
            continue
        reported[asset_id] = digest
    return reported


def sync_policy(
    client: RegistryClient,
    cloud: OwnerCloud,
    kind: AssetKind,
    asset_id: int,
    *,
    local_recipient: str | None = None,
    result_bucket: str | None = None,
    undelete: bool = False,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PolicySync:
    """Grant the owner's key and bucket (and, for a dataset, object creation in
    ``result_bucket``) to exactly the workloads the registry's approved associations allow
    (and revoke the ones no longer allowed); other bindings are kept. Then report to the
    registry, for each asset whose grants were written, the digest of its grant set and when
    (so the registry can tell when approvals have moved on since)."""
    try:
        coords = client.get_coordinates(kind, asset_id)
    except NotFoundError as exc:
        raise ConfigError(
            f"{kind} {asset_id} has not been sealed yet, so it has no key to guard",
            hint=f"seal it first with 'sealbench {kind} seal ... --{kind} {asset_id}'",
        ) from exc
    by_asset = sharing_grants(client, kind, asset_id, coords)
    grants = tuple(g for asset_grants in by_asset.values() for g in asset_grants)
    if kind == "dataset" and local_recipient is not None:
        # the evaluations' results are sealed to this profile's key; the aggregator's release
        # (no dataset, issue 27) to the benchmark's pool recipient, the registry's
        foreign = {g.identity.recipient_digest for g in grants
                   if g.identity.data_digest is not None} - {local_recipient}
        if foreign:
            raise ConfigError(
                f"dataset {asset_id} was registered with another result key than this "
                "profile's",
                hint="use the profile that registered the dataset, or register it again",
            )
    with client_errors():
        report = cloud.sync_policy(
            coords,
            frozenset(g.identity for g in grants),
            include_data=kind == "dataset",
            result_bucket=result_bucket,
            experimental_gpu_images=frozenset(
                g.identity.image_digest for g in grants if g.accept_experimental),
            experimental_benchmark_ids=frozenset(
                str(g.benchmark_id) for g in grants if g.accept_experimental),
            undelete=undelete,
        )
    log.info("policy of %s %d: %d workloads", kind, asset_id, len(grants))
    return PolicySync(grants, report, _report_grants(client, kind, by_asset, now()))
