"""A registry on this machine, as ``sealbench demo`` and the end-to-end tests run it: the
database and accounts created the way an operator does (``sealbench-server init`` and
``sealbench-server user add``, through the same library calls; :func:`publish_log_key` gives
the log key the profiles pin), then a real
``sealbench-server serve`` process on a free loopback port that trusts the local mock TEE's
attestation issuer (local mode only; production trusts Google's issuer)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from sealbench.client.errors import ServerUnavailableError

__all__ = [
    "SERVER_START_S",
    "create_accounts",
    "free_port",
    "publish_log_key",
    "registry_process",
    "scoped_environ",
]

#: Seconds the registry process may take to answer ``/health``.
SERVER_START_S: Final = 60.0
#: Seconds for one health probe.
_PROBE_TIMEOUT_S: Final = 2.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def scoped_environ(changes: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) variables for the duration of the block only."""
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def create_accounts(data_dir: Path, accounts: Mapping[str, tuple[str, bool]]) -> dict[str, str]:
    """Migrate a fresh SQLite registry in ``data_dir`` and create ``accounts`` (name → (email,
    is admin)); returns name → API token (shown once, stored hashed by the server)."""
    from sealbench.server.db import open_database
    from sealbench.server.migrate import upgrade_to_head
    from sealbench.server.services.users import create_user

    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = open_database(f"sqlite:///{(data_dir / 'registry.sqlite3').resolve()}")
    tokens: dict[str, str] = {}
    try:
        upgrade_to_head(db.engine)
        for name, (email, admin) in accounts.items():
            with db.writer() as session:
                _, tokens[name] = create_user(
                    session, email=email, is_admin=admin, now=datetime.now(UTC)
                )
    finally:
        db.dispose()
    return tokens


def publish_log_key(data_dir: Path) -> str:
    """Generate and publish the transparency log's signing key of the registry in ``data_dir``
    as ``sealbench-server init`` does (the server process then loads that key); returns its
    verifier key, which the profiles of whoever runs this registry pin (``--log-key``)."""
    from sealbench.server.db import open_database
    from sealbench.server.logkeys import ensure_log_key, publish_key
    from sealbench.server.settings import ServerSettings

    settings = ServerSettings(mode="local", data_dir=data_dir, database_url=None,
                              log_key_file=None, log_origin=None)
    key = ensure_log_key(settings, create=True)
    db = open_database(f"sqlite:///{(data_dir / 'registry.sqlite3').resolve()}")
    try:
        with db.writer() as session:
            publish_key(session, key, datetime.now(UTC))
    finally:
        db.dispose()
    return key.verifier().to_string()


@contextmanager
def registry_process(data_dir: Path, endpoints: Any, log_path: Path) -> Iterator[str]:
    """Serve the registry in ``data_dir`` until the block ends; yields its URL. ``endpoints``
    (the mock's) name the attestation issuer whose result tokens it accepts."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALBENCH_SERVER_")}
    env["SEALBENCH_SERVER_DATA_DIR"] = str(data_dir)
    env["SEALBENCH_SERVER_TRUSTED_ISSUERS"] = json.dumps([endpoints.trusted_issuer()])
    url = f"http://127.0.0.1:{port}"
    with log_path.open("ab") as log:
        process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [sys.executable, "-m", "sealbench.server.cli", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_healthy(url, process, log_path)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    import httpx

    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailableError(
                f"the registry server exited with {process.returncode}", hint=f"read {log_path}"
            )
        try:
            if httpx.get(f"{url}/health", timeout=_PROBE_TIMEOUT_S).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise ServerUnavailableError(
        f"the registry did not answer within {SERVER_START_S:.0f} s", hint=f"read {log_path}"
    )
