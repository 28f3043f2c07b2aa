"""A witness: another party (the benchmark authority, a hospital) that co-signs the registry's
checkpoints it has verified as consistent with every checkpoint it saw before, so that a
registry cannot show one history to some clients and another to others without a witness's
cosignature exposing it.

The witness key is an Ed25519 cosigner key (C2SP type 0x04) in the profile's secrets directory,
``witness.key`` (signer key string, mode 0600), named ``--name`` (default
``sealbench-witness/<profile>``). What it verified is kept per registry in
``witness/<first 16 hex of SHA-256(registry URL)>/`` (a :class:`~sealbench.client.registry.logstate.
LogState`, the registry's log key pinned on first use there unless given). Each round
refreshes the checkpoint through a :class:`~sealbench.client.registry.transparency.LogMonitor`
(which refuses an inconsistent one, keeping the evidence) and posts a ``cosignature/v1``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.logstate import LogState
from sealbench.client.registry.transparency import LogMonitor
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import (
    ALG_COSIGNATURE,
    Checkpoint,
    SignerKey,
    VerifierKey,
    cosign,
    read_signer_key,
    write_signer_key,
)
from sealbench.server.schemas.audit import CosignatureCreate

__all__ = ["WITNESS_KEY_FILE", "CosignedCheckpoint", "Witness", "witness_key", "witness_state"]

WITNESS_KEY_FILE: Final = "witness.key"


def witness_key(directory: Path, name: str) -> SignerKey:
    """The witness key in ``directory``, generated (as ``name``) the first time."""
    path = directory / WITNESS_KEY_FILE
    if not path.exists():
        if not re.fullmatch(r"[^\s+]{1,200}", name):
            raise ConfigError(f"witness name {name[:80]!r} must have no space and no '+'")
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):  # another process made it first
            write_signer_key(path, SignerKey.generate(name, ALG_COSIGNATURE))
    try:
        key = read_signer_key(path)
    except (CryptoError, OSError) as exc:
        raise ConfigError(f"cannot use the witness key {path}: {exc}") from exc
    if key.alg != ALG_COSIGNATURE:
        raise ConfigError(f"{path} is not a cosigner key (type 0x04)")
    return key


def witness_state(directory: Path, registry: str) -> LogState:
    """Where the witness keeps what it verified of ``registry``."""
    digest = hashlib.sha256(registry.rstrip("/").encode()).hexdigest()[:16]
    return LogState(directory / "witness" / digest)


@dataclass(frozen=True)
class CosignedCheckpoint:
    checkpoint: Checkpoint
    timestamp: int
    new: bool


class Witness:
    """Verifies and cosigns one registry's checkpoints with ``key``."""

    def __init__(
        self,
        client: RegistryClient,
        key: SignerKey,
        state: LogState,
        *,
        pinned: VerifierKey | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        stored = state.pinned()
        if pinned is None and stored:
            try:
                pinned = VerifierKey.from_string(stored)
            except CryptoError as exc:
                raise ConfigError(f"{state.root} holds a malformed pinned key: {exc}") from exc
        self._client = client
        self._key = key
        self._clock = clock
        # A witness started without --log-key trusts the key on first use, as its command says
        # (it keeps the key in its own state; the registries' clients pin theirs).
        self.monitor = LogMonitor(client, state, pinned=pinned, trust_on_first_use=True,
                                  on_pin=lambda k: state.pin(k.to_string()), clock=clock)

    @property
    def verifier(self) -> VerifierKey:
        return self._key.verifier()

    def cosign_latest(self) -> CosignedCheckpoint:
        """Verify the latest checkpoint against everything seen before, then cosign it."""
        latest = self.monitor.refresh().checkpoint
        stamp = int(self._clock().timestamp())
        line = cosign(latest, self._key, stamp).line().rstrip("\n")
        stored = self._client.audit_cosign(
            CosignatureCreate(witness=self.verifier.to_string(), tree_size=latest.size,
                              signature=line)
        )
        return CosignedCheckpoint(latest, stored.timestamp, stored.timestamp == stamp)
