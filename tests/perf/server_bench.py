"""Throughput and latency of the registry server, SQLite then PostgreSQL. A script, not a test
(pytest collects nothing here)::

    .venv/bin/python tests/perf/server_bench.py [--duration 5] [--seed 1000] [--workers 1]
        [--backends sqlite,postgresql] [--load auto|wrk|python] [--cases list,one,post]
        [--concurrency 1,8,32] [--list-size 20] [--nice -10] [--baseline-rev REV] [--rounds 1]
        [--medperf DIR --medperf-python PY]

For each backend it creates a fresh registry (``sealbench-server init``; PostgreSQL is a
throwaway cluster started with ``initdb``/``pg_ctl``), seeds ``--seed`` benchmarks, datasets and
models through the service layer (audit chain included), starts ``sealbench-server serve`` on
127.0.0.1 in its own process, and drives it from a separate load process at concurrency 1, 8
and 32 with an API token:

- ``GET list``: ``GET /api/v1/benchmarks?limit=<--list-size>&offset=<random>``
- ``GET one``:  ``GET /api/v1/benchmarks/<random id>``
- ``POST dataset``: ``POST /api/v1/datasets`` with a fresh name each time (a write + audit event)
- ``GET page`` (``--cases page``): the dashboard's ``/ui/benchmarks/<random id>`` with a
  signed-in session cookie (the session is looked up on every page). With several workers and a
  registry that kept sessions per process, requests reaching another worker are redirected to
  sign-in and count as non-2xx

The load process is ``wrk`` (``apt-get install wrk``; a Lua script adds the header, random ids
and unique names) when present, else an asyncio ``httpx`` client. It prints requests/s, p50 and
p99 latency, the number of non-2xx answers and the server's CPU time per request (its process
tree, from /proc: the figure other work on a shared machine distorts least) per case. Target on
the 2-core machine: at least 1,000 authenticated GET/s at concurrency 32 with p99 < 50 ms on
SQLite.

``--medperf DIR --medperf-python PY`` measures MedPerf's server beside ours (issue 42), from a
checkout of its repository with its own requirements in their own virtual environment
(:mod:`medperf_registry` says how to install them), on SQLite, seeded with as many benchmarks,
datasets and models through its ORM, served by its gunicorn with the same worker count, and
driven by the same load generator (the Python one: wrk's script speaks only our paths) with
MedPerf's equivalent requests, alternating case by case. It then prints, per case, MedPerf's
server CPU per request divided by ours, against the goals (reads >= 10x, writes >= 4x).

``--baseline-rev REV`` measures a second registry side by side: the sealbench sources of git
revision ``REV`` (``git archive``, imported through ``PYTHONPATH``), seeded the same way on its
own database of the same backend, started with the same worker count, and loaded by the same
generator, alternating case by case with the current tree so that other work on a shared
machine falls on both alike. The table then adds the baseline's requests/s and CPU per request
and the ratios (current / baseline). ``--rounds R`` repeats each case R times (alternating) and
reports the round with the median CPU per request of each registry.
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
from typing import Any

from server_wait import ServerStart, health_answers, wait_for_answer

CONCURRENCIES = (1, 8, 32)
#: MedPerf's CPU per request / ours in earlier runs of ``--medperf`` (c=32, list of 32), as
#: docs/performance.md records them: the first round of issue 42 and the same script on
#: 2026-12-08 before the second round's changes
_BEFORE = {"GET list": "7.5x first round, 8.1x on fe7b437",
           "GET one": "5.6x first round, 6.0x on fe7b437",
           "POST dataset": "1.4x first round, 1.6x on fe7b437"}
DIGEST = "sha256:" + "d" * 64

WRK_LUA = r"""
local kind, token, prefix, seed, size = "", "", "", 1000, 20
local counter = 0
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end
function init(args)
  kind, token, prefix, seed, size = args[1], args[2], args[3], tonumber(args[4]), tonumber(args[5])
  id = id or 0
  math.randomseed(os.time() + id)
  if kind == "page" then
    wrk.headers["Cookie"] = "sealbench_session=" .. token
  else
    wrk.headers["Authorization"] = "Bearer " .. token
  end
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  if kind == "list" then
    local offset = math.random(0, seed - size)
    return wrk.format("GET", "/api/v1/benchmarks?limit=" .. size .. "&offset=" .. offset)
  elseif kind == "one" then
    return wrk.format("GET", "/api/v1/benchmarks/" .. math.random(1, seed))
  elseif kind == "page" then
    return wrk.format("GET", "/ui/benchmarks/" .. math.random(1, seed))
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
    url: str, kind: str, token: str, prefix: str, seed: int, conc: int, dur: float, size: int,
    other: dict[str, Any] | None = None,
) -> dict[str, float]:
    """The fallback load generator (run in a child process): ``conc`` asyncio tasks. ``other``:
    another registry's paths, body and headers for the same cases (MedPerf's, from
    :meth:`medperf_registry.MedPerfRegistry.paths`)."""
    import httpx

    latencies: list[float] = []
    non2xx = 0

    async def worker(wid: int, client: httpx.AsyncClient, stop: float) -> None:
        nonlocal non2xx
        n = 0
        while time.perf_counter() < stop:
            n += 1
            t = time.perf_counter()
            offset, one = random.randint(0, seed - size), random.randint(1, seed)
            if other is not None and kind == "list":
                r = await client.get(other["list"].format(size=size, offset=offset))
            elif other is not None and kind == "one":
                r = await client.get(other["one"].format(id=one))
            elif other is not None:
                name = f"p{prefix}-{wid}-{n}"
                body = {**other["post_body"], "name": name, other["uid_field"]: name}
                r = await client.post(other["post"], json=body)
            elif kind == "list":
                r = await client.get(f"/api/v1/benchmarks?limit={size}&offset={offset}")
            elif kind == "one":
                r = await client.get(f"/api/v1/benchmarks/{one}")
            elif kind == "page":
                r = await client.get(f"/ui/benchmarks/{one}")
            else:
                body = {"name": f"p{prefix}-{wid}-{n}", "digest": DIGEST, "case_count": 1}
                r = await client.post("/api/v1/datasets", json=body)
            latencies.append(time.perf_counter() - t)
            non2xx += not 200 <= r.status_code < 300

    async def main() -> float:
        headers = (
            {"Cookie": f"sealbench_session={token}"}
            if kind == "page"
            else {"Authorization": f"Bearer {token}"}
        )
        if other is not None:
            headers.update(other["headers"])
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
    args: argparse.Namespace, url: str, kind: str, token: str, conc: int, script: Path,
    other: dict[str, Any] | None = None,
) -> dict[str, float]:
    prefix = f"{int(time.time() * 1000) % 10**9}{conc}{kind}"
    if args.load == "wrk" and other is None:
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
            str(args.list_size),
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
        json.dumps([url, kind, token, prefix, args.seed, conc, args.duration, args.list_size,
                    other]),
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
                    metrics_version="wdbc/1",  # an installed plug-in: the registry refuses others
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
    """Until the server answers ``/health``, however slowly it starts (:mod:`server_wait`)."""
    try:
        wait_for_answer(proc, health_answers(f"{url}/health"), f"the server at {url}")
    except ServerStart as exc:
        raise SystemExit(str(exc)) from None


