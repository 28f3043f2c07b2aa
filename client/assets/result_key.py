"""The data owner's result key pair: an X25519 (HPKE) key whose public half every run seals its
per-case results to, and whose digest the key owners' policies bind (the *recipient*).

``result-key.pem`` (PKCS#8, mode 0600, via :func:`sealbench.crypto.sealing.save_private_key`)
and ``result-key.pub.pem`` live in the profile's secrets directory. The private key never
leaves this machine and is read only to open results.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from sealbench.client.errors import ConfigError
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import (
    generate_recipient_key,
    load_private_key,
    public_key_digest,
    public_key_from_pem,
    public_key_from_raw,
    public_key_to_pem,
    public_key_to_raw,
    save_private_key,
)

__all__ = [
    "PRIVATE_KEY_FILE",
    "PUBLIC_KEY_FILE",
    "ResultKey",
    "ensure_result_key",
    "init_result_key",
    "load_result_key",
    "load_result_private_key",
]

PRIVATE_KEY_FILE: Final = "result-key.pem"
PUBLIC_KEY_FILE: Final = "result-key.pub.pem"
_NO_KEY_HINT = ("'sealbench profile add' makes one with each profile; for a profile added "
                "before that, 'sealbench keys init' makes it")


@dataclass(frozen=True)
class ResultKey:
    """The public half of a result key pair and where the private half is."""

    private_path: Path
    public_raw: bytes

    @property
    def digest(self) -> Sha256Digest:
        """The recipient digest policies and run specifications bind."""
        return public_key_digest(self.public_key())

    @property
    def public_b64(self) -> str:
        return base64.b64encode(self.public_raw).decode("ascii")

    def public_key(self) -> X25519PublicKey:
        return public_key_from_raw(self.public_raw)


def init_result_key(directory: Path, *, force: bool = False) -> ResultKey:
    """Generate a key pair in ``directory``; refuses to replace one unless ``force``."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    private_path = directory / PRIVATE_KEY_FILE
    if private_path.exists() and not force:
        raise ConfigError(
            f"a result key already exists at {private_path}",
            hint="results sealed to it could not be opened after replacing it; pass --force "
            "only if that is what you want",
        )
    key = generate_recipient_key()
    save_private_key(private_path, key, overwrite=force)
    public = key.public_key()
    tmp = directory / f".{PUBLIC_KEY_FILE}.tmp"
    tmp.write_bytes(public_key_to_pem(public))
    tmp.replace(directory / PUBLIC_KEY_FILE)
    return ResultKey(private_path, public_key_to_raw(public))


def ensure_result_key(directory: Path) -> tuple[ResultKey, bool]:
    """The key pair in ``directory``, generated there if it has none (what ``profile add`` and
    ``keys init`` without ``--force`` do: a profile gets its key once, never a second one);
    with True when it was generated now."""
    if (directory / PRIVATE_KEY_FILE).exists():
        return load_result_key(directory), False
    return init_result_key(directory), True


def load_result_key(directory: Path) -> ResultKey:
    """The public half (no secret is read)."""
    path = directory / PUBLIC_KEY_FILE
    try:
        public = public_key_from_pem(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"no result key in {directory}", hint=_NO_KEY_HINT) from None
    except CryptoError as exc:
        raise ConfigError(f"{path} is not a result public key: {exc}") from exc
    return ResultKey(directory / PRIVATE_KEY_FILE, public_key_to_raw(public))


def load_result_private_key(directory: Path) -> X25519PrivateKey:
    path = directory / PRIVATE_KEY_FILE
    try:
        return load_private_key(path)
    except FileNotFoundError:
        raise ConfigError(f"no result private key at {path}", hint=_NO_KEY_HINT) from None
    except CryptoError as exc:
        raise ConfigError(str(exc), hint=f"fix the file's permissions: chmod 600 {path}") from exc
