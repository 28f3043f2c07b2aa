"""Fixtures for the client tests: the real registry app (fresh SQLite per test, migrated from a
template) with four accounts, reached in-process through FastAPI's ``TestClient`` for the typed
client, and as a real uvicorn server on a loopback port for the CLI (which makes its own HTTP
connections). No patching: the registry is the real one."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from sealbench.client.registry.api import RegistryClient
from sealbench.crypto.digest import sha256_digest
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.logkeys import ensure_log_key
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.schemas import BenchmarkCreate
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings

ACCOUNTS = {
    "admin": ("admin@test.example", True),
    "authority": ("authority@test.example", False),
    "hospital": ("hospital@test.example", False),
    "modelco": ("modelco@test.example", False),
}
IMAGE = sha256_digest(b"evaluation image")


@dataclass(frozen=True)
class Registry:
    settings: ServerSettings
    tokens: dict[str, str]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("client-db") / "registry.sqlite3"
    db = open_database(f"sqlite:///{path}")
    upgrade_to_head(db.engine)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return path


def make_registry(template: Path, data_dir: Path) -> Registry:
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, data_dir / "registry.sqlite3")
    settings = ServerSettings(data_dir=data_dir, trusted_issuers=())
    db = open_database(settings.effective_database_url)
    tokens = {}
    try:
        for name, (email, admin) in ACCOUNTS.items():
            with db.writer() as session:
                _, tokens[name] = create_user(
                    session, email=email, is_admin=admin, now=datetime.now(UTC)
                )
    finally:
        db.dispose()
    return Registry(settings, tokens)


@pytest.fixture
def registry(sqlite_template: Path, tmp_path: Path) -> Registry:
    return make_registry(sqlite_template, tmp_path / "registry")


@pytest.fixture
def http(registry: Registry) -> Iterator[TestClient]:
    with TestClient(create_app(registry.settings)) as client:
        yield client


@pytest.fixture
def api(http: TestClient, registry: Registry) -> dict[str, RegistryClient]:
    """One typed client per account, all over the in-process app."""
    return {name: RegistryClient(http, token) for name, token in registry.tokens.items()}


def _benchmark_body(name: str = "brats-test") -> BenchmarkCreate:
    return BenchmarkCreate(
        name=name,
        version="1.0",
        data_contract={"shape": [64, 64, 48], "spacing_mm": [1.0, 1.0, 1.0]},
        metrics_spec={"metrics_id": "x"},
        metrics_version="brats-2023-gli/1-64x64x48",
        image_reference=f"example/eval@{IMAGE}",
        image_digest=IMAGE,
    )


@pytest.fixture
def benchmark_body() -> Callable[..., BenchmarkCreate]:
    """Builds a benchmark registration with a given name."""
    return _benchmark_body


# -- a live registry for the CLI ---------------------------------------------------------------


@dataclass(frozen=True)
class LiveRegistry:
    url: str
    tokens: dict[str, str]
    #: The registry's transparency-log key, as its operator gives it out of band
    #: ('sealbench-server key show'): what 'profile add --log-key' pins.
    log_key: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def live_registry(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveRegistry]:
    registry_ = make_registry(sqlite_template, tmp_path_factory.mktemp("live") / "registry")
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(registry_.settings), host="127.0.0.1", port=port,
                       log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test registry did not start")
        time.sleep(0.05)
    try:
        log_key = ensure_log_key(registry_.settings, create=False).verifier().to_string()
        yield LiveRegistry(f"http://127.0.0.1:{port}", registry_.tokens, log_key)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh config directory; no inherited profile or server variables."""
    home = tmp_path / "home"
    monkeypatch.setenv("SEALBENCH_CONFIG_DIR", str(home))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER",
                 "SEALBENCH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
