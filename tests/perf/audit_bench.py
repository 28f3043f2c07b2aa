"""The transparency log at scale: append cost, proof and audit-page latency, and a full
client-side verification, each beside the figure it replaces. A script, not a test (pytest
collects nothing here)::

    .venv/bin/python tests/perf/audit_bench.py [--events 100000] [--backend sqlite|postgresql]
        [--samples 200] [--load-seconds 8] [--cpus 0,1]

It creates a fresh registry (migrations, log key, two accounts), appends ``--events`` audit
events through the registry's own append code (``sealbench.server.audit.append_events``, in
batches of 2,000 per transaction: the same rows, leaves, subtrees and head as one request each,
minus the HTTP round trips), times single appends at that size, then serves it with
``sealbench-server serve`` (one worker) in its own process and measures, from this process:

- ``GET /api/v1/audit/checkpoint``, ``/audit/inclusion?seq=<random>`` and
  ``/audit/consistency?first=<random>&second=<size>``: p50 and p99 over ``--samples`` calls;
- the dashboard's audit page (``/ui/audit``, first page and a random page), and, beside it, the
  whole-log recomputation the page used to run per view (``GET /api/v1/audit/verify``);
- ``sealbench audit verify`` as a client process runs it (``LogMonitor.verify_log``: every event
  fetched and rehashed, the root recomputed and checked against the signed checkpoint), with
  the default ``--pace 1`` (it waits as long as each page took, so the registry spends at most
  half its time on it) and with ``--pace 0`` (as fast as it can);
- the p50/p99 of another endpoint (``GET /api/v1/benchmarks/1``, 4 clients in a separate process)
  alone, while each client-side verify runs, and while the server-side recomputation runs.

``--cpus`` pins this process, the server and the load process to those CPUs (two cores, as the
targets are stated). Targets at 100,000 events: each proof under 10 ms, the audit page under
100 ms, the full client verify under 30 s, and the other endpoint not slowed by it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server_wait import ServerStart, health_answers, wait_for_answer

BATCH = 2000
TIMEOUT_S = 120.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(samples: list[float]) -> str:
    p50, p99 = 1000 * statistics.median(samples), 1000 * _pct(samples, 0.99)
    return f"p50 {p50:7.2f} ms  p99 {p99:7.2f} ms"


def _time(call: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)
    return out


def _populate(database_url: str, settings: Any, events: int) -> tuple[str, float, list[float]]:
    """Accounts, key and ``events`` events; returns the admin token, the bulk rate and
    single-append latencies at the final size."""
    from sealbench.server.audit import NewEvent, append_event, append_events
    from sealbench.server.auth import Principal
    from sealbench.server.db import open_database
    from sealbench.server.logkeys import ensure_log_key, publish_key
    from sealbench.server.migrate import upgrade_to_head
    from sealbench.server.schemas import BenchmarkCreate
    from sealbench.server.services import benchmarks
    from sealbench.server.services.users import create_user

    db = open_database(database_url)
    upgrade_to_head(db.engine)
    now = datetime.now(UTC)
    with db.writer() as s:
        publish_key(s, ensure_log_key(settings, create=True), now)
    with db.writer() as s:
        admin, token = create_user(s, email="admin@bench.test", is_admin=True, now=now)
    with db.writer() as s:
        benchmarks.create(s, Principal(admin.id, admin.email, True), BenchmarkCreate(
            name="bench", version="1", description="", data_contract={}, metrics_spec={},
            metrics_version="wdbc/1", image_reference="img", image_digest="sha256:" + "d" * 64,
        ), now)
    rng = random.Random(7)
    t = time.perf_counter()
    done = 0
    while done < events:
        n = min(BATCH, events - done)
        batch = [
            NewEvent(
                actor_id=admin.id,
                action=rng.choice(("dataset.create", "association.approve", "result.submit")),
                entity_type="result",
                entity_id=done + i,
                payload={"benchmark_id": 1, "dataset_id": rng.randrange(1, 500),
                         "model_id": rng.randrange(1, 50),
                         "sealed_result_digest": "sha256:" + f"{done + i:064x}",
                         "summary_digest": "sha256:" + f"{rng.getrandbits(256):064x}"},
                now=now,
            )
            for i in range(n)
        ]
        with db.writer() as s:
            append_events(s, batch)
            s.commit()
        done += n
        if done % 20_000 < BATCH:
            print(f"  appended {done} events", flush=True)
    rate = events / (time.perf_counter() - t)

    def one() -> None:
        with db.writer() as s:
            append_event(s, actor_id=admin.id, action="bench.single", entity_type="thing",
                         entity_id=1, payload={"x": 1}, now=now)
            s.commit()

    single = _time(one, 100)
    db.dispose()
    return token, rate, single


def _load(url: str, token: str, stop: Any, clients: int, queue: Any) -> None:
    """Another endpoint under steady load, from its own process, until ``stop`` is set:
    (wall-clock start, latency) of each request."""
    import threading

    import httpx

    samples: list[tuple[float, float]] = []
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=TIMEOUT_S,
                          headers={"Authorization": f"Bearer {token}"}) as c:
            while not stop.is_set():
                at, t = time.time(), time.perf_counter()
                c.get("/api/v1/benchmarks/1").raise_for_status()
                with lock:
                    samples.append((at, time.perf_counter() - t))
                time.sleep(0.01)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    queue.put(samples)


def _with_load(
    url: str, token: str, seconds: float,
    during: Callable[[], tuple[float, float, float]] | None,
) -> tuple[list[float], float | None]:
    """Latencies of the other endpoint sent while ``during`` works (it returns its seconds and
    the wall-clock window of its work), or for ``seconds``."""
    ctx = multiprocessing.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_load, args=(url, token, stop, 4, queue))
    proc.start()
    time.sleep(1.0)  # the load process is up and warm
    took: float | None = None
    if during is None:
        start = time.time()
        time.sleep(seconds)
        end = time.time()
    else:
        took, start, end = during()
    stop.set()
    samples = queue.get(timeout=60)
    proc.join()
    return [lat for at, lat in samples if start <= at <= end], took


def _client_verify(url: str, token: str, state: str, pace: float, queue: Any) -> None:
    """``sealbench audit verify --pace PACE`` as a client process runs it."""
    from sealbench.client.registry.api import RegistryClient
    from sealbench.client.registry.logstate import LogState
    from sealbench.client.registry.transparency import LogMonitor

    with RegistryClient.connect(url, token) as client:
        monitor = LogMonitor(client, LogState(Path(state)), pinned=None)
        start, t = time.time(), time.perf_counter()
        report = monitor.verify_log(pace=pace)
        queue.put((time.perf_counter() - t, start, time.time(), report.events))


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    """Until the server answers ``/health``, however slowly it starts (:mod:`server_wait`)."""
    try:
        wait_for_answer(proc, health_answers(f"{url}/health"), f"the server at {url}")
    except ServerStart as exc:
        raise SystemExit(str(exc)) from None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--load-seconds", type=float, default=8.0)
    p.add_argument("--cpus", default="", help="CPUs to pin everything to, e.g. 0,1")
    args = p.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})

    import httpx

    from sealbench.server.pgcluster import ThrowawayPostgres, free_port
    from sealbench.server.settings import ServerSettings

    base = Path(tempfile.mkdtemp(prefix="sealbench-audit-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALBENCH_SERVER_")}
    env["SEALBENCH_SERVER_DATA_DIR"] = str(base / "data")
    cluster = proc = None
    try:
        if args.backend == "postgresql":
            cluster = ThrowawayPostgres().start()
            env["SEALBENCH_SERVER_DATABASE_URL"] = cluster.create_database("bench")
        (base / "data").mkdir()
        settings = ServerSettings(data_dir=base / "data",
                                  database_url=env.get("SEALBENCH_SERVER_DATABASE_URL"))
        print(f"[{args.backend}] appending {args.events} events ({os.cpu_count()} CPUs"
              f"{', pinned to ' + args.cpus if args.cpus else ''})", flush=True)
        token, rate, single = _populate(settings.effective_database_url, settings, args.events)
        print(f"bulk append         {rate:10.0f} events/s (batches of {BATCH})")
        print(f"one append at {args.events:,}  {_ms(single)}   (event, leaf, subtrees, head; "
              "O(log n))")

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "sealbench.server.cli", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait_healthy(url, proc)
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, timeout=TIMEOUT_S, headers=auth) as c:
            size = c.get("/api/v1/audit/checkpoint").json()["tree_size"]
            for _ in range(5):  # warm up
                c.get("/api/v1/audit/checkpoint").raise_for_status()
            rng = random.Random(1)
            rows = [
                ("checkpoint", _time(lambda: c.get("/api/v1/audit/checkpoint")
                                     .raise_for_status(), args.samples)),
                ("inclusion proof", _time(lambda: c.get(
                    f"/api/v1/audit/inclusion?seq={rng.randrange(1, size + 1)}")
                    .raise_for_status(), args.samples)),
                ("consistency proof", _time(lambda: c.get(
                    f"/api/v1/audit/consistency?first={rng.randrange(1, size)}&second={size}")
                    .raise_for_status(), args.samples)),
            ]
            for label, samples in rows:
                print(f"{label:19s} {_ms(samples)}   at {size:,} events")

        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as web:
            form = web.get("/ui/sign-in").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)
            assert csrf is not None
            signed_in = web.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token,
                                                      "next": "/ui/audit"})
            assert signed_in.status_code == 303, signed_in.text
            page = _time(lambda: web.get("/ui/audit").raise_for_status(), 30)
            deep = _time(lambda: web.get(
                f"/ui/audit?offset={random.randrange(0, size - 50)}").raise_for_status(), 30)
            with httpx.Client(base_url=url, timeout=TIMEOUT_S, headers=auth) as c:
                full = _time(lambda: c.get("/api/v1/audit/verify").raise_for_status(), 3)
        print(f"audit page (first)  {_ms(page)}")
        print(f"audit page (random) {_ms(deep)}")
        print(f"server recompute    {_ms(full)}   (GET /audit/verify: what every page view "
              f"cost before; ratio {statistics.median(full) / statistics.median(page):.0f}x)")

        def client_verify(pace: float) -> Callable[[], tuple[float, float, float]]:
            def run() -> tuple[float, float, float]:
                ctx = multiprocessing.get_context("spawn")
                queue = ctx.Queue()
                proc = ctx.Process(target=_client_verify,
                                   args=(url, token, str(base / f"client-{pace}"), pace, queue))
                proc.start()
                took, start, end, events = queue.get(timeout=600)
                proc.join()
                assert events >= size
                return float(took), start, end
            return run

        def server_verify() -> tuple[float, float, float]:
            start, t = time.time(), time.perf_counter()
            httpx.get(f"{url}/api/v1/audit/verify", headers=auth,
                      timeout=TIMEOUT_S).raise_for_status()
            return time.perf_counter() - t, start, time.time()

        alone, _ = _with_load(url, token, args.load_seconds, None)
        with_client, took = _with_load(url, token, args.load_seconds, client_verify(1.0))
        with_fast, took_fast = _with_load(url, token, args.load_seconds, client_verify(0.0))
        with_server, took_server = _with_load(url, token, args.load_seconds, server_verify)
        print(f"client audit verify {took:7.1f} s for {size:,} events (fetch, rehash, root; "
              f"--pace 1, the default; {took_fast:.1f} s with --pace 0)")
        ratio = _pct(alone, 0.99)
        print(f"GET /benchmarks/1 alone                           {_ms(alone)}")
        print(f"GET /benchmarks/1 during client verify            {_ms(with_client)}   "
              f"p99 ratio {_pct(with_client, 0.99) / ratio:.2f}")
        print(f"GET /benchmarks/1 during client verify (pace 0)   {_ms(with_fast)}   "
              f"p99 ratio {_pct(with_fast, 0.99) / ratio:.2f}")
        print(f"GET /benchmarks/1 during server recompute         {_ms(with_server)}   "
              f"p99 ratio {_pct(with_server, 0.99) / ratio:.2f} "
              f"(the recompute took {took_server:.1f} s)")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
