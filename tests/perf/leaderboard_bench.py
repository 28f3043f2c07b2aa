"""The registry's start and its pooled leaderboard at FeTS scale and twice it, measured over
HTTP on SQLite, cold and warm side by side (issue 42). A script, not a test (pytest collects
nothing here)::

    .venv/bin/python tests/perf/leaderboard_bench.py [--sizes 41x32,82x64] [--repeat 5] [--cold 3]

For each size (models x sites) it migrates a fresh SQLite registry and inserts the benchmark
(``brats-2023-gli/1``), datasets, models and one result per pair directly (summaries as the
enclave writes them: ``sealbench/result-summary`` around a BraTS summary, a release of Dice per
region with OpenDP noise; a 2.5 KB token) with the statistics accepting them stores
(:mod:`sealbench.server.services.result_statistics`). It then serves the registry from **fresh
server processes** (this script with ``--serve``, on a loopback port, importing nothing of the
benchmark's plug-in) and times from the client side (httpx; wall milliseconds), with the CPU
milliseconds the server process spent on each request (a middleware of this script's server
reads ``process_time``: the figure least distorted by other work on a shared machine):

- ``pooled API cold``: the first ``GET /api/v1/benchmarks/{id}/leaderboard/pooled`` of a fresh
  process, the board stored in the database (:mod:`sealbench.server.db_cache`) by an earlier
  process (median over --cold processes); ``pooled API``: the same again (warm), median
- ``pooled page cold`` / ``pooled page``: ``GET /ui/benchmarks/{id}/pooled`` after signing in,
  first of a fresh process and warm; ``pooled page, show=all``: every forest plot and site column
- ``pooled CSV`` (every metric) and ``per-dataset API`` (every summary, in full), warm
- ``... rebuilt``: the first request of a fresh process after the stored boards were emptied
  (what a new result does: the board is built, which imports the plug-in, and stored)
- ``pooled API cold, no stats``: the same without the statistics rows (every summary parsed)

and, from ``sealbench-server serve`` started as a user starts it, the CPU seconds its process has
spent when it answers its first request: on an empty registry (an authenticated ``GET
/api/v1/benchmarks``) and at each size (the pooled API, the board stored or rebuilt).

It prints the figures beside issue 42's (its anchors, measured before this work) and the
targets: at 41 x 32 the pooled API <= 50 ms CPU cold and <= 20 ms warm, the page <= 100 ms warm
and <= 200 KB; a start to the first answer <= 1.5 s of CPU empty and <= 2.5 s at 41 x 32.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from server_wait import port_answers, tree_cpu_seconds, wait_for_answer

from sealbench.crypto.digest import sha256_digest
from sealbench.server.db import open_database
from sealbench.server.db_cache import BoardCache
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.models import Benchmark, Dataset, Model, Result, ResultStatistics
from sealbench.server.services import result_statistics as rs
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOKEN = "eyJhbGciOiJSUzI1NiJ9." + "x" * 2400 + ".sig"


def _summaries(k: int) -> list[dict[str, Any]]:
    # imported here, not by the --serve child: its first request must pay its own imports
    import numpy as np

    from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, CaseScores, RegionScores
    from sealbench.benchmarks.brats.plugin import PLUGIN
    from sealbench.benchmarks.release import OpenDPGaussian

    rng = np.random.default_rng(0)
    out = []
    for _ in range(k):
        n = int(rng.integers(20, 120))
        cases = []
        for i in range(n):
            regions = {}
            for region in BRATS_2023_GLI_METRICS.regions:
                d = float(np.clip(rng.normal(0.8, 0.12), 0, 1))
                regions[region] = RegionScores(
                    dice=d, hd95=float(rng.gamma(2, 4)), sensitivity=d, specificity=0.999,
                    lesion_dice=d * 0.95, lesion_hd95=float(rng.gamma(2, 5)),
                    num_tp=int(rng.integers(0, 4)), num_fp=int(rng.integers(0, 3)),
                    num_fn=int(rng.integers(0, 2)), gt_volume_mm3=1.0, pred_volume_mm3=1.0)
            cases.append(CaseScores(case_id=f"c{i}", regions=regions))
        out.append({"format": "sealbench/result-summary", "version": 1,
                    "metrics_version": "brats-2023-gli/1",
                    "aggregates": PLUGIN.summarise(cases, OpenDPGaussian()).to_json()})
    return out


def _seed(url: str, models: int, sites: int, templates: list[dict[str, Any]]) -> tuple[int, str]:
    from sealbench.benchmarks.brats.plugin import PLUGIN

    db = open_database(url)
    upgrade_to_head(db.engine)
    try:
        with db.writer() as s:
            user, token = create_user(s, email="authority@bench.test", is_admin=False, now=NOW)
            bench = Benchmark(owner_id=user.id, name="fets", version="1", description="d",
                              data_contract={}, metrics_spec={},
                              metrics_version="brats-2023-gli/1", image_reference="r",
                              image_digest="sha256:" + "1" * 64, state="approved",
                              created_at=NOW, updated_at=NOW)
            s.add(bench)
            s.flush()
            ds = [Dataset(owner_id=user.id, name=f"site-{i:03d}",
                          digest=sha256_digest(f"d{i}".encode()), case_count=50, statistics={},
                          state="registered", created_at=NOW) for i in range(sites)]
            ms = [Model(owner_id=user.id, name=f"team-{i:03d}", version="1",
                        digest=sha256_digest(f"m{i}".encode()), format="onnx", io_contract={},
                        state="registered", created_at=NOW) for i in range(models)]
            s.add_all([*ds, *ms])
            s.flush()
            n = 0
            for m in ms:
                rows = []
                for d in ds:
                    n += 1
                    rows.append(Result(
                        benchmark_id=bench.id, dataset_id=d.id, model_id=m.id,
                        submitted_by_id=user.id, summary=templates[n % len(templates)],
                        sealed_result_digest=sha256_digest(f"s{n}".encode()),
                        attestation_token=TOKEN, token_issuer="https://mock.invalid",
                        image_digest="sha256:" + "1" * 64, nonce=f"{n:064x}", created_at=NOW))
                s.add_all(rows)
                s.flush()
                # what accepting them stores (each result's figures; the last one carries the
                # model's pool over every site), without one pooling query per result
                read = [(r.id, *rs.read(PLUGIN, r.summary, r.token_issuer)) for r in rows]
                pool = rs.StoredPool(frozenset(r.id for r in rows), rs.pooled_figures(
                    PLUGIN, [summary for _, _, summary in read if summary is not None]))
                for rid, stats, _ in read:
                    s.add(rs.encode(rid, PLUGIN, rs.Statistics(
                        stats.n_cases, stats.figures, stats.reason, stats.mock_tee,
                        stats.epsilon, stats.delta, pool if rid == rows[-1].id else None)))
            s.commit()
            return bench.id, token
    finally:
        db.dispose()


def _drop_statistics(url: str) -> None:
    db = open_database(url)
    try:
        with db.writer() as s:
            s.query(ResultStatistics).delete()
            s.commit()
    finally:
        db.dispose()


def _drop_boards(url: str) -> None:
    """Empty the stored boards (what a new result does to its benchmark's: the stamp changes
    and the next request builds the board again)."""
    db = open_database(url)
    try:
        with db.writer() as s:
            s.query(BoardCache).delete()
            s.commit()
    finally:
        db.dispose()


def serve(data_dir: Path, port: int) -> None:
    """The registry in ``data_dir`` on 127.0.0.1:``port`` (this script's child process), with a
    middleware that reports each request's CPU time."""
    import uvicorn

    from sealbench.server.app import create_app

    settings = ServerSettings(data_dir=data_dir, trusted_issuers=())
    app = create_app(settings)

    @app.middleware("http")
    async def cpu_time(request: Any, call_next: Any) -> Any:
        # the server process's CPU time for this request (nothing else runs in it meanwhile):
        # the figure least distorted by other work on a shared machine
        start = time.process_time()
        response = await call_next(request)
        response.headers["x-bench-cpu-ms"] = f"{(time.process_time() - start) * 1000:.2f}"
        return response

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


def start_to_first_answer(data_dir: Path, path: str, token: str) -> tuple[float, float]:
    """``sealbench-server serve`` on ``data_dir`` as a user starts it: the CPU seconds its
    process has spent when it answers its first request (``GET path`` with ``token``, sent as
    soon as the port accepts), and the wall seconds."""
    port = _free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "SEALBENCH_SERVER_DATA_DIR": str(data_dir)}
    # the bytecode an installed registry has (pip compiles it): a source tree another checkout
    # step just relinked would otherwise make this start compile every module it imports
    subprocess.run([sys.executable, "-c", "import sealbench.server.cli, sealbench.server.app"],
                   env=env, check=True)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "sealbench.server.cli", "serve", "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL)
    try:
        wait_for_answer(proc, port_answers(port), f"sealbench-server serve on port {port}")
        r = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=300,
                      headers={"Authorization": f"Bearer {token}"})
        r.raise_for_status()
        wall = time.monotonic() - start
        return tree_cpu_seconds(proc.pid), wall
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Server:
    """A fresh server process on the registry in ``data_dir``, up when entered."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> _Server:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(self.data_dir), str(self.port)],
            env={**os.environ, "PYTHONWARNINGS": "ignore"})
        # Its answer, not a clock: the port accepts once uvicorn's start-up is done (no request
        # of ours before the one measured), however long a loaded machine makes that.
        wait_for_answer(self.proc, port_answers(self.port), f"the server on port {self.port}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


Figure = tuple[float, float, int]  # wall ms, server CPU ms, bytes


def _timed(client: httpx.Client, path: str, **kw: Any) -> Figure:
    """Wall ms, the server's CPU ms and bytes of one request."""
    start = time.perf_counter()
    r = client.get(path, **kw)
    elapsed = time.perf_counter() - start
    r.raise_for_status()
    return elapsed * 1000, float(r.headers["x-bench-cpu-ms"]), len(r.content)


