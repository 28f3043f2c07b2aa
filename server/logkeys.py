"""The transparency log's signing key.

``sealbench-server init`` generates an Ed25519 key whose name is the log's origin (the
``LOG_ORIGIN`` setting, else ``<host name>/sealbench-<6 hex>``) into ``DATA_DIR/log-signer.key``
(or ``LOG_KEY_FILE``): a C2SP signer key string, mode 0600, written exclusively and atomically,
never logged or printed. Its verifier key is published in ``log_keys``, where every key it ever
replaced stays, so old checkpoints and receipts still verify.

``sealbench-server key rotate`` generates a new key, has the old and the new key both sign a
:class:`~sealbench.crypto.note.KeyEndorsement`, retires the old key and publishes the new one
with that endorsement and an audit event, in one transaction, and only then replaces the key
file. Clients that pinned the old key follow the endorsement. Restart the servers afterwards:
each process loads the key when it starts.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import socket
from datetime import datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sealbench.crypto.errors import CryptoError
from sealbench.crypto.note import (
    KeyEndorsement,
    SignerKey,
    VerifierKey,
    read_signer_key,
    write_signer_key,
)
from sealbench.server.audit import append_event
from sealbench.server.db import Database
from sealbench.server.errors import ConfigurationError
from sealbench.server.models import LogKey
from sealbench.server.settings import ServerSettings

__all__ = [
    "current_key",
    "default_origin",
    "ensure_log_key",
    "load_log_key",
    "publish_key",
    "rotate_log_key",
]

log = logging.getLogger("sealbench.server")


def default_origin() -> str:
    """``<host name>/sealbench-<6 hex>``: unique per registry, stable once the key exists."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "localhost"
    return f"{host}/sealbench-{secrets.token_hex(3)}"


def load_log_key(path: Path, *, origin: str | None = None) -> SignerKey:
    """The key in ``path``; ``FileNotFoundError`` if there is none, :class:`ConfigurationError`
    if it is unreadable, too widely readable, or names another origin than ``origin``."""
    try:
        key = read_signer_key(path)
    except FileNotFoundError:
        raise
    except (CryptoError, OSError) as exc:
        raise ConfigurationError(f"cannot use the log signing key {path}: {exc}") from exc
    if origin is not None and key.name != origin:
        raise ConfigurationError(
            f"the log signing key {path} signs for origin {key.name!r}, but LOG_ORIGIN is "
            f"{origin!r}; unset LOG_ORIGIN or point LOG_KEY_FILE at that origin's key"
        )
    return key


def ensure_log_key(settings: ServerSettings, *, create: bool) -> SignerKey:
    """Load the log's signing key; with ``create``, generate it first if there is none (two
    processes racing both end up with the one that was written first)."""
    path = settings.effective_log_key_file
    try:
        return load_log_key(path, origin=settings.log_origin)
    except FileNotFoundError:
        if not create:
            raise ConfigurationError(
                f"no log signing key at {path}: run 'sealbench-server init' first"
            ) from None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = SignerKey.generate(settings.log_origin or default_origin())
    try:
        write_signer_key(path, key)
    except FileExistsError:
        return load_log_key(path, origin=settings.log_origin)
    log.warning("generated the transparency log's signing key for origin %s in %s",
                key.name, path)
    return key


def current_key(session: Session) -> LogKey | None:
    return session.scalars(select(LogKey).where(LogKey.retired_at.is_(None))).first()


def publish_key(session: Session, key: SignerKey, now: datetime) -> None:
    """Publish ``key``'s verifier key as the log's current key (and commit), or check that it
    already is; refuses a key that is not the registry's current one, so a lost or swapped key
    file cannot silently start a new log."""
    verifier = key.verifier().to_string()
    current = current_key(session)
    if current is not None:
        if current.verifier != verifier:
            raise ConfigurationError(
                f"the log signing key ({key.verifier().label}) is not this registry's current "
                f"log key ({VerifierKey.from_string(current.verifier).label}): restore the key "
                "file, or point LOG_KEY_FILE at it"
            )
        return
    if session.scalars(select(LogKey).where(LogKey.verifier == verifier)).first() is not None:
        raise ConfigurationError(
            f"the log signing key {key.verifier().label} was retired by a rotation; use the "
            "current key file"
        )
    session.add(LogKey(verifier=verifier, created_at=now))
    try:
        session.commit()
    except IntegrityError:  # another process published it first
        session.rollback()
        publish_key(session, key, now)


def rotate_log_key(settings: ServerSettings, db: Database, now: datetime) -> tuple[
    VerifierKey, VerifierKey
]:
    """Replace the log's signing key (module docstring); returns (old, new) verifier keys."""
    path = settings.effective_log_key_file
    try:
        old = load_log_key(path, origin=settings.log_origin)
    except FileNotFoundError:
        raise ConfigurationError(f"no log signing key at {path} to rotate") from None
    new = SignerKey.generate(old.name)
    endorsement = KeyEndorsement(old.name, new.verifier()).sign(old, new).decode("utf-8")
    side = path.with_name(path.name + ".new")
    try:
        write_signer_key(side, new)
    except FileExistsError:
        raise ConfigurationError(
            f"{side} exists (an earlier rotation did not finish): check which key "
            "'GET /api/v1/audit/checkpoint' publishes as current, then remove the file"
        ) from None
    try:
        with db.writer() as session:
            publish_key(session, old, now)
            current = current_key(session)
            assert current is not None
            current.retired_at = now
            session.add(LogKey(verifier=new.verifier().to_string(), created_at=now,
                               endorsement=endorsement))
            append_event(
                session,
                actor_id=None,
                action="log.key.rotate",
                entity_type="log_key",
                entity_id=f"{new.verifier().key_id:08x}",
                payload={"previous": old.verifier().to_string(),
                         "new": new.verifier().to_string()},
                now=now,
            )
            session.commit()
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            side.unlink()
        raise
    side.replace(path)
    return old.verifier(), new.verifier()
