"""The WDBC classification benchmark's whole confidential run over all 569 cases, against the
same evaluation in the clear, measured side by side in one run. A script, not a test::

    .venv/bin/python tests/perf/wdbc_bench.py [--model wdbc_logreg|wdbc_mlp] [--keep]

(a) plain: a child process reads the 569 prepared case files from disk, loads each through the
    plug-in's layout, predicts with its ONNX runner, scores, and summarises (the release, with
    OpenDP's noise as in the enclave; no crypto, no storage).
(b) confidential: ``MockProcessLauncher`` runs ``python -m sealbench.enclave`` against an
    in-process mock cloud (STS, KMS, storage emulator): token, key release by the real policy
    path, 569 sealed case objects downloaded, decrypted and verified, the model unsealed, every
    case predicted and scored, the summary built, the per-case results sealed, the result
    attested and uploaded.

Both arms are child processes timed from start to exit (imports included), with peak resident
memory from ``wait4``. Printed: both wall times, their ratio, the enclave time against the
target (under 10 s on two cores), and the enclave's own per-step seconds. Setup (preparation,
sealing, policies) is not timed. Everything lives in one temporary folder, removed at the end
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 10.0

CHILD_PLAIN = r"""
import sys
from pathlib import Path
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import OpenDPGaussian
prepared, model = Path(sys.argv[1]), Path(sys.argv[2]).read_bytes()
plugin = PluginRegistry().get("wdbc")
data = prepared / plugin.layout.data_dir
layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
runner = plugin.load_model(model)
paths = sorted(p.relative_to(data).as_posix() for p in (data / "cases").glob("*/*"))
results = []
for case_id, files in sorted(layout.group(paths).items()):
    case = layout.load({p: (data / p).read_bytes() for p in files})
    results.append(plugin.score(case, runner.predict(case)))
