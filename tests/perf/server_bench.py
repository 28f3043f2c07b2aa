"""Throughput and latency of the registry server, SQLite then PostgreSQL. A script, not a test
(pytest collects nothing here)::

    .venv/bin/python tests/perf/server_bench.py [--duration 5] [--seed 1000] [--workers 1]
        [--backends sqlite,postgresql] [--load auto|wrk|python] [--cases list,one,post]
        [--concurrency 1,8,32] [--nice -10]

For each backend it creates a fresh registry (``sealbench-server init``; PostgreSQL is a
throwaway cluster started with ``initdb``/``pg_ctl``), seeds ``--seed`` benchmarks, datasets and
models through the service layer (audit chain included), starts ``sealbench-server serve`` on
127.0.0.1 in its own process, and drives it from a separate load process at concurrency 1, 8
and 32 with an API token:

- ``GET list``: ``GET /api/v1/benchmarks?limit=20&offset=<random>``
- ``GET one``:  ``GET /api/v1/benchmarks/<random id>``
- ``POST dataset``: ``POST /api/v1/datasets`` with a fresh name each time (a write + audit event)

The load process is ``wrk`` (``apt-get install wrk``; a Lua script adds the header, random ids
and unique names) when present, else an asyncio ``httpx`` client. It prints requests/s, p50 and
p99 latency, the number of non-2xx answers and the server's CPU time per request (its process
tree, from /proc: the figure other work on a shared machine distorts least) per case. Target on
the 2-core machine: at least 1,000 authenticated GET/s at concurrency 32 with p99 < 50 ms on
SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

CONCURRENCIES = (1, 8, 32)
DIGEST = "sha256:" + "d" * 64
HEALTH_TIMEOUT_S = 30

WRK_LUA = r"""
local kind, token, prefix, seed = "", "", "", 1000
local counter = 0
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end
function init(args)
  kind, token, prefix, seed = args[1], args[2], args[3], tonumber(args[4])
  id = id or 0
  math.randomseed(os.time() + id)
  wrk.headers["Authorization"] = "Bearer " .. token
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  if kind == "list" then
    return wrk.format("GET", "/api/v1/benchmarks?limit=20&offset=" .. math.random(0, seed - 20))
  elseif kind == "one" then
    return wrk.format("GET", "/api/v1/benchmarks/" .. math.random(1, seed))
  end
  counter = counter + 1
  local body = '{"name":"w' .. prefix .. '-' .. id .. '-' .. counter ..
    '","digest":"' .. "sha256:" .. string.rep("e", 64) .. '","case_count":1}'
  return wrk.format("POST", "/api/v1/datasets", nil, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"errors":%d,"non2xx":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def _python_load(
    url: str, kind: str, token: str, prefix: str, seed: int, conc: int, dur: float
) -> dict[str, float]:
    """The fallback load generator (run in a child process): ``conc`` asyncio tasks."""
    import httpx

    latencies: list[float] = []
    non2xx = 0

    async def worker(wid: int, client: httpx.AsyncClient, stop: float) -> None:
        nonlocal non2xx
        n = 0
        while time.perf_counter() < stop:
            n += 1
            t = time.perf_counter()
            if kind == "list":
                r = await client.get(
                    f"/api/v1/benchmarks?limit=20&offset={random.randint(0, seed - 20)}"
                )
            elif kind == "one":
                r = await client.get(f"/api/v1/benchmarks/{random.randint(1, seed)}")
            else:
                body = {"name": f"p{prefix}-{wid}-{n}", "digest": DIGEST, "case_count": 1}
                r = await client.post("/api/v1/datasets", json=body)
            latencies.append(time.perf_counter() - t)
            non2xx += not 200 <= r.status_code < 300

    async def main() -> float:
        headers = {"Authorization": f"Bearer {token}"}
        limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
        async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as c:
            start = time.perf_counter()
            await asyncio.gather(*(worker(i, c, start + dur) for i in range(conc)))
            return time.perf_counter() - start

    elapsed = asyncio.run(main())
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "non2xx": non2xx,
    }


