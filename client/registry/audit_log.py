"""The registry's audit log as a profile checks it, as library functions the ``sealbench audit``
commands, ``sealbench result submit`` and ``sealbench demo`` call: the profile's
:class:`~sealbench.client.registry.transparency.LogMonitor` (its pinned log key, its witnesses,
its state directory), a whole-log verification, and a submitted result's receipt kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.logstate import LogState
from sealbench.client.registry.profiles import ProfileStore, ResolvedProfile
from sealbench.client.registry.receipts import (
    Receipt,
    ReceiptStore,
    expected_digests,
    fetch_receipt,
)
from sealbench.client.registry.transparency import DEFAULT_PACE, LogMonitor, LogReport
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import VerifierKey

if TYPE_CHECKING:
    from sealbench.client.runs.result_open import OpenedResult

__all__ = [
    "AuditCheck",
    "keep_result_receipt",
    "log_state",
    "parse_key",
    "profile_monitor",
    "receipts_of",
    "verify_audit_log",
]


def parse_key(text: str, what: str) -> VerifierKey:
    try:
        return VerifierKey.from_string(text)
    except CryptoError as exc:
        raise ConfigError(f"{what} is not a verifier key (name+keyid+key): {exc}") from exc


def log_state(profile: ResolvedProfile) -> LogState:
    return LogState(profile.secrets_dir / "log")


def receipts_of(profile: ResolvedProfile) -> ReceiptStore:
    return ReceiptStore(profile.data_dir / "receipts")


def profile_monitor(
    client: RegistryClient, profile: ResolvedProfile, store: ProfileStore
) -> LogMonitor:
    """The log monitor of ``profile``: its pinned log key (a key pinned on first use is written
    to the profile in ``store``, or to the log state of a profile not stored there)."""
    state = log_state(profile)
    stored = profile.profile.log_key or state.pinned()
    pinned = parse_key(stored, "the profile's log key") if stored else None
    witnesses = [parse_key(w, "a witness key") for w in profile.profile.witnesses]

    def on_pin(key: VerifierKey) -> None:
        if profile.name in dict(store.names()):
            store.update(profile.name, log_key=key.to_string())
        else:
            state.pin(key.to_string())

    return LogMonitor(client, state, pinned=pinned,
                      trust_on_first_use=profile.profile.trust_on_first_use,
                      witnesses=witnesses, on_pin=on_pin)


@dataclass(frozen=True)
class AuditCheck:
    """A verified log: the monitor's report (``events``, ``checkpoint``, ``previous``), the
    key that signed it and whether that key was trusted on first use."""

    report: LogReport
    signer: str
    trusted_on_first_use: bool


def verify_audit_log(
    client: RegistryClient, profile: ResolvedProfile, store: ProfileStore, *,
    progress: Callable[[int, int], None] | None = None, pace: float = DEFAULT_PACE,
) -> AuditCheck:
    """Check the whole log: the latest checkpoint is signed by the pinned key and extends the
    last one verified; every event (admins only) matches its chain link, its leaf and that
    checkpoint (:class:`~sealbench.client.errors.TransparencyLogError` names the first that
    breaks)."""
    monitor = profile_monitor(client, profile, store)
    report = monitor.verify_log(progress, pace=pace)
    signer = monitor.pinned.label if monitor.pinned else "?"
    return AuditCheck(report, signer, monitor.trusted_on_first_use)


def keep_result_receipt(
    client: RegistryClient, profile: ResolvedProfile, store: ProfileStore, result_id: int,
    opened: OpenedResult,
) -> tuple[Receipt, Path]:
    """After a result is submitted: fetch its receipt, check it proves exactly the result this
    machine holds (its digests) in the log this profile verified, and keep it."""
    expected = expected_digests(opened.sealed_result_sha256, opened.summary_json, opened.token)
    receipt = fetch_receipt(profile_monitor(client, profile, store),
                            client.audit_receipt(result_id), registry=profile.server,
                            expected=expected)
    return receipt, receipts_of(profile).save(receipt)
