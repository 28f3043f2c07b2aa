"""``sealbench policy sync`` as library calls, for a profile: sync one sealed asset's grants
with the registry's approved associations (:func:`sync_asset_policy`), or build the watcher
that keeps every asset's grants in step (:func:`policy_watcher`). The command and the demo call
these; they only render."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from sealbench.client.assets import owner
from sealbench.client.assets.grants_watch import PolicyWatch
from sealbench.client.assets.result_key import load_result_key
from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile

__all__ = ["policy_watcher", "sync_asset_policy"]


def sync_asset_policy(
    profile: ResolvedProfile,
    client: RegistryClient,
    kind: AssetKind,
    asset_id: int,
    *,
    result_bucket: str | None = None,
    mock_tee: Path | None = None,
    undelete: bool = False,
) -> owner.PolicySync:
    """Grant the asset's key (and, for a dataset, ``result_bucket``) to exactly the workloads
    of its approved associations, in the profile's cloud (``mock_tee``: that mock TEE's); a
    dataset's runs are sealed to the profile's result key (:class:`ConfigError` without one).
    A soft-deleted identity pool or provider is undeleted only with ``undelete``."""
    recipient = load_result_key(profile.secrets_dir).digest if kind == "dataset" else None
    cloud = owner.owner_cloud(profile, client, mock_tee)
    return owner.sync_policy(
        client, cloud, kind, asset_id, local_recipient=recipient, result_bucket=result_bucket,
        undelete=undelete,
    )


def policy_watcher(
    profile: ResolvedProfile,
    client: RegistryClient,
    *,
    assets: tuple[tuple[AssetKind, int], ...] | None = None,
    interval_s: float = 60.0,
    result_bucket: str | None = None,
    mock_tee: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> PolicyWatch:
    """The :class:`~sealbench.client.assets.grants_watch.PolicyWatch` of the profile's sealed
    assets (``assets``: only those), in its cloud; the result key, when the profile has one,
    is a dataset's local recipient."""
    recipient = None
    with contextlib.suppress(ConfigError):  # no result key: a model owner's profile
        recipient = load_result_key(profile.secrets_dir).digest
    watcher = PolicyWatch(
        client, owner.owner_cloud(profile, client, mock_tee), assets=assets,
        interval_s=interval_s, local_recipient=recipient, result_bucket=result_bucket,
    )
    if on_line is not None:
        watcher.on_line = on_line
    return watcher
