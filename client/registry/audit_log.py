"""The registry's audit log as a profile checks it, as library functions the ``sealbench audit``
commands, ``sealbench result submit`` and ``sealbench demo`` call: the profile's
:class:`~sealbench.client.registry.transparency.LogMonitor` (its pinned log key, its witnesses,
its state directory), a whole-log verification, and the receipts it keeps (a submitted result's
receipt is fetched and kept by :func:`sealbench.client.runs.submit.keep_result_receipt`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.logstate import LogState
from sealbench.client.registry.profiles import ProfileStore, ResolvedProfile
from sealbench.client.registry.receipts import ReceiptStore
from sealbench.client.registry.transparency import DEFAULT_PACE, LogMonitor, LogReport
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import VerifierKey

__all__ = [
    "AuditCheck",
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
