"""The registry scaled out: two and four ``sealbench-server serve`` processes on one PostgreSQL,
behind a round-robin proxy that sends each request to the next process (as a load balancer
without session affinity does).

- Migrations run once: every replica's ``sealbench-server migrate`` starts at the same moment;
  one applies the migrations, the others wait and find nothing to do (PostgreSQL and SQLite).
- API calls and a dashboard session (plain HTTP and a headless Chromium) hop between all the
  processes and keep working: sessions live in the database, not in a process.
- ``sealbench-server token revoke`` and ``user disable`` take effect on every process within
  the stated bound (``revocation_check_seconds``, 1 s here, while the token cache keeps entries
  for 30 s); a revoked token's dashboard session ends at once.
- Concurrent run-status reports (``PUT /runs/{id}``), each sent twice to different processes,
  lose nothing and duplicate nothing: every run ends in its last state, with one audit event
  per state change, and the audit chain verifies.
"""

from __future__ import annotations

import http.client
import itertools
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from sealbench.server.audit import verify_stored_chain
from sealbench.server.db import open_database
from sealbench.server.migrate import current_revision, head_revision
from sealbench.server.pgcluster import ClusterError, ThrowawayPostgres, free_port

API = "/api/v1"
START_TIMEOUT_S = 60
CHECK_S = 1.0
BACKEND_HEADER = "x-test-backend"
CHROMIUM = Path("/usr/bin/chromium")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_HOP = ("connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection")


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


# ---------------------------------------------------------------- a round-robin balancer


