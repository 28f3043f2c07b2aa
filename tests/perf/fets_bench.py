"""A simulated FeTS-scale benchmark through the real runner: 41 models x 32 sites (1,312 runs).
A script, not a test (pytest collects nothing here)::

    .venv/bin/python tests/perf/fets_bench.py [--models 41] [--sites 32] [--parallel 8]
        [--sites-at-once 4] [--run-seconds 0.05]

It starts a real registry (``sealbench-server serve``, SQLite, in its own process) that trusts
a local attestation issuer (this script signs Confidential Space-shaped result tokens with its
own RSA key and serves the key set on 127.0.0.1), registers 32 hospitals with one dataset each
and 41 models, has the authority approve every association, then lets each site do what
``sealbench run --all-approved --parallel 8`` does: plan its 41 pairs, launch them through
:class:`sealbench.client.runs.batch.Runner` on a FAST FAKE backend (a launcher whose workloads end
after ``--run-seconds``: this measures orchestration and the registry, not an enclave), report
every state to the registry, then submit each run's result (verified by the registry against
the token) and link it to its run (:func:`sealbench.client.runs.submit.submit_run_result`).
``--sites-at-once`` sites work concurrently, as independent hospitals would.

It prints the total wall time, the registry requests per run (by kind), the registry's latency
(p50, p99, max: measured by the clients' HTTP transport, so it includes their own queueing on
this machine's shared cores), the registry process's CPU time per run and per request (from
/proc: what other load on the machine distorts least), and checks that the authority's progress
matrix shows every pair done.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from sealbench.benchmarks.brats.definition import load_definition
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.local import create_accounts, registry_process
from sealbench.client.runs.batch import Runner, plan_runs
from sealbench.client.runs.launchers import LaunchResult, OutputFn
from sealbench.client.runs.records import RunStore
from sealbench.client.runs.submit import result_submission, submit_run_result
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.contract.workload import ENV_DATA_DIGEST, ENV_MODEL_DIGEST, ENV_RECIPIENT_DIGEST
from sealbench.crypto.attestation import RESULT_AUDIENCE, Jwks, result_nonce
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate

IMAGE = sha256_digest(b"fets simulated evaluation image")
METRICS = "brats-2023-gli/1"


def _summary(run_id: str, benchmark_id: int) -> dict[str, Any]:
    """A run's ``summary.json`` as the enclave writes it; the aggregates are those of one case
    (the registry validates them with the benchmark's plug-in)."""
    from sealbench.benchmarks.brats.plugin import PLUGIN

    aggregates = PLUGIN.summarise([PLUGIN.failure("BraTS-GLI-00000-000", "fake run")],
        InsecureFixedNoise())
    return {"format": "sealbench/result-summary", "version": 1, "run_id": run_id,
            "benchmark_id": str(benchmark_id), "metrics_version": METRICS,
            "aggregates": json.loads(json.dumps(aggregates.to_json()))}
KID = "fets-bench-1"


# -- the attestation issuer this script plays --------------------------------------------------


class Issuer:
    """Signs RS256 result tokens and serves its key set at ``{url}/jwks``."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwks = Jwks.from_keys({KID: self.key.public_key()}).to_json()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(jwks)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def trusted_issuer(self) -> dict[str, Any]:
        return {"issuer": self.url, "jwks_url": f"{self.url}/jwks"}

    def token(self, *, benchmark_id: int, data_digest: str, model_digest: str, sealed: str,
              run_id: str, summary: dict[str, Any]) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url, "aud": RESULT_AUDIENCE,
            "sub": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/i",
            "iat": now, "nbf": now, "exp": now + 3600,
            "eat_nonce": result_nonce(summary, Sha256Digest(sealed)),
            "secboot": True, "hwmodel": "GCP_AMD_SEV", "swname": "CONFIDENTIAL_SPACE",
            "swversion": ["250301"], "dbgstat": "disabled-since-boot",
            "google_service_accounts": [],
            "submods": {
                "container": {
                    "image_reference": f"registry.test/fets/eval@{IMAGE}",
                    "image_digest": IMAGE, "restart_policy": "Never", "args": [], "env": {},
                    "env_override": {
                        "SEALBENCH_BENCHMARK_ID": str(benchmark_id),
                        "SEALBENCH_METRICS_VERSION": METRICS,
                        ENV_DATA_DIGEST: data_digest, ENV_MODEL_DIGEST: model_digest,
                        ENV_RECIPIENT_DIGEST: "sha256:" + "9" * 64, "SEALBENCH_RUN_ID": run_id,
                    },
                },
                "confidential_space": {"support_attributes": ["LATEST", "STABLE", "USABLE"]},
            },
        }

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        header = {"alg": "RS256", "typ": "JWT", "kid": KID}
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64(signature)}"


# -- the fast fake backend ---------------------------------------------------------------------


class FakeWorkload:
    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._killed = threading.Event()

    @property
    def pid(self) -> int | None:
        return None

    def kill(self) -> None:
        self._killed.set()

    def wait(self, timeout: float | None = None) -> LaunchResult:
        self._killed.wait(self._seconds)
        return LaunchResult(IMAGE, self._seconds, None)


class FakeLauncher:
    """FAKE: a launcher whose workloads do nothing for ``seconds`` and succeed."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    @property
    def image_digest(self) -> str:
        return IMAGE

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> FakeWorkload:
        return FakeWorkload(self._seconds)

    def launch(self, spec: RunSpec, *, on_output: OutputFn | None = None,
               timeout: float | None = None) -> LaunchResult:
        return self.start(spec).wait(timeout)


# -- measuring the registry's answers ----------------------------------------------------------


class TimingTransport(httpx.BaseTransport):
    """Records (method, path kind, seconds) of every request it sends."""

    def __init__(self, samples: list[tuple[str, float]], lock: threading.Lock) -> None:
        self._inner = httpx.HTTPTransport()
        self._samples = samples
        self._lock = lock

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        response = self._inner.handle_request(request)
        response.read()
        elapsed = time.perf_counter() - started
        parts = request.url.path.split("/")
        kind = f"{request.method} /{parts[3] if len(parts) > 3 else ''}"
        with self._lock:
            self._samples.append((kind, elapsed))
        return response

    def close(self) -> None:
        self._inner.close()


def _server_cpu_seconds(port: str) -> float:
    """User + system CPU seconds of the registry process serving ``port`` (from /proc): the
    figure the other load on a shared machine distorts least."""
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            if b"sealbench.server.cli" not in argv or port.encode() not in argv:
                continue
            stat = (cmdline.parent / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / ticks
    raise RuntimeError(f"no registry process serving port {port}")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the scenario ------------------------------------------------------------------------------


def _setup(url: str, tokens: dict[str, str], models: int, sites: int) -> dict[str, Any]:
    def client(name: str) -> RegistryClient:
        return RegistryClient.connect(url, tokens[name])

    authority = client("authority")
    b = authority.create_benchmark(BenchmarkCreate(
        name="fets-sim", version="1",
        data_contract=load_definition().contract.model_dump(mode="json"),
        metrics_spec={"metrics_id": "x"}, metrics_version=METRICS,
        image_reference=f"registry.test/fets/eval@{IMAGE}", image_digest=IMAGE,
    )).id
    client("admin").approve_benchmark(b)
    datasets: dict[str, tuple[int, str]] = {}
    for s in range(sites):
        site = client(f"site{s}")
        digest = sha256_digest(b"site %d" % s)
        d = site.register_dataset(DatasetCreate(name=f"site{s}", digest=digest,
                                                case_count=100)).id
        site.request_association("dataset", b, d)
        authority.decide_association("dataset", b, d, approve=True)
        datasets[f"site{s}"] = (d, digest)
    vendor = client("vendor")
    model_digests: dict[int, str] = {}
    for m in range(models):
        digest = sha256_digest(b"model %d" % m)
        mid = vendor.register_model(ModelCreate(name=f"m{m}", version="1", digest=digest)).id
        vendor.request_association("model", b, mid)
        authority.decide_association("model", b, mid, approve=True)
        model_digests[mid] = digest
    return {"benchmark": b, "datasets": datasets, "models": model_digests}


def _site(name: str, url: str, token: str, world: dict[str, Any], issuer: Issuer,
          args: argparse.Namespace, work: Path, samples: list[tuple[str, float]],
          lock: threading.Lock) -> int:
    """One hospital: plan, run with --parallel, submit each result; returns its run count."""
    b = world["benchmark"]
    dataset_id, data_digest = world["datasets"][name]
    client = RegistryClient.connect(url, token, transport=TimingTransport(samples, lock))
    store = RunStore(work / name / "runs")
    pairs = [(dataset_id, m) for m in sorted(world["models"])]
    plan = plan_runs(store, benchmark_id=b, pairs=pairs, image_digest=IMAGE,
                     metrics_version=METRICS)

    def make_spec(d: int, m: int, run_id: str) -> RunSpec:  # only what the fake reads
        return RunSpec.model_construct(run_id=run_id, result_uri=f"file:///fake/{run_id}",
                                       dataset=AssetLocation.model_construct(asset_id=str(d)),
                                       model=AssetLocation.model_construct(asset_id=str(m)))

    runner = Runner(FakeLauncher(args.run_seconds), store, make_spec, client=client,
                    tee="fake", parallel=args.parallel)
    outcome = runner.run(plan)
    assert len(outcome.succeeded) == len(pairs), [r.status for r in outcome.records]
    for serial, record in enumerate(outcome.succeeded):
        sealed = sha256_digest(f"{name}/{record.run_id}/{serial}".encode())
        summary = _summary(record.run_id, b)
        token = issuer.token(benchmark_id=b, data_digest=data_digest,
                             model_digest=world["models"][record.model_id], sealed=sealed,
                             run_id=record.run_id, summary=summary)
        opened = SimpleNamespace(summary_json=summary, sealed_result_sha256=sealed, token=token)
        body = result_submission(record, opened)  # type: ignore[arg-type]
        submit_run_result(client, record, body, store)
    client.close()
    return len(outcome.records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=41)
    parser.add_argument("--sites", type=int, default=32)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--sites-at-once", type=int, default=4)
    parser.add_argument("--run-seconds", type=float, default=0.05)
    args = parser.parse_args()

    issuer = Issuer()
    accounts = {"admin": ("admin@fets.test", True), "authority": ("authority@fets.test", False),
                "vendor": ("vendor@fets.test", False)}
    accounts.update({f"site{s}": (f"it@site{s}.fets.test", False) for s in range(args.sites)})
    with tempfile.TemporaryDirectory(prefix="fets-bench-") as tmp:
        work = Path(tmp)
        tokens = create_accounts(work / "registry", accounts)
        with registry_process(work / "registry", issuer, work / "server.log") as url:
            t0 = time.perf_counter()
            world = _setup(url, tokens, args.models, args.sites)
            setup_s = time.perf_counter() - t0
            samples: list[tuple[str, float]] = []
            lock = threading.Lock()
            port = url.rsplit(":", 1)[1]
            cpu_before = _server_cpu_seconds(port)
            started = time.perf_counter()
            with ThreadPoolExecutor(args.sites_at_once) as pool:
                counts = list(pool.map(
                    lambda s: _site(f"site{s}", url, tokens[f"site{s}"], world, issuer, args,
                                    work, samples, lock),
                    range(args.sites),
                ))
            wall = time.perf_counter() - started
            server_cpu = _server_cpu_seconds(port) - cpu_before
            board = RegistryClient.connect(url, tokens["authority"]).benchmark_progress(
                world["benchmark"])
    runs = sum(counts)
    latencies = [s for _, s in samples]
    kinds = Counter(k for k, _ in samples)
    print(f"FeTS-scale simulation: {args.models} models x {args.sites} sites = {runs} runs, "
          f"--parallel {args.parallel} per site, {args.sites_at_once} sites at once, fake "
          f"workloads of {args.run_seconds} s")
    print(f"  setup (registrations, {args.models + args.sites} associations): {setup_s:.1f} s")
    print(f"  runs planned, launched, reported and submitted: {wall:.1f} s wall "
          f"({runs / wall:.1f} runs/s)")
    print(f"  registry requests per run: {len(samples) / runs:.2f} "
          + "(" + ", ".join(f"{k} {n / runs:.2f}" for k, n in sorted(kinds.items())) + ")")
    print(f"  registry latency under that load: p50 {statistics.median(latencies) * 1e3:.1f} ms,"
          f" p99 {_percentile(latencies, 0.99) * 1e3:.1f} ms, max {max(latencies) * 1e3:.1f} ms"
          f" over {len(latencies)} requests")
    print(f"  registry CPU: {server_cpu:.1f} s in all, {server_cpu / runs * 1e3:.1f} ms per run, "
          f"{server_cpu / len(samples) * 1e3:.1f} ms per request")
    for kind in sorted(kinds):
        values = [s for k, s in samples if k == kind]
        print(f"    {kind:<12} p50 {statistics.median(values) * 1e3:6.1f} ms   "
              f"p99 {_percentile(values, 0.99) * 1e3:6.1f} ms")
    print(f"  authority's progress matrix: {dict(board.counts)}")
    if board.counts != {"done": runs}:
        sys.exit("not every pair is done")


if __name__ == "__main__":
    main()