summary = plugin.summarise(results, OpenDPGaussian())
assert summary.n_cases == 569, summary.n_cases
"""


def _child(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:3]} failed with {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser(prog="tests/perf/wdbc_bench.py")
    parser.add_argument("--model", default="wdbc_logreg", choices=("wdbc_logreg", "wdbc_mlp"))
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wdbc-bench-"))
    try:
        return _bench(args, root)
    finally:
        if args.keep:
            print(f"kept {root} (--keep); remove it with: rm -rf {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _bench(args: argparse.Namespace, root: Path) -> int:
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2.credentials import Credentials as OwnerCredentials

    from sealbench.benchmarks.registry import PluginRegistry
    from sealbench.client.assets.store import seal_dataset, seal_model
    from sealbench.contract.spec import AssetLocation, RunSpec
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.crypto.sealing import (
        generate_recipient_key,
        public_key_digest,
        public_key_to_raw,
    )
    from sealbench.gcp.confidential_space import principal_set
    from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
    from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
    from sealbench.gcp.policy import AssetPolicy, PoolProvider
    from sealbench.gcp.policy_writer import PolicyWriter
    from sealbench.mocktee.image import enclave_image_digest
    from sealbench.mocktee.process_launcher import MockProcessLauncher
    from sealbench.mocktee.provision import provision_owner
    from sealbench.mocktee.server import MockCloud

    plugin = PluginRegistry().get("wdbc")
    version = str(plugin.ref)
    print(f"setup in {root}: all 569 WDBC cases, model {args.model}", flush=True)
    plugin.write_demo_dataset(root / "raw", 569, seed=100)
    prepared = root / "prepared"
    plugin.prepare(root / "raw", prepared)
    model_path = root / "model.onnx"
    model_path.write_bytes(plugin.model_bytes(args.model))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    plain_s, plain_rss = _child([sys.executable, "-c", CHILD_PLAIN, str(prepared),
                                 str(model_path)], env)
    print(f"(a) plain: {plain_s:.2f} s, peak {plain_rss / 2**20:.0f} MiB", flush=True)

    with MockCloud(root / "state") as cloud:
        ep = cloud.endpoints
        owners = {}
        for name, number in (("hospital", "200000000002"), ("modelco", "300000000003")):
            owner = provision_owner(ep, email=f"{name}@example.org", project_id=name,
                                    project_number=number, bucket=f"{name}-bucket")
            creds = OwnerCredentials(owner.access_token)
            store = GcsBlobStore(make_storage_client(name, creds, ep.storage), owner.bucket)
            wrapper = KmsKeyWrapper(owner.key_name, make_kms_client(creds, ep.kms))
            owners[name] = (owner, creds, store, wrapper,
                            PoolProvider(number, f"{name}-pool", "attestation"))
        h, hcreds, hstore, hwrap, hpool = owners["hospital"]
        m, mcreds, mstore, mwrap, mpool = owners["modelco"]
        start = time.perf_counter()
        data = seal_dataset(prepared, asset_id="ds-wdbc", key_wrapper=hwrap, store=hstore,
                            prefix="ds/")
        print(f"sealed 569 cases in {time.perf_counter() - start:.1f} s (not timed below)")
        model = seal_model(model_path, asset_id="model-wdbc", key_wrapper=mwrap, store=mstore,
                           prefix="m/")
        recipient = generate_recipient_key()
        image = enclave_image_digest()
        workload = WorkloadIdentity(image, data.digest, model.digest,
                                    public_key_digest(recipient.public_key()), "1", version)
        for owner, creds, pool, include in ((h, hcreds, hpool, True), (m, mcreds, mpool, False)):
            PolicyWriter.from_credentials(
                creds, iam_url=ep.iam, kms_url=ep.kms, storage_url=ep.storage
            ).sync(AssetPolicy(
                provider=pool, key_name=owner.key_name, bucket=owner.bucket,
                workloads=frozenset({workload}), include_data=include,
                issuer_uri=ep.issuer + "/",
                endpoints=ep.service_endpoints()))
        session = AuthorizedSession(hcreds)  # type: ignore[no-untyped-call]
        url = f"{ep.storage}/storage/v1/b/{h.bucket}/iam"
        policy = session.get(url, timeout=30).json()
        member = principal_set(hpool.project_number, hpool.pool_id, workload.uid())
        policy["bindings"] = [*policy.get("bindings", []),
                              {"role": "roles/storage.objectCreator", "members": [member]}]
        session.put(url, json=policy, timeout=30).raise_for_status()
        spec = RunSpec(
            run_id="wdbc-bench-1",
            benchmark_id="1",
            metrics_version=version,
            dataset=AssetLocation(asset_id="ds-wdbc", uri=f"gs://{h.bucket}/ds",
                                  kms_key=h.key_name, pool_provider=hpool.name),
            model=AssetLocation(asset_id="model-wdbc", uri=f"gs://{m.bucket}/m",
                                kms_key=m.key_name, pool_provider=mpool.name),
            result_uri=f"gs://{h.bucket}/results/wdbc-bench-1",
            recipient_public_key=base64.b64encode(
                public_key_to_raw(recipient.public_key())).decode(),
            data_digest=data.digest,
            model_digest=model.digest,
            recipient_digest=public_key_digest(recipient.public_key()),
            sts_url=ep.sts_token_url,
            kms_endpoint=ep.kms,
            storage_endpoint=ep.storage,
        )
        launcher = MockProcessLauncher(cloud.launcher(), image_digest=image,
                                       workdir_root=root / "runs")
        lines: list[str] = []
        result = launcher.launch(spec, on_output=lines.append, timeout=600)
        summary = json.loads(hstore.get_bytes("results/wdbc-bench-1/summary.json", 1 << 20))
    timings: dict[str, float] = {}
    from sealbench.client.runs.outcome import step_timings

    for line in lines:
        timings = step_timings(line) or timings  # the enclave's "done" event
    tee_s, tee_rss = result.wall_seconds, result.peak_rss_bytes or 0
    aggregates = plugin.parse_summary(summary.get("aggregates", summary))
    shown = {f.ref.metric: f for f in plugin.figures(aggregates)}
    auroc = shown["auroc"]
    reading = ("not informative at this privacy loss" if auroc.value is None
               else f"{auroc.value:.4f} [{auroc.low:.4f}, {auroc.high:.4f}]")
    print(f"(b) confidential on the mock TEE: {tee_s:.2f} s, peak {tee_rss / 2**20:.0f} MiB "
          f"({aggregates.n_cases} cases, released AUROC {reading})")
    print(f"ratio (b)/(a) wall time: {tee_s / plain_s:.2f}")
    verdict = "met" if tee_s < TARGET_S else "MISSED"
    print(f"enclave time {tee_s:.2f} s against the target < {TARGET_S:.0f} s on "
          f"{os.cpu_count()} cores: {verdict}")
    print("enclave steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
    print(json.dumps({"cases": 569, "model": args.model, "plain_s": round(plain_s, 2),
                      "tee_s": round(tee_s, 2), "ratio": round(tee_s / plain_s, 2),
                      "target_s": TARGET_S, "cores": os.cpu_count(),
                      "plain_peak_mib": plain_rss >> 20, "tee_peak_mib": tee_rss >> 20,
                      "steps_s": timings}))
    return 0 if tee_s < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
