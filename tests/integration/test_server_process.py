"""The registry as an operator runs it: ``sealbench-server init`` / ``serve`` in a real uvicorn
process, on SQLite and on PostgreSQL (a throwaway cluster this module starts). 50 concurrent
writers lose or duplicate nothing (rows, audit events, transparency-log leaves) and see no 500;
a killed and restarted server still has everything it committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from sealbench.crypto import tlog
from sealbench.crypto.note import VerifierKey, open_checkpoint
from sealbench.server.audit import verify_stored_chain
from sealbench.server.audit_format import event_leaf_hash
from sealbench.server.db import open_database
from sealbench.server.pgcluster import ClusterError, ThrowawayPostgres, free_port
from sealbench.server.schemas.audit import AuditEventPublic
from sealbench.server.services.users import create_user

API = "/api/v1"
WRITERS = 50
START_TIMEOUT_S = 30
DIGEST = "sha256:" + "a" * 64


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[ThrowawayPostgres]:
    cluster = ThrowawayPostgres()
    try:
        cluster.start()
    except (ClusterError, OSError) as exc:
        pytest.fail(f"the PostgreSQL test cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    out = {**os.environ, "SEALBENCH_SERVER_DATA_DIR": str(tmp_path / "data")}
    if request.param == "postgresql":
        cluster: ThrowawayPostgres = request.getfixturevalue("pg_cluster")
        name = f"proc_{request.node.name.split('[')[0][-20:]}_{int(time.time() * 1000)}"
        out["SEALBENCH_SERVER_DATABASE_URL"] = cluster.create_database(name)
    subprocess.run(
        [sys.executable, "-m", "sealbench.server.cli", "init"],
        env=out,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def _database_url(env: dict[str, str]) -> str:
    return env.get("SEALBENCH_SERVER_DATABASE_URL") or (
        f"sqlite:///{Path(env['SEALBENCH_SERVER_DATA_DIR']).resolve()}/registry.sqlite3"
    )


@dataclass
class Server:
    env: dict[str, str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        log_path = Path(self.env["SEALBENCH_SERVER_DATA_DIR"]).parent / f"server-{self.port}.log"
        self.log = log_path.open("wb")  # closed in kill()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sealbench.server.cli", "serve", "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = Path(self.log.name).read_text(errors="replace")
                pytest.fail(f"server exited with {self.proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        pytest.fail("server did not become healthy")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.log is not None:
            self.log.close()


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[Server]:
    srv = Server(env, free_port()).start()
    yield srv
    srv.kill()


def _users(env: dict[str, str], n: int) -> list[str]:
    db = open_database(_database_url(env))
    tokens = []
    with db.writer() as session:
        for i in range(n):
            _user, token = create_user(
                session, email=f"u{i}@x.test", is_admin=i == 0, now=datetime.now(UTC)
            )
            tokens.append(token)
    db.dispose()
    return tokens


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_concurrent_writers_lose_and_duplicate_nothing(server: Server, env: dict[str, str]) -> None:
    admin, owner, *writers = _users(env, 7)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        body = {
            "name": "brats",
            "version": "1",
            "data_contract": {},
            "metrics_spec": {},
            "metrics_version": "wdbc/1",
            "image_reference": "img",
            "image_digest": DIGEST,
        }
        bid = c.post(f"{API}/benchmarks", json=body, headers=_auth(owner)).json()["id"]
        assert c.post(f"{API}/benchmarks/{bid}/approve", headers=_auth(admin)).status_code == 200
    barrier = threading.Barrier(WRITERS)
    statuses: list[int] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        token = writers[i % len(writers)]
        with httpx.Client(base_url=server.url, timeout=60) as c:
            barrier.wait()
            r = c.post(
                f"{API}/datasets",
                json={"name": f"site-{i}", "digest": DIGEST, "case_count": i},
                headers=_auth(token),
            )
            got = [r.status_code]
            if r.status_code == 201:
                r2 = c.post(
                    f"{API}/benchmarks/{bid}/datasets",
                    json={"asset_id": r.json()["id"]},
                    headers=_auth(token),
                )
                got.append(r2.status_code)
        with lock:
            statuses.extend(got)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(statuses) == [201] * (2 * WRITERS), statuses

    db = open_database(_database_url(env))
    with db.reader() as session:
        names = session.execute(text("SELECT name FROM datasets")).scalars().all()
        links = session.execute(text("SELECT asset_id FROM benchmark_datasets")).scalars().all()
        events = verify_stored_chain(session)
    db.dispose()
    assert sorted(names) == sorted(f"site-{i}" for i in range(WRITERS))
    assert len(links) == WRITERS == len(set(links))
    # users (7 + 7 tokens), benchmark create + approve, and two events per writer
    assert events == 2 * 7 + 2 + 2 * WRITERS
    # the transparency log: one leaf per event, none lost or duplicated, under a signed
    # checkpoint whose root a client recomputes from the events it is served
    with httpx.Client(base_url=server.url, timeout=60) as c:
        body = c.get(f"{API}/audit/checkpoint", headers=_auth(admin)).json()
        served = c.get(f"{API}/audit/events?start=0&end={events}", headers=_auth(admin)).json()
    keys = [VerifierKey.from_string(k["verifier"]) for k in body["keys"]]
    checkpoint = open_checkpoint(body["checkpoint"].encode(), keys).checkpoint
    seqs = [e["seq"] for e in served["items"]]
    assert checkpoint.size == events and seqs == list(range(1, events + 1))
    leaves = [event_leaf_hash(AuditEventPublic.model_validate(e)) for e in served["items"]]
    assert len(set(leaves)) == events
    assert tlog.root_from_leaf_hashes(leaves) == checkpoint.root_hash


def test_killed_server_restarts_with_everything_committed(
    server: Server, env: dict[str, str]
) -> None:
    admin, owner = _users(env, 2)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        body = {
            "name": "brats",
            "version": "2",
            "data_contract": {"k": [1, 2]},
            "metrics_spec": {},
            "metrics_version": "wdbc/1",
            "image_reference": "img",
            "image_digest": DIGEST,
        }
        created = c.post(f"{API}/benchmarks", json=body, headers=_auth(owner)).json()
        c.post(f"{API}/benchmarks/{created['id']}/approve", headers=_auth(admin)).raise_for_status()
        for i in range(5):
            c.post(
                f"{API}/datasets",
                json={"name": f"d{i}", "digest": DIGEST, "case_count": i},
                headers=_auth(owner),
            ).raise_for_status()
    server.kill()
    server.port = free_port()
    server.start()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        got = c.get(f"{API}/benchmarks/{created['id']}", headers=_auth(owner)).json()
        assert got["state"] == "approved" and got["data_contract"] == {"k": [1, 2]}
        names = [d["name"] for d in c.get(f"{API}/datasets", headers=_auth(owner)).json()["items"]]
        assert names == [f"d{i}" for i in range(5)]
        verdict = c.get(f"{API}/audit/verify", headers=_auth(admin)).json()
        assert verdict["ok"] is True and verdict["events_verified"] == 4 + 2 + 5