def _figure(runs: list[Figure]) -> Figure:
    """The medians of ``runs``."""
    return (statistics.median(t for t, _, _ in runs), statistics.median(c for _, c, _ in runs),
            runs[0][2])


def _median(client: httpx.Client, path: str, repeat: int, **kw: Any) -> Figure:
    return _figure([_timed(client, path, **kw) for _ in range(repeat)])


@contextmanager
def _web(base: str, token: str) -> Iterator[httpx.Client]:
    """A dashboard client signed in with ``token``."""
    with httpx.Client(base_url=base, timeout=120) as web:
        form = web.get("/ui/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        web.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token, "next": "/ui/"})
        yield web


def _cold_and_warm(data_dir: Path, url: str, bid: int, token: str, repeat: int, cold: int,
                   *, pages: bool, rebuilt: bool) -> dict[str, Figure]:
    """The first request of ``cold`` fresh processes and the warm figures of the first one;
    ``rebuilt``: the stored boards are emptied before each process (as a new result makes
    them stale), else the board is stored before the first process starts."""
    board = f"/api/v1/benchmarks/{bid}/leaderboard"
    headers = {"Authorization": f"Bearer {token}"}
    firsts, out = [], {}
    for i in range(cold):
        if rebuilt:
            _drop_boards(url)
        with _Server(data_dir) as server, httpx.Client(base_url=server.base, timeout=120,
                                                      headers=headers) as api:
            firsts.append(_timed(api, board + "/pooled"))
            if i == 0:
                out["warm"] = _median(api, board + "/pooled", repeat)
                if pages:
                    with _web(server.base, token) as web:
                        _timed(web, f"/ui/benchmarks/{bid}/pooled")  # stores the page's board
                        out["page"] = _median(web, f"/ui/benchmarks/{bid}/pooled", repeat)
                        out["page all"] = _median(
                            web, f"/ui/benchmarks/{bid}/pooled?show=all", max(1, repeat // 2))
                        out["csv"] = _median(web, f"/ui/benchmarks/{bid}/pooled.csv", repeat)
                    out["per-dataset"] = _median(api, board, max(1, repeat // 2))
    out["cold"] = _figure(firsts)
    if pages:
        page_firsts = []
        for _ in range(cold):
            if rebuilt:
                _drop_boards(url)
            with _Server(data_dir) as server, _web(server.base, token) as web:
                page_firsts.append(_timed(web, f"/ui/benchmarks/{bid}/pooled"))
        out["page cold"] = _figure(page_firsts)
    return out


def _bench(models: int, sites: int, repeat: int, cold: int, templates: list[dict[str, Any]]
           ) -> tuple[dict[str, Figure], dict[str, tuple[float, float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        url = ServerSettings(data_dir=data_dir, trusted_issuers=()).effective_database_url
        bid, token = _seed(url, models, sites, templates)
        pooled = f"/api/v1/benchmarks/{bid}/leaderboard/pooled"
        _drop_boards(url)
        starts = {"start + first pooled API, board rebuilt":
                  start_to_first_answer(data_dir, pooled, token)}
        starts["start + first pooled API, board stored"] = start_to_first_answer(
            data_dir, pooled, token)
        stored = _cold_and_warm(data_dir, url, bid, token, repeat, cold, pages=True,
                                rebuilt=False)
        rebuilt = _cold_and_warm(data_dir, url, bid, token, repeat, cold, pages=True,
                                 rebuilt=True)
        _drop_statistics(url)
        bare = _cold_and_warm(data_dir, url, bid, token, repeat, cold, pages=False,
                              rebuilt=True)
        return {
            "pooled API cold": stored["cold"],
            "pooled API": stored["warm"],
            "pooled page cold": stored["page cold"],
            "pooled page": stored["page"],
            "pooled page, show=all": stored["page all"],
            "pooled CSV": stored["csv"],
            "per-dataset API": stored["per-dataset"],
            "pooled API cold, rebuilt": rebuilt["cold"],
            "pooled page cold, rebuilt": rebuilt["page cold"],
            "pooled API cold, no stats": bare["cold"],
        }, starts


def _empty_start() -> tuple[float, float]:
    """Start + first answer (an authenticated ``GET /api/v1/benchmarks``) on an empty
    registry."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        db = open_database(ServerSettings(data_dir=data_dir,
                                          trusted_issuers=()).effective_database_url)
        upgrade_to_head(db.engine)
        with db.writer() as s:
            _user, token = create_user(s, email="first@bench.test", is_admin=False, now=NOW)
        db.dispose()
        return start_to_first_answer(data_dir, "/api/v1/benchmarks", token)


#: The figures issue 42 measured before this work (CPU ms; KB), the anchors printed beside ours.
ISSUE_42 = {
    "pooled API cold": "170-240 ms",
    "pooled API": "38-58 ms",
    "pooled page cold": "390-480 ms, 718 KB",
    "pooled page": "216-268 ms, 718 KB",
    "start + first answer, empty": "2.2 s",
    "start + first pooled API, board stored": "6.3 s",
    "start + first pooled API, board rebuilt": "6.3 s",
}
TARGETS = {
    "pooled API cold": "<= 50 ms",
    "pooled API": "<= 20 ms",
    "pooled page": "<= 100 ms, <= 200 KB",
    "start + first answer, empty": "<= 1.5 s",
    "start + first pooled API, board stored": "<= 2.5 s",
}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), int(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="41x32,82x64")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cold", type=int, default=3, help="fresh server processes per cold figure")
    args = p.parse_args()
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    templates = _summaries(64)
    results: dict[tuple[int, ...], dict[str, Figure]] = {}
    starts: dict[tuple[int, ...], dict[str, tuple[float, float]]] = {}
    print(f"load average {os.getloadavg()[0]:.1f} at the start", file=sys.stderr)
    empty = _empty_start()
    for models, sites in sizes:
        print(f"seeding and measuring {models} x {sites} ...", file=sys.stderr)
        results[(models, sites)], starts[(models, sites)] = _bench(
            models, sites, args.repeat, args.cold, templates)
    first = sizes[0]
    print(f"{'case':<40}" + "".join(f"{f'{m}x{s} ms':>12}{'CPU ms':>8}{'KB':>8}"
                                    for m, s in sizes)
          + "".join(f"{f'x{m * s / (first[0] * first[1]):.0f}: ratio':>12}"
                    for m, s in sizes[1:]) + f"  {'issue 42 (CPU)':<20}{'target':<20}")
    for case in results[first]:
        row = f"{case:<40}"
        for size in sizes:
            ms, cpu, size_bytes = results[size][case]
            row += f"{ms:>12.1f}{cpu:>8.1f}{size_bytes / 1024:>8.1f}"
        for size in sizes[1:]:
            row += f"{results[size][case][1] / results[first][case][1]:>12.2f}"
        print(row + f"  {ISSUE_42.get(case, ''):<20}{TARGETS.get(case, ''):<20}")
    print(f"\n{'start to first answer (sealbench-server serve)':<48}{'CPU s':>8}{'wall s':>8}"
          f"  {'issue 42':<10}{'target':<10}")
    rows = [("start + first answer, empty", empty)] + [
        (f"{case} ({m}x{s})", figure) for (m, s), found in starts.items()
        for case, figure in found.items()]
    for case, (cpu_s, wall_s) in rows:
        anchor = case.split(" (")[0]
        print(f"{case:<48}{cpu_s:>8.2f}{wall_s:>8.1f}  {ISSUE_42.get(anchor, ''):<10}"
              f"{TARGETS.get(anchor, '') if '41x32' in case or 'empty' in case else '':<10}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end (other work on the machine "
          "included); CPU figures are the server's own")


if __name__ == "__main__":
    main()
