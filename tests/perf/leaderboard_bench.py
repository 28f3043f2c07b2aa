"""The leaderboard at FeTS scale and twice it, measured over HTTP on SQLite. A script, not a
test (pytest collects nothing here)::

    .venv/bin/python tests/perf/leaderboard_bench.py [--sizes 41x32,82x64] [--repeat 5]

For each size (models x sites) it migrates a fresh SQLite registry, inserts the benchmark
(``brats-2023-gli/1``), datasets, models and one result per pair directly (summaries as the
enclave writes them: ``sealbench/result-summary`` around a BraTS summary, a release of Dice per
region with OpenDP noise; a 2.5 KB token), serves the app with uvicorn on a loopback port in a
thread, and times from the client side (httpx; client and server share one process, so the
figures include that contention):

- ``per-dataset API``: ``GET /api/v1/benchmarks/{id}/leaderboard`` (every summary, in full)
- ``pooled API cold``: the first ``GET .../leaderboard/pooled`` (parses every summary)
- ``pooled API``: the same again (summaries cached by result id and nonce), median of --repeat
- ``pooled page``: ``GET /ui/benchmarks/{id}/pooled`` signed in, median
- ``pooled CSV``: ``GET /ui/benchmarks/{id}/pooled.csv`` (every metric), median

It prints wall and CPU milliseconds and kilobytes side by side, the CPU ratio of each size to
the first one (linear growth in results is the ``x`` cells ratio), and the targets of issue 15
at 41 x 32: API under 100 ms and 300 KB, page under 300 ms.
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn

from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, CaseScores, RegionScores
from sealbench.benchmarks.brats.plugin import PLUGIN
from sealbench.benchmarks.release import OpenDPGaussian
from sealbench.crypto.digest import sha256_digest
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.models import Benchmark, Dataset, Model, Result
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings
from sealbench.server.web import mount_dashboard

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOKEN = "eyJhbGciOiJSUzI1NiJ9." + "x" * 2400 + ".sig"


def _summaries(k: int) -> list[dict[str, Any]]:
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
                for d in ds:
                    n += 1
                    s.add(Result(benchmark_id=bench.id, dataset_id=d.id, model_id=m.id,
                                 submitted_by_id=user.id, summary=templates[n % len(templates)],
                                 sealed_result_digest=sha256_digest(f"s{n}".encode()),
                                 attestation_token=TOKEN, token_issuer="https://mock.invalid",
                                 image_digest="sha256:" + "1" * 64, nonce=f"{n:064x}",
                                 created_at=NOW))
            s.commit()
            return bench.id, token
    finally:
        db.dispose()


def _timed(client: httpx.Client, path: str, **kw: Any) -> tuple[float, int, float]:
    """Wall ms, bytes, and CPU ms of this process (server and client threads together: the
    figure least distorted by other work on a shared machine)."""
    cpu = time.process_time()
    start = time.perf_counter()
    r = client.get(path, **kw)
    elapsed = time.perf_counter() - start
    r.raise_for_status()
    return elapsed * 1000, len(r.content), (time.process_time() - cpu) * 1000


def _median(client: httpx.Client, path: str, repeat: int, **kw: Any
            ) -> tuple[float, int, float]:
    runs = [_timed(client, path, **kw) for _ in range(repeat)]
    return (statistics.median(t for t, _, _ in runs), runs[0][1],
            statistics.median(c for _, _, c in runs))


def _bench(models: int, sites: int, repeat: int, templates: list[dict[str, Any]]
           ) -> dict[str, tuple[float, int, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = ServerSettings(data_dir=Path(tmp), trusted_issuers=())
        bid, token = _seed(settings.effective_database_url, models, sites, templates)
        app = create_app(settings)
        mount_dashboard(app, settings)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, timeout=120,
                              headers={"Authorization": f"Bearer {token}"}) as api, \
                    httpx.Client(base_url=base, timeout=120) as web:
                form = web.get("/ui/sign-in")
                csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
                assert csrf is not None
                web.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token,
                                              "next": "/ui/"})
                board = f"/api/v1/benchmarks/{bid}/leaderboard"
                out = {"pooled API cold": _timed(api, board + "/pooled")}
                out["pooled API"] = _median(api, board + "/pooled", repeat)
                out["pooled page"] = _median(web, f"/ui/benchmarks/{bid}/pooled", repeat)
                out["pooled CSV"] = _median(web, f"/ui/benchmarks/{bid}/pooled.csv", repeat)
                out["per-dataset API"] = _median(api, board, max(1, repeat // 2))
                return out
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="41x32,82x64")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    templates = _summaries(64)
    results = {}
    for models, sites in sizes:
        print(f"seeding and measuring {models} x {sites} ...", file=sys.stderr)
        results[(models, sites)] = _bench(models, sites, args.repeat, templates)
    first = sizes[0]
    print(f"{'case':<18}" + "".join(f"{f'{m}x{s} ms':>14}{'CPU ms':>10}{'KB':>10}"
                                    for m, s in sizes)
          + "".join(f"{f'x{m * s / (first[0] * first[1]):.0f}: CPU ratio':>18}"
                    for m, s in sizes[1:]))
    for case in results[first]:
        row = f"{case:<18}"
        for size in sizes:
            ms, size_bytes, cpu = results[size][case]
            row += f"{ms:>14.1f}{cpu:>10.1f}{size_bytes / 1024:>10.1f}"
        for size in sizes[1:]:
            row += f"{results[size][case][2] / results[first][case][2]:>18.2f}"
        print(row)
    print("targets at 41 x 32: pooled API < 100 ms and < 300 KB; pooled page < 300 ms; growth "
          "at most linear in cells")


if __name__ == "__main__":
    main()
