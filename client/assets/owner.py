"""An asset owner's steps that touch its cloud: seal a dataset or model into its bucket and
record the coordinates on the registry, and sync its key's policy with the registry's approved
associations (reporting to the registry the grant set it wrote). Shared by ``sealbench dataset
seal|model seal|policy sync`` and ``sealbench demo``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pydantic import ValidationError

from sealbench.client.assets.accounts import (
    account_of,
    client_errors,
    profile_account,
    require_account,
)
from sealbench.client.assets.grants import AllowedWorkload, allowed_workloads, grants_digest
from sealbench.client.errors import CloudError, ConfigError, NotFoundError, RegistryError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.profiles import (
    GOOGLE_PLATFORM,
    MOCK_PLATFORM,
    PlatformAccount,
    ResolvedProfile,
)
from sealbench.crypto.digest import Sha256Digest
from sealbench.platforms.owner_cloud import OwnerCloud, PolicyReport
from sealbench.server.schemas import CoordinatesPublic, CoordinatesUpdate, GrantsReport

if TYPE_CHECKING:
    from sealbench.client.assets.store import SealReport
    from sealbench.contract.spec import ServiceEndpoints

__all__ = [
    "PolicySync",
    "SealOutcome",
    "client_errors",
    "default_result_uri",
    "owner_cloud",
    "platform_account",
    "seal_asset",
    "sharing_grants",
    "spec_endpoints",
    "sync_policy",
]

log = logging.getLogger("sealbench.client")


def owner_cloud(
    profile: ResolvedProfile, client: RegistryClient, mock_tee: Path | None
) -> OwnerCloud:
    """The owner's cloud for ``profile``, as its account's platform hands it out (its Google
    Cloud project, its account in the INSECURE mock cloud: ``--mock-tee`` or the profile's, or
    its account on another installed platform); :class:`ConfigError` without one."""
    return require_account(profile, mock_tee).owner_cloud(lambda: client.me().email)


#: The platforms whose accounts ``profile add`` fills from options of their own (``--cloud
#: gcp --project ...``, ``--mock-tee DIR``), not from ``--setting``.
_OWN_OPTIONS: Final = {GOOGLE_PLATFORM: "--cloud gcp", MOCK_PLATFORM: "--mock-tee DIR"}


def platform_account(platform: str, settings: dict[str, str]) -> PlatformAccount:
    """A profile's account on the installed platform ``platform`` (one whose accounts
    ``profile add`` has no options of its own for), its ``settings`` checked by that platform
    (its settings model, then its owner cloud, built without I/O); a :class:`ConfigError`
    saying what is wrong otherwise."""
    from sealbench.platforms.platform import installed_launcher_backends

    if platform in _OWN_OPTIONS:
        raise ConfigError(f"a {platform} account is not given as settings",
                          hint=f"use {_OWN_OPTIONS[platform]}")
    installed = sorted(set(installed_launcher_backends()) - set(_OWN_OPTIONS))
    if platform not in installed:
        raise ConfigError(
            f"no TEE platform named {platform[:40]!r} is installed",
            hint=("installed besides Google Cloud and the mock: " + ", ".join(installed))
            if installed else "use --cloud gcp or --mock-tee DIR, or install the platform",
        )
    try:
        account = PlatformAccount(platform=platform, settings=dict(settings))
    except ValidationError as exc:
        raise ConfigError(f"cannot use these settings: {exc.errors()[0]['msg']}") from None
    with client_errors():  # the platform refuses settings it cannot use
        account_of(account).owner_cloud().names()
    return account


def spec_endpoints(profile: ResolvedProfile) -> ServiceEndpoints | None:
    """The token destinations runs of the profile's account name in their run spec (None:
    their platform's own, or no account)."""
    account = profile_account(profile)
    return None if account is None else account.routes().token_destinations


def default_result_uri(profile: ResolvedProfile) -> str | None:
    """Where a production run of ``profile`` writes its result unless ``--result-uri`` says
    otherwise: ``results/`` in the owner's own bucket, as its platform spells a storage URI
    (None without a cloud of its own, or for an account whose results come back here)."""
    account = profile_account(profile)
    return None if account is None else account.routes().result_prefix


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
    with client_errors():
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
        with client_errors():
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