def _run_load(
    args: argparse.Namespace, url: str, kind: str, token: str, conc: int, script: Path
) -> dict[str, float]:
    prefix = f"{int(time.time() * 1000) % 10**9}{conc}{kind}"
    if args.load == "wrk":
        cmd = [
            "wrk",
            f"-t{min(2, conc)}",
            f"-c{conc}",
            f"-d{args.duration}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
            "--",
            kind,
            token,
            prefix,
            str(args.seed),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
        r = json.loads(line[len("RESULT ") :])
        return {
            "requests": r["requests"],
            "rps": r["requests"] / (r["duration_us"] / 1e6),
            "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000,
            "non2xx": r["non2xx"] + r["errors"],
        }
    child = [
        sys.executable,
        __file__,
        "--load-child",
        json.dumps([url, kind, token, prefix, args.seed, conc, args.duration]),
    ]
    return dict(
        json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout)
    )


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its direct children (uvicorn workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid ... utime(12th) stime(13th), 0-based 11 and 12
        if int(stat.parent.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _seed(database_url: str, n: int) -> tuple[str, str]:
    from sealbench.server.auth import Principal
    from sealbench.server.db import open_database
    from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate
    from sealbench.server.services import assets, benchmarks
    from sealbench.server.services.users import create_user

    db = open_database(database_url)
    now = datetime.now(UTC)
    with db.writer() as s:
        admin, admin_token = create_user(s, email="admin@bench.test", is_admin=True, now=now)
    with db.writer() as s:
        user, token = create_user(s, email="load@bench.test", is_admin=False, now=now)
    me = Principal(user.id, user.email, False)
    for i in range(n):
        with db.writer() as s:
            benchmarks.create(
                s,
                me,
                BenchmarkCreate(
                    name=f"bench-{i}",
                    version="1",
                    description="seeded",
                    data_contract={"i": i},
                    metrics_spec={"dice": True},
                    metrics_version="m/1",
                    image_reference="img",
                    image_digest=DIGEST,
                ),
                now,
            )
            assets.create_dataset(
                s, me, DatasetCreate(name=f"site-{i}", digest=DIGEST, case_count=i), now
            )
            assets.create_model(
                s, me, ModelCreate(name=f"model-{i}", version="1", digest=DIGEST), now
            )
    db.dispose()
    del admin, admin_token
    return token, user.email


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("server did not become healthy")


def _bench_backend(
    args: argparse.Namespace, backend: str, script: Path
) -> list[tuple[str, int, dict[str, float]]]:
    from sealbench.server.pgcluster import ThrowawayPostgres, free_port

    base = Path(tempfile.mkdtemp(prefix=f"sealbench-bench-{backend}-"))
    env = {**os.environ, "SEALBENCH_SERVER_DATA_DIR": str(base / "data")}
    cluster = None
    if backend == "postgresql":
        cluster = ThrowawayPostgres().start()
        env["SEALBENCH_SERVER_DATABASE_URL"] = cluster.create_database("bench")
    url_db = (
        env.get("SEALBENCH_SERVER_DATABASE_URL")
        or f"sqlite:///{base / 'data' / 'registry.sqlite3'}"
    )
    rows = []
    proc = None
    try:
        subprocess.run(
            [sys.executable, "-m", "sealbench.server.cli", "init"],
            env=env,
            check=True,
            capture_output=True,
        )
        t = time.perf_counter()
        token, _email = _seed(url_db, args.seed)
        print(
            f"[{backend}] seeded {args.seed} benchmarks/datasets/models "
            f"in {time.perf_counter() - t:.1f}s",
            flush=True,
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "sealbench.server.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(args.workers),
        ]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_healthy(url, proc)
        labels = {"list": "GET list", "one": "GET one", "post": "POST dataset"}
        for kind in args.cases.split(","):
            label = labels[kind]
            for conc in args.concurrency:
                cpu0 = _tree_cpu_seconds(proc.pid)
                r = _run_load(args, url, kind, token, conc, script)
                r["cpu_ms"] = 1000 * (_tree_cpu_seconds(proc.pid) - cpu0) / max(1, r["requests"])
                rows.append((label, conc, r))
                print(
                    f"[{backend}] {label:13s} c={conc:<3d} {r['rps']:8.0f} req/s"
                    f"  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms"
                    f"  non-2xx {int(r['non2xx'])}  server CPU {r['cpu_ms']:.2f} ms/req",
                    flush=True,
                )
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    return rows


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--load-child":
        url, kind, token, prefix, seed, conc, dur = json.loads(sys.argv[2])
        print(json.dumps(_python_load(url, kind, token, prefix, seed, conc, dur)))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=int, default=5, help="seconds per case")
    p.add_argument("--seed", type=int, default=1000, help="benchmarks, datasets and models to seed")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--backends", default="sqlite,postgresql")
    p.add_argument("--load", choices=("auto", "wrk", "python"), default="auto")
    p.add_argument("--cases", default="list,one,post", help="any of list,one,post")
    p.add_argument(
        "--concurrency", type=lambda v: [int(c) for c in v.split(",")], default=list(CONCURRENCIES)
    )
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for this script, the server and the load generator (negative "
        "needs root): keeps other work on a shared machine from dominating the figures",
    )
    args = p.parse_args()
    if args.nice:
        os.nice(args.nice)
    if args.load == "auto":
        args.load = "wrk" if shutil.which("wrk") else "python"
    print(
        f"load generator: {args.load}; {args.duration}s per case; {os.cpu_count()} CPUs; "
        f"{args.workers} server worker(s); load average {os.getloadavg()[0]:.1f}; "
        f"niceness {os.nice(0)}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "load.lua"
        script.write_text(WRK_LUA)
        results = {b: _bench_backend(args, b, script) for b in args.backends.split(",")}
    print("\nbackend     case           conc   req/s   p50 ms   p99 ms  non-2xx  CPU ms/req")
    for backend, rows in results.items():
        for label, conc, r in rows:
            print(
                f"{backend:11s} {label:13s} {conc:5d} {r['rps']:7.0f} {r['p50_ms']:8.2f}"
                f" {r['p99_ms']:8.2f} {int(r['non2xx']):8d} {r['cpu_ms']:11.2f}"
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (other work on the machine included)")
    sqlite_get32 = [
        r for label, c, r in results.get("sqlite", []) if c == 32 and label.startswith("GET")
    ]
    if sqlite_get32:
        worst = min(r["rps"] for r in sqlite_get32)
        p99 = max(r["p99_ms"] for r in sqlite_get32)
        verdict = "met" if worst >= 1000 and p99 < 50 else "NOT met"
        print(
            f"\ntarget (SQLite, c=32, GET >= 1000 req/s, p99 < 50 ms): {verdict} "
            f"(lowest {worst:.0f} req/s, highest p99 {p99:.1f} ms)"
        )


if __name__ == "__main__":
    main()
