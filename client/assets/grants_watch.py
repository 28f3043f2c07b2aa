"""``sealbench policy sync --watch``: keep an owner's key grants following the registry's
approvals, with nobody having to remember to sync (issue 29).

Each pass asks the registry, for every sealed asset of the owner's (or the one named), whether
the grants its last sync reported lag the asset's current approvals
(:meth:`~sealbench.client.registry.api.RegistryClient.get_grants`), and syncs only those
(:func:`sealbench.client.assets.owner.sync_policy`, which reports the new grant set). A pass with
nothing lagging writes nothing to IAM; a sync whose grants are already in place changes no
binding (the writer reads first). Two watchers of the same owner are safe: IAM's
read-modify-write with etags makes the slower write fail and retry on the fresh policy
(:mod:`sealbench.gcp.policy_writer`), and a pass that still fails is retried after an
exponential backoff, capped. Every action is one line through ``on_line``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from sealbench.client.assets.owner import PolicySync, sync_policy
from sealbench.client.errors import ClientError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.platforms.owner_cloud import OwnerCloud

__all__ = ["DEFAULT_INTERVAL_S", "MAX_BACKOFF_S", "PassResult", "PolicyWatch"]

log = logging.getLogger("sealbench.client")

#: Seconds between passes.
DEFAULT_INTERVAL_S: Final = 60.0
#: The longest wait after failed passes (the backoff doubles from the interval up to it).
MAX_BACKOFF_S: Final = 900.0


@dataclass(frozen=True)
class PassResult:
    """One pass: the assets synced (with what each sync did) and the failures."""

    synced: tuple[tuple[AssetKind, int, PolicySync], ...] = ()
    failures: tuple[tuple[AssetKind, int, ClientError], ...] = ()


@dataclass
class PolicyWatch:
    """Sync, pass after pass, the owner's assets whose grants lag their approvals.

    ``assets`` limits the watch to those (kind, id); None watches every asset the caller owns
    (its sealed ones: an unsealed asset has no key). ``sleep`` waits between passes and returns
    True when the watch must stop (``threading.Event.wait`` of :attr:`stop` by default).
    """

    client: RegistryClient
    cloud: OwnerCloud
    assets: tuple[tuple[AssetKind, int], ...] | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    max_backoff_s: float = MAX_BACKOFF_S
    local_recipient: str | None = None
    result_bucket: str | None = None
    on_line: Callable[[str], None] = log.info
    stop: threading.Event = field(default_factory=threading.Event)

    def _targets(self) -> tuple[tuple[AssetKind, int], ...]:
        if self.assets is not None:
            return self.assets
        me = self.client.me().id
        found: list[tuple[AssetKind, int]] = [
            ("dataset", d.id) for d in self.client.list_datasets(me) if d.owner_id == me]
        found += [("model", m.id) for m in self.client.list_models(me) if m.owner_id == me]
        return tuple(found)

    def run_once(self) -> PassResult:
        """One pass (see the module docstring). Raises :class:`ClientError` when the registry
        cannot list the assets; a failure of one asset is in the result, the others go on."""
        synced: list[tuple[AssetKind, int, PolicySync]] = []
        failures: list[tuple[AssetKind, int, ClientError]] = []
        for kind, asset_id in self._targets():
            try:
                status = self.client.get_grants(kind, asset_id)
                if not status.sealed or not status.lagging:
                    continue
                self.on_line(f"{kind} {asset_id}: approvals changed since its grants were "
                             f"synced; syncing ({status.required_count} workloads)")
                done = sync_policy(
                    self.client, self.cloud, kind, asset_id,
                    local_recipient=self.local_recipient if kind == "dataset" else None,
                    result_bucket=self.result_bucket if kind == "dataset" else None,
                )
            except ClientError as exc:
                self.on_line(f"{kind} {asset_id}: sync failed: {exc}")
                failures.append((kind, asset_id, exc))
                continue
            key = done.report.key
            self.on_line(f"{kind} {asset_id}: synced, key +{len(key.added)} "
                         f"-{len(key.removed)} workloads"
                         + ("" if done.report.changed else " (IAM already in place)"))
            synced.append((kind, asset_id, done))
        return PassResult(tuple(synced), tuple(failures))

    def next_wait(self, failed_passes: int) -> float:
        """Seconds to wait after ``failed_passes`` failed passes in a row: the interval, then
        doubling, capped at :attr:`max_backoff_s`."""
        if failed_passes <= 0:
            return self.interval_s
        return float(min(self.interval_s * 2 ** min(failed_passes, 30), self.max_backoff_s))

    def run(self) -> int:
        """Pass after pass until :attr:`stop` is set; returns the number of passes."""
        failed, passes = 0, 0
        self.on_line("watching approvals: each pass syncs the grants that lag (Ctrl-C stops)")
        while not self.stop.is_set():
            passes += 1
            try:
                result = self.run_once()
                failed = failed + 1 if result.failures else 0
            except ClientError as exc:
                self.on_line(f"pass failed: {exc}")
                failed += 1
            wait = self.next_wait(failed)
            if failed:
                self.on_line(f"retrying in {wait:g} s")
            if self.stop.wait(wait):
                break
        return passes
