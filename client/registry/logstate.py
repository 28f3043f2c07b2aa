"""What a client keeps of a registry's transparency log, in one directory (for a profile,
``<config dir>/profiles/<name>/log/``; for a witness, one per registry under ``witness/``).
Every file is written to a temporary name with mode 0600 and renamed into place; the
directories are 0700.

::

    checkpoint     the last checkpoint verified (signed note bytes, exactly as received)
    pinned-key     the log key pinned on first use, for profiles not in profiles.json and
                   witnesses (a C2SP verifier key string and a newline)
    leaves         32-byte leaf hashes of events 1..n, written by a full 'audit verify', to
                   name the first event that differs when the log is later found rewritten
    evidence/<UTC time>-<what>/   kept on every failed check: both checkpoints, the proof,
                   and report.txt saying what failed
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Final

from sealbench.client.errors import ConfigError
from sealbench.crypto import files
from sealbench.crypto.note import Checkpoint, Note
from sealbench.crypto.tlog import HASH_SIZE

__all__ = [
    "CHECKPOINT_FILE",
    "EVIDENCE_DIR",
    "LEAVES_FILE",
    "PIN_FILE",
    "LogState",
    "proof_json",
    "write_private",
]

CHECKPOINT_FILE: Final = "checkpoint"
PIN_FILE: Final = "pinned-key"
LEAVES_FILE: Final = "leaves"
EVIDENCE_DIR: Final = "evidence"
_MAX_NOTE: Final = 1 << 16
_MAX_LEAVES: Final = HASH_SIZE << 26  # 64 Mi events


def write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    files.write_private(path, data)


def _read(path: Path, limit: int) -> bytes | None:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    if len(data) > limit:
        raise ConfigError(f"{path} is larger than {limit} bytes")
    return data


class LogState:
    """The files in ``root`` (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def held_note(self) -> bytes | None:
        return _read(self.root / CHECKPOINT_FILE, _MAX_NOTE)

    def held(self) -> Checkpoint | None:
        """The checkpoint held (verified when it was stored; parsed, not re-verified)."""
        note = self.held_note()
        if note is None:
            return None
        try:
            return Checkpoint.from_text(Note.parse(note).text)
        except ValueError as exc:
            raise ConfigError(
                f"{self.root / CHECKPOINT_FILE} is damaged ({exc})",
                hint="it is the evidence of what you verified: keep a copy before removing it",
            ) from exc

    def hold(self, note: bytes) -> None:
        write_private(self.root / CHECKPOINT_FILE, note)

    def pinned(self) -> str | None:
        raw = _read(self.root / PIN_FILE, 1024)
        return None if raw is None else raw.decode("ascii", "replace").strip()

    def pin(self, verifier: str) -> None:
        write_private(self.root / PIN_FILE, verifier.encode("ascii") + b"\n")

    def leaves(self) -> bytes:
        raw = _read(self.root / LEAVES_FILE, _MAX_LEAVES) or b""
        if len(raw) % HASH_SIZE:
            raise ConfigError(f"{self.root / LEAVES_FILE} is not a list of 32-byte hashes")
        return raw

    def keep_leaves(self, leaves: bytes) -> None:
        write_private(self.root / LEAVES_FILE, leaves)

    def keep_evidence(self, what: str, files: Mapping[str, bytes], now: datetime) -> Path:
        """Write ``files`` into a new evidence directory and return it."""
        folder = self.root / EVIDENCE_DIR / (
            f"{now.strftime('%Y%m%dT%H%M%SZ')}-{what}-{secrets.token_hex(3)}"
        )
        folder.mkdir(parents=True, mode=0o700)
        for name, data in files.items():
            write_private(folder / name, data)
        return folder


def proof_json(first: int, second: int, proof: tuple[str, ...]) -> bytes:
    """A consistency proof as kept in evidence."""
    return json.dumps({"first": first, "second": second, "proof": list(proof)},
                      indent=2).encode() + b"\n"