class _Registry:
    """One registry under test: its sources (the current tree, or a baseline revision on
    ``PYTHONPATH``), data directory, database, seeded rows and server process."""

    def __init__(
        self,
        args: argparse.Namespace,
        backend: str,
        name: str,
        pythonpath: str | None,
        cluster: Any,
    ) -> None:
        from sealbench.server.pgcluster import free_port

        self.name = name
        self.base = Path(tempfile.mkdtemp(prefix=f"sealbench-bench-{backend}-{name}-"))
        self.env = {**os.environ, "SEALBENCH_SERVER_DATA_DIR": str(self.base / "data")}
        if pythonpath is not None:
            self.env["PYTHONPATH"] = pythonpath
        if cluster is not None:
            self.env["SEALBENCH_SERVER_DATABASE_URL"] = cluster.create_database(f"bench_{name}")
        url_db = self.env.get("SEALBENCH_SERVER_DATABASE_URL") or (
            f"sqlite:///{self.base / 'data' / 'registry.sqlite3'}"
        )
        self.proc: subprocess.Popen[bytes] | None = None
        subprocess.run(
            [sys.executable, "-m", "sealbench.server.cli", "init"],
            env=self.env,
            check=True,
            capture_output=True,
        )
        t = time.perf_counter()
        seeded = subprocess.run(
            [sys.executable, __file__, "--seed-child", json.dumps([url_db, args.seed])],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        self.token = seeded.stdout.strip().splitlines()[-1]
        print(
            f"[{backend}/{name}] seeded {args.seed} benchmarks/datasets/models "
            f"in {time.perf_counter() - t:.1f}s",
            flush=True,
        )
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
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
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait_healthy(self.url, self.proc)
        self.cookie = _dashboard_session(self.url, self.token)

    def measure(
        self, args: argparse.Namespace, kind: str, conc: int, script: Path
    ) -> dict[str, float]:
        assert self.proc is not None
        cpu0 = _tree_cpu_seconds(self.proc.pid)
        credential = self.cookie if kind == "page" else self.token
        r = _run_load(args, self.url, kind, credential, conc, script)
        r["cpu_ms"] = 1000 * (_tree_cpu_seconds(self.proc.pid) - cpu0) / max(1, r["requests"])
        return r

    def close(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)


class _MedPerf:
    """MedPerf's registry (:mod:`medperf_registry`) measured as a baseline, on SQLite."""

    def __init__(self, args: argparse.Namespace) -> None:
        from medperf_registry import MedPerfRegistry

        from sealbench.server.pgcluster import free_port

        self.registry = MedPerfRegistry(Path(args.medperf), args.medperf_python, args.seed,
                                        args.workers, free_port())
        proc = self.registry.proc
        assert proc is not None
        self.proc = proc
        self.url = self.registry.url
        paths = self.registry.paths()

        def version_answers() -> bool:
            import httpx

            try:
                return httpx.get(f"{self.url}/version", headers=paths["headers"],
                                 timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for_answer(proc, version_answers, f"MedPerf at {self.url}", log=self.registry.log)

    def measure(
        self, args: argparse.Namespace, kind: str, conc: int, script: Path
    ) -> dict[str, float]:
        cpu0 = _tree_cpu_seconds(self.proc.pid)
        r = _run_load(args, self.url, kind, self.registry.token, conc, script,
                      self.registry.paths())
        r["cpu_ms"] = 1000 * (_tree_cpu_seconds(self.proc.pid) - cpu0) / max(1, r["requests"])
        return r

    def close(self) -> None:
        self.registry.close()


def _dashboard_session(url: str, token: str) -> str:
    """Sign in to the dashboard with ``token`` as a browser does; the session cookie's value."""
    import re

    import httpx

    with httpx.Client(base_url=url, timeout=30) as c:
        form = c.get("/ui/sign-in").text
        match = re.search(r'name="csrf" value="([^"]+)"', form)
        if match is None:
            raise SystemExit("the sign-in page has no CSRF field")
        r = c.post("/ui/sign-in", data={"csrf": match.group(1), "token": token, "next": "/ui/"})
        if r.status_code != 303 or "sealbench_session" not in c.cookies:
            raise SystemExit(f"dashboard sign-in failed: {r.status_code}")
        return str(c.cookies["sealbench_session"])


def _median_round(rounds: list[dict[str, float]]) -> dict[str, float]:
    """The round with the median server CPU per request (the middle one, or the lower middle)."""
    ordered = sorted(rounds, key=lambda r: r["cpu_ms"])
    return ordered[(len(ordered) - 1) // 2]


def baseline_name(args: argparse.Namespace) -> str:
    """What the baseline column measures."""
    return "medperf" if args.medperf is not None else str(args.baseline_rev)


def _baseline_sources(rev: str, into: Path) -> str:
    """``git archive`` of ``rev`` under ``into``, laid out as the ``sealbench`` namespace
    package (one link per subpackage); returns the directory to put on ``PYTHONPATH``."""
    repo = Path(__file__).resolve().parents[2]
    src, pkg = into / "src", into / "pkg" / "sealbench"
    src.mkdir(parents=True)
    pkg.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    for sub in ("crypto", "cloud", "mocktee", "server", "enclave", "benchmarks", "client"):
        if (src / sub).is_dir():
            (pkg / sub).symlink_to(src / sub)
    return str(into / "pkg")


def _bench_backend(
    args: argparse.Namespace, backend: str, script: Path, baseline_path: str | None
) -> list[tuple[str, int, dict[str, float], dict[str, float] | None]]:
    from sealbench.server.pgcluster import ThrowawayPostgres

    cluster = ThrowawayPostgres().start() if backend == "postgresql" else None
    rows = []
    registries: list[_Registry | _MedPerf] = []
    try:
        current = _Registry(args, backend, "current", None, cluster)
        registries.append(current)
        baseline: _Registry | _MedPerf | None = None
        if baseline_path is not None:
            baseline = _Registry(args, backend, "baseline", baseline_path, cluster)
            registries.append(baseline)
        elif args.medperf is not None and backend == "sqlite":
            baseline = _MedPerf(args)
            registries.append(baseline)
        labels = {"list": "GET list", "one": "GET one", "post": "POST dataset", "page": "GET page"}
        for kind in args.cases.split(","):
            label = labels[kind]
            for conc in args.concurrency:
                rounds_b: list[dict[str, float]] = []
                rounds_r: list[dict[str, float]] = []
                for _ in range(args.rounds):
                    if baseline is not None:
                        rounds_b.append(baseline.measure(args, kind, conc, script))
                    rounds_r.append(current.measure(args, kind, conc, script))
                r = _median_round(rounds_r)
                b = _median_round(rounds_b) if rounds_b else None
                rows.append((label, conc, r, b))
                line = (
                    f"[{backend}] {label:13s} c={conc:<3d} {r['rps']:8.0f} req/s"
                    f"  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms"
                    f"  non-2xx {int(r['non2xx'])}  server CPU {r['cpu_ms']:.2f} ms/req"
                )
                if b is not None:
                    line += (
                        f"  | {baseline_name(args)} {b['rps']:6.0f} req/s, CPU "
                        f"{b['cpu_ms']:.2f} ms/req, non-2xx {int(b['non2xx'])}"
                    )
                print(line, flush=True)
    finally:
        for registry in registries:
            registry.close()
        if cluster is not None:
            cluster.stop()
    return rows


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--load-child":
        url, kind, token, prefix, seed, conc, dur, size, other = json.loads(sys.argv[2])
        print(json.dumps(_python_load(url, kind, token, prefix, seed, conc, dur, size, other)))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--seed-child":
        # runs with the sources of the registry it seeds (the baseline's through PYTHONPATH)
        database_url, n = json.loads(sys.argv[2])
        print(_seed(database_url, n)[0])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=int, default=5, help="seconds per case")
    p.add_argument("--seed", type=int, default=1000, help="benchmarks, datasets and models to seed")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--backends", default="sqlite,postgresql")
    p.add_argument("--load", choices=("auto", "wrk", "python"), default="auto")
    p.add_argument("--cases", default="list,one,post", help="any of list,one,post,page")
    p.add_argument(
        "--concurrency", type=lambda v: [int(c) for c in v.split(",")], default=list(CONCURRENCIES)
    )
    p.add_argument("--list-size", type=int, default=20, help="page size of the GET list case")
    p.add_argument("--rounds", type=int, default=1, help="repeat each case, report the median")
    p.add_argument(
        "--baseline-rev",
        default=None,
        help="also measure the registry of this git revision, side by side (see above)",
    )
    p.add_argument(
        "--medperf",
        default=None,
        help="a checkout of github.com/mlcommons/medperf: also measure MedPerf's server on "
        "SQLite, side by side (tests/perf/medperf_registry.py says how to install it)",
    )
    p.add_argument(
        "--medperf-python",
        default=None,
        help="the python of a virtual environment with MedPerf's server/requirements.txt",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for this script, the server and the load generator (negative "
        "needs root): keeps other work on a shared machine from dominating the figures",
    )
    args = p.parse_args()
    if (args.medperf is None) != (args.medperf_python is None):
        p.error("--medperf and --medperf-python go together")
    if args.medperf is not None and args.baseline_rev is not None:
        p.error("one baseline at a time: --medperf or --baseline-rev")
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
        baseline = None
        if args.baseline_rev is not None:
            baseline = _baseline_sources(args.baseline_rev, Path(tmp) / "baseline")
        results = {b: _bench_backend(args, b, script, baseline) for b in args.backends.split(",")}
    header = "\nbackend     case           conc   req/s   p50 ms   p99 ms  non-2xx  CPU ms/req"
    if baseline is not None or args.medperf is not None:
        header += (
            f"  | {baseline_name(args)[:10]}: req/s  CPU ms/req  non-2xx  ratio req/s  ratio CPU"
        )
    print(header)
    for backend, rows in results.items():
        for label, conc, r, b in rows:
            line = (
                f"{backend:11s} {label:13s} {conc:5d} {r['rps']:7.0f} {r['p50_ms']:8.2f}"
                f" {r['p99_ms']:8.2f} {int(r['non2xx']):8d} {r['cpu_ms']:11.2f}"
            )
            if b is not None:
                rps_ratio = r["rps"] / max(b["rps"], 1e-9)
                cpu_ratio = r["cpu_ms"] / max(b["cpu_ms"], 1e-9)
                line += (
                    f"  | {b['rps']:16.0f} {b['cpu_ms']:11.2f} {int(b['non2xx']):8d}"
                    f" {rps_ratio:12.2f} {cpu_ratio:10.2f}"
                )
            print(line)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (other work on the machine included)")
    if args.medperf is not None:
        print("\nMedPerf's server CPU per request / ours, side by side (issue 42: reads >= 10x, "
              "writes >= 4x; the issue's run: reads 3.5-4.2x, writes 1.9x)")
        for label, conc, r, b in results.get("sqlite", []):
            if b is None:
                continue
            goal = 4 if label.startswith("POST") else 10
            times = b["cpu_ms"] / max(r["cpu_ms"], 1e-9)
            print(f"  {label:13s} c={conc:<3d} {b['cpu_ms']:7.2f} / {r['cpu_ms']:5.2f} ms = "
                  f"{times:5.1f}x  (goal {goal}x: {'met' if times >= goal else 'NOT met'}; "
                  f"before: {_BEFORE.get(label, 'not measured')})")
    sqlite_get32 = [
        r for label, c, r, _b in results.get("sqlite", []) if c == 32 and label.startswith("GET")
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