class RoundRobinProxy:
    """An HTTP/1.1 reverse proxy on a free loopback port: each request goes to the next
    backend in turn (no affinity) and its response names the backend in ``x-test-backend``."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._next = itertools.cycle(range(len(ports)))
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                with outer._lock:
                    index = next(outer._next)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn = http.client.HTTPConnection("127.0.0.1", outer.ports[index], timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    payload = response.read()
                finally:
                    conn.close()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in (*_HOP, "content-length"):
                        self.send_header(name, value)
                self.send_header(BACKEND_HEADER, str(index))
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> RoundRobinProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- the replicas


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sealbench.server.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _migrate_together(env: dict[str, str], n: int) -> list[subprocess.CompletedProcess[str]]:
    """``n`` ``migrate`` processes released at the same moment (they wait on a file)."""
    go = Path(env["SEALBENCH_SERVER_DATA_DIR"]).parent / "go"
    code = (
        "import pathlib, sys, time\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.005)\n"
        "from sealbench.server.cli import main\n"
        "sys.exit(main(['migrate']))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    time.sleep(3)  # every process is waiting (imports done) before the start
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def _assert_migrated_once(results: list[subprocess.CompletedProcess[str]], url: str) -> None:
    assert [r.returncode for r in results] == [0] * len(results), [r.stderr for r in results]
    applied = [r for r in results if "migrated from revision None" in r.stdout]
    assert len(applied) == 1, [r.stdout for r in results]
    assert all("already at revision" in r.stdout for r in results if r is not applied[0])
    db = open_database(url)
    assert current_revision(db.engine) == head_revision()
    db.dispose()


@dataclass
class Replicas:
    env: dict[str, str]
    ports: list[int]
    proxy: RoundRobinProxy
    migrations: list[subprocess.CompletedProcess[str]]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.proxy.url

    def user(self, email: str) -> str:
        done = _cli(self.env, "user", "add", "--email", email)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def revoke(self, email: str) -> None:
        listing = _cli(self.env, "token", "list", "--email", email)
        assert listing.returncode == 0, listing.stderr
        token_id = listing.stdout.splitlines()[1].split()[0]
        done = _cli(self.env, "token", "revoke", "--id", token_id)
        assert done.returncode == 0, done.stderr


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    pytest.fail(f"server at {url} did not become healthy")


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}-processes")
def replicas(
    request: pytest.FixtureRequest,
    pg_cluster: ThrowawayPostgres,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replicas]:
    n: int = request.param
    base = tmp_path_factory.mktemp(f"replicas-{n}")
    url = pg_cluster.create_database(f"scale_{n}_{int(time.time() * 1000)}")
    env = {
        **os.environ,
        "SEALBENCH_SERVER_DATA_DIR": str(base / "data"),  # the log key, shared as a secret is
        "SEALBENCH_SERVER_DATABASE_URL": url,
        "SEALBENCH_SERVER_TOKEN_CACHE_SECONDS": "30",
        "SEALBENCH_SERVER_REVOCATION_CHECK_SECONDS": str(CHECK_S),
    }
    migrations = _migrate_together(env, n)
    done = _cli(env, "init")  # the log's key, once; the migrations are already applied
    assert done.returncode == 0, done.stderr
    ports = [free_port() for _ in range(n)]
    procs = []
    try:
        for port in ports:
            log = base / f"server-{port}.log"
            with log.open("wb") as sink:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "sealbench.server.cli",
                            "serve",
                            "--port",
                            str(port),
                        ],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=sink,
                    )
                )
        for port, proc in zip(ports, procs, strict=True):
            _wait_healthy(f"http://127.0.0.1:{port}", proc, base / f"server-{port}.log")
        with RoundRobinProxy(ports) as proxy:
            yield Replicas(env, ports, proxy, migrations, procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ---------------------------------------------------------------- tests


def test_replicas_starting_together_migrate_once(replicas: Replicas) -> None:
    _assert_migrated_once(replicas.migrations, replicas.env["SEALBENCH_SERVER_DATABASE_URL"])


def test_concurrent_migrations_on_sqlite_apply_once(tmp_path: Path) -> None:
    env = {**os.environ, "SEALBENCH_SERVER_DATA_DIR": str(tmp_path / "data")}
    env.pop("SEALBENCH_SERVER_DATABASE_URL", None)
    (tmp_path / "data").mkdir(mode=0o700)
    results = _migrate_together(env, 4)
    _assert_migrated_once(results, f"sqlite:///{tmp_path / 'data' / 'registry.sqlite3'}")


def test_api_calls_hop_between_processes_and_revocation_reaches_all(replicas: Replicas) -> None:
    n = len(replicas.ports)
    token = replicas.user(f"api-{n}@x.test")
    bystander = replicas.user(f"bystander-{n}@x.test")
    served: set[str] = set()
    with httpx.Client(base_url=replicas.url, timeout=30) as c:
        for i in range(4 * n):
            r = c.get(f"{API}/users/me", headers=_bearer(token if i % 2 else bystander))
            assert r.status_code == 200, r.text
            served.add(r.headers[BACKEND_HEADER])
        assert served == {str(i) for i in range(n)}  # every process has both tokens cached
        replicas.revoke(f"api-{n}@x.test")
        time.sleep(CHECK_S + 0.5)  # the stated bound, plus slack for a loaded machine
        refused = [c.get(f"{API}/users/me", headers=_bearer(token)) for _ in range(2 * n)]
        assert [r.status_code for r in refused] == [401] * (2 * n)
        assert {r.headers[BACKEND_HEADER] for r in refused} == served
        kept = [c.get(f"{API}/users/me", headers=_bearer(bystander)) for _ in range(2 * n)]
        assert [r.status_code for r in kept] == [200] * (2 * n)


def test_disabled_user_refused_by_every_process(replicas: Replicas) -> None:
    n = len(replicas.ports)
    email = f"disabled-{n}@x.test"
    token = replicas.user(email)
    with httpx.Client(base_url=replicas.url, timeout=30) as c:
        assert all(
            c.get(f"{API}/users/me", headers=_bearer(token)).status_code == 200 for _ in range(n)
        )
        done = _cli(replicas.env, "user", "disable", "--email", email)
        assert done.returncode == 0, done.stderr
        time.sleep(CHECK_S + 0.5)
        statuses = [
            c.get(f"{API}/users/me", headers=_bearer(token)).status_code for _ in range(2 * n)
        ]
    assert statuses == [401] * (2 * n)


def _sign_in(c: httpx.Client, token: str) -> None:
    form = c.get("/ui/sign-in")
    csrf = _CSRF.search(form.text)
    assert csrf is not None, form.text
    r = c.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token, "next": "/ui/mine"})
    assert r.status_code == 303, r.text


def test_dashboard_session_hops_between_processes_until_revoked(replicas: Replicas) -> None:
    n = len(replicas.ports)
    email = f"web-{n}@x.test"
    token = replicas.user(email)
    with httpx.Client(base_url=replicas.url, timeout=30) as c:
        _sign_in(c, token)
        served = set()
        for path in ("/ui/", "/ui/mine", "/ui/inbox") * n:
            r = c.get(path)
            assert r.status_code == 200 and email in r.text, (path, r.status_code)
            served.add(r.headers[BACKEND_HEADER])
        assert served == {str(i) for i in range(n)}
        # a form rendered by one process is accepted by the next
        page = c.get("/ui/mine")
        csrf = _CSRF.search(page.text)
        assert csrf is not None
        replicas.revoke(email)  # the session ends at once, on every process
        ends = [c.get("/ui/mine").status_code for _ in range(n)]
        assert ends == [303] * n


def test_sign_out_on_one_process_ends_the_session_on_all(replicas: Replicas) -> None:
    n = len(replicas.ports)
    token = replicas.user(f"signout-{n}@x.test")
    with httpx.Client(base_url=replicas.url, timeout=30) as c:
        _sign_in(c, token)
        page = c.get("/ui/mine")
        csrf = _CSRF.search(page.text)
        assert page.status_code == 200 and csrf is not None
        cookies = dict(c.cookies)
        r = c.post("/ui/sign-out", data={"csrf": csrf.group(1)})
        assert r.status_code == 303, r.text
        c.cookies.clear()
        c.cookies.update(cookies)  # the old cookie, replayed to every process
        assert [c.get("/ui/mine").status_code for _ in range(n)] == [303] * n


def test_browser_session_hops_between_processes(replicas: Replicas) -> None:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run 'apt-get install -y chromium' as root")
    n = len(replicas.ports)
    email = f"browser-{n}@x.test"
    token = replicas.user(email)
    served: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_context().new_page()
            page.set_default_timeout(20_000)
            page.on(
                "response",
                lambda r: (
                    served.append(r.headers.get(BACKEND_HEADER, "?"))
                    if "/ui/static/" not in r.url
                    else None
                ),
            )
            page.goto(f"{replicas.url}/ui/mine")
            assert "/ui/sign-in" in page.url
            page.fill("#token", token)
            with page.expect_navigation():
                page.click("button[type=submit]")
            for path in ("/ui/", "/ui/mine", "/ui/inbox") * n:
                page.goto(f"{replicas.url}{path}")
                assert page.url == f"{replicas.url}{path}", page.url
                assert email in page.locator("body").inner_text()
            assert set(served) == {str(i) for i in range(n)}
            replicas.revoke(email)
            page.goto(f"{replicas.url}/ui/mine")
            assert "/ui/sign-in" in page.url
        finally:
            browser.close()


RUN_STATES = ("planned", "launching", "running", "succeeded")
IMAGE_DIGEST = "sha256:" + "1" * 64


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def test_concurrent_run_status_updates_lose_nothing(replicas: Replicas) -> None:
    n = len(replicas.ports)
    authority, hospital, vendor = (
        replicas.user(f"{who}-runs-{n}@x.test") for who in ("authority", "hospital", "vendor")
    )
    done = _cli(replicas.env, "user", "add", "--email", f"root-runs-{n}@x.test", "--admin")
    assert done.returncode == 0, done.stderr
    admin = done.stdout.strip().splitlines()[-1]
    with httpx.Client(base_url=replicas.url, timeout=60) as c:
        bid = _ok(
            c.post(
                f"{API}/benchmarks",
                json={
                    "name": f"brats-runs-{n}",
                    "version": "1",
                    "data_contract": {"modalities": ["t1", "t2"], "shape": [128, 128, 128]},
                    "metrics_spec": {"dice": {"labels": [1, 2, 3]}},
                    "metrics_version": "wdbc/1",  # installed here; fixes no grid
                    "image_reference": "registry.test/sealbench/eval",
                    "image_digest": IMAGE_DIGEST,
                },
                headers=_bearer(authority),
            ),
            201,
        )["id"]
        _ok(c.post(f"{API}/benchmarks/{bid}/approve", headers=_bearer(admin)))
        did = _ok(
            c.post(
                f"{API}/datasets",
                json={"name": "site", "digest": "sha256:" + "2" * 64, "case_count": 5},
                headers=_bearer(hospital),
            ),
            201,
        )["id"]
        mid = _ok(
            c.post(
                f"{API}/models",
                json={"name": "unet", "version": "1", "digest": "sha256:" + "3" * 64},
                headers=_bearer(vendor),
            ),
            201,
        )["id"]
        for kind, asset, owner in (("datasets", did, hospital), ("models", mid, vendor)):
            _ok(
                c.post(
                    f"{API}/benchmarks/{bid}/{kind}",
                    json={"asset_id": asset},
                    headers=_bearer(owner),
                ),
                201,
            )
            _ok(
                c.post(f"{API}/benchmarks/{bid}/{kind}/{asset}/approve", headers=_bearer(authority))
            )

    def report(run_id: str, seq: int, state: str) -> dict[str, Any]:
        return {
            "benchmark_id": bid,
            "dataset_id": did,
            "model_id": mid,
            "state": state,
            "seq": seq,
            "image_digest": IMAGE_DIGEST,
            "tee": "mock",
            "attempts": seq,
        }

    reporters, runs_each = 8, 5
    barrier = threading.Barrier(reporters)
    failures: list[str] = []

    def reporter(worker: int) -> None:
        rng = random.Random(worker)
        pending = {
            f"run-{worker}-{i}": list(enumerate(RUN_STATES, start=1)) for i in range(runs_each)
        }
        with httpx.Client(base_url=replicas.url, timeout=60) as c:
            barrier.wait()
            while pending:
                run_id = rng.choice(sorted(pending))
                seq, state = pending[run_id].pop(0)
                if not pending[run_id]:
                    del pending[run_id]
                for _ in range(2):  # a retry: the same report again, to the next process
                    r = c.put(
                        f"{API}/runs/{run_id}",
                        json=report(run_id, seq, state),
                        headers=_bearer(hospital),
                    )
                    if r.status_code != 200:
                        failures.append(f"{run_id} {state}: {r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=reporter, args=(w,)) for w in range(reporters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert failures == []
    with httpx.Client(base_url=replicas.url, timeout=60) as c:
        runs: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            page = _ok(c.get(f"{API}/runs?limit=200&offset={offset}", headers=_bearer(hospital)))
            runs.extend(page["items"])
            offset = page["next_offset"]
    expected = {f"run-{w}-{i}" for w in range(reporters) for i in range(runs_each)}
    assert sorted(r["run_id"] for r in runs) == sorted(expected)
    assert {(r["state"], r["seq"]) for r in runs} == {("succeeded", len(RUN_STATES))}
    db = open_database(replicas.env["SEALBENCH_SERVER_DATABASE_URL"])
    with db.reader() as session:
        verify_stored_chain(session)
        events = (
            session.execute(text("SELECT payload FROM audit_events WHERE entity_type = 'run'"))
            .scalars()
            .all()
        )
    db.dispose()
    assert len(events) == len(expected) * len(RUN_STATES)
