"""The mock cloud's persistent state, kept in one directory so that a restart loses nothing.

Layout of the state directory (each file written atomically: temp + fsync + rename)::

    state.json              pools, providers, projects, key rings, keys (no key bytes), IAM
                            policies, bucket owners, and access-token records keyed by the
                            SHA-256 of the token (the tokens themselves are never stored)
    endpoints.json          the running mock's endpoints (see :mod:`sealbench.mocktee.server`)
    insecure-secrets/       mode 0700: the verifier's RSA signing key and the KMS key material.
                            INSECURE BY DESIGN: a mock keeps its own keys on disk (mode 0600) so a
                            restart can still decrypt what it wrapped; never put real data in it.
    storage/                the storage emulator's data_dir

``state.json`` format (version 1)::

    {"version": 1, "projects": {id: {"number": str, "owners": [member]}},
     "pools": {name: pool}, "providers": {name: provider}, "key_rings": {name: ring},
     "crypto_keys": {name: key}, "iam": {resource: policy}, "buckets": {bucket: project_id},
     "access_tokens": {sha256hex: {"principal", "principal_sets", "expires", "attributes"}},
     "disabled_services": {project_id: [service name]},
     "service_accounts": {email: account}, "project_iam": {project_id: policy},
     "refresh_tokens": {sha256hex: principal},
     "bucket_config": {bucket: {"uniform": bool, "public_access_prevention": str}},
     "org_policies": {project_id: {constraint: bool | [allowed value]}},
     "perimeters": {project_id: true}}

A state written before the last seven sections existed loads with them empty (a bucket without
``bucket_config`` has fine-grained access, Google's default when a create request names none;
a project without ``org_policies`` has :data:`~sealbench.mocktee.orgpolicy.DEFAULT_POLICIES`;
a project in ``perimeters`` is inside a VPC Service Controls perimeter that admits no federated
identity: :mod:`sealbench.mocktee.orgpolicy`). A soft-deleted
pool or provider keeps ``state: DELETED``, ``expireTime`` and ``purgeAt`` (epoch seconds) until
purged; a KMS key's or bucket's policy keeps ``history`` (``[{"at", "bindings"}]``, its recent
versions) for the IAM propagation delay; a new project's ``disabled_services`` lists every API
the mock serves but Google's defaults (:data:`~sealbench.mocktee.identity.
DEFAULT_ENABLED_SERVICES`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sealbench.crypto.files import write_private

__all__ = ["STATE_VERSION", "MockState", "atomic_write", "token_hash", "warn_insecure_once"]

STATE_VERSION = 1


@functools.cache
def warn_insecure_once(logger_name: str, message: str) -> None:
    """Log ``message`` as a warning the first time this process asks for it (each INSECURE
    notice once per command, not before every run)."""
    logging.getLogger(logger_name).warning(message)


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same directory, fsync, rename."""
    write_private(path, data, mode=mode)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _empty() -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "projects": {},
        "pools": {},
        "providers": {},
        "key_rings": {},
        "crypto_keys": {},
        "iam": {},
        "buckets": {},
        "access_tokens": {},
        "disabled_services": {},
        "service_accounts": {},
        "project_iam": {},
        "refresh_tokens": {},
        "bucket_config": {},
        "org_policies": {},
        "perimeters": {},
    }


class MockState:
    """Thread-safe access to ``state.json``: ``with state.edit() as doc:`` mutates and persists;
    ``state.read()`` returns a deep copy. Secrets go to :attr:`secrets_dir`, never here."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self.secrets_dir = state_dir / "insecure-secrets"
        self.secrets_dir.mkdir(mode=0o700, exist_ok=True)
        self.storage_dir = state_dir / "storage"
        self.storage_dir.mkdir(exist_ok=True)
        self._path = state_dir / "state.json"
        self._lock = threading.RLock()
        if self._path.exists():
            doc = json.loads(self._path.read_bytes())
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"{self._path}: unsupported state version {doc.get('version')!r}")
            self._doc: dict[str, Any] = {**_empty(), **doc}
        else:
            self._doc = _empty()
            self._save()

    def _save(self) -> None:
        atomic_write(self._path, json.dumps(self._doc, indent=1, sort_keys=True).encode())

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            snapshot = json.loads(json.dumps(self._doc))
            try:
                yield self._doc
            except BaseException:
                self._doc = snapshot
                raise
            self._save()

    def read(self) -> dict[str, Any]:
        with self._lock:
            copy: dict[str, Any] = json.loads(json.dumps(self._doc))
            return copy

    def secret_path(self, name: str) -> Path:
        return self.secrets_dir / name
