"""What confidentiality costs: the same N full-size BraTS cases evaluated (a) in the clear and
(b) by the enclave on the mock TEE, measured in one run on one machine. A script, not a test::

    .venv/bin/python tests/perf/enclave_bench.py [--cases 3] [--model reference|tiny|FILE]
                                                  [--shape 240,240,155] [--keep]

(a) plain: a child process reads the prepared case files from disk, decodes, segments with
    ``OnnxSegmenter`` and scores each case in turn (no crypto, no storage, no prefetch).
(b) confidential: ``MockProcessLauncher`` runs ``python -m sealbench.enclave`` against an
    in-process mock cloud (STS, KMS, storage emulator), the dataset and model sealed in the
    owners' buckets and released by the real policy path; the result is uploaded to the
    hospital's bucket.

Both arms are child processes timed from start to exit (imports included) with their peak
resident memory from ``wait4``; ONNX Runtime uses its default thread count in both. Printed: wall
times and their ratio (target <= 1.05), the enclave's own per-step seconds (attest, unwrap,
download, decrypt, load, infer, score, seal, upload; download and decrypt of case i+1 overlap
the inference of case i on the prefetch thread, so steps can sum to more than the wall time),
and both peaks. Setup (generation, preparation, sealing, policies) is not timed.

Everything goes into one temporary folder (raw and prepared cases, sealed copies, the mock's
storage: 137 MiB for 2 full-size cases), removed at the end whether the run succeeds or not;
``--keep`` keeps it and prints where it is, to look into a run.
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

CHILD_PLAIN = r"""
import sys, time
from pathlib import Path
from sealbench.benchmarks.brats import (BRATS_2023_GLI, BRATS_2023_GLI_METRICS, OnnxSegmenter,
    load_case_from_bytes, score_or_fail)
prepared, model, shape = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
contract = BRATS_2023_GLI.with_shape(tuple(int(x) for x in shape.split(",")))
segmenter = OnnxSegmenter(model.read_bytes(), contract)  # the enclave's default threads
for folder in sorted((prepared / "data" / "cases").iterdir()):
    files = {f"cases/{folder.name}/{p.name}": p.read_bytes() for p in folder.iterdir()}
    case = load_case_from_bytes(files, contract)
    score_or_fail(case.case_id, segmenter.segment(case), case.seg, BRATS_2023_GLI_METRICS,
                  contract.spacing_mm)
"""


def _child(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed with {process.returncode}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024


def _model(choice: str) -> bytes:
    if choice == "reference":
        from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes

        return load_model_bytes(load_definition().reference_model)
    if choice == "tiny":
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        weight = np.random.default_rng(0).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
        dims = ["N", 4, "D", "H", "W"]
        graph = helper.make_graph(
            [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
            "tiny",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, dims)],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, dims)],
            [numpy_helper.from_array(weight, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return bytes(model.SerializeToString())
    return Path(choice).read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(prog="tests/perf/enclave_bench.py")
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--model", default="reference")
    parser.add_argument("--shape", default="240,240,155")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary folder (for debugging)"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="enclave-bench-"))
    try:
        return _bench(args, root)
    finally:
        if args.keep:
            print(f"kept {root} (--keep); remove it with: rm -rf {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _bench(args: argparse.Namespace, root: Path) -> int:
    from google.oauth2.credentials import Credentials as OwnerCredentials

    from sealbench.benchmarks.brats import BRATS_2023_GLI
    from sealbench.benchmarks.brats.prepare import prepare_dataset
    from sealbench.benchmarks.brats.synthetic import write_dataset
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

    shape = tuple(int(x) for x in args.shape.split(","))
    contract = BRATS_2023_GLI.with_shape(shape)  # type: ignore[arg-type]
    print(f"setup in {root}: {args.cases} cases of {shape}, model {args.model}", flush=True)
    list(write_dataset(root / "raw", range(500, 500 + args.cases), shape, contract))  # type: ignore[arg-type]
    prepared = root / "prepared"
    prepare_dataset(root / "raw", prepared, contract)
    model_path = root / "model.onnx"
    model_path.write_bytes(_model(args.model))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    plain_s, plain_rss = _child(
        [
            sys.executable,
            "-c",
            CHILD_PLAIN,
            str(prepared),
            str(model_path),
            args.shape,
        ],
        env,
    )
    print(f"(a) plain: {plain_s:.1f} s, peak {plain_rss / 2**20:.0f} MiB", flush=True)

    with MockCloud(root / "state") as cloud:
        ep = cloud.endpoints
        owners = {}
        for name, number in (("hospital", "200000000002"), ("modelco", "300000000003")):
            owner = provision_owner(
                ep,
                email=f"{name}@example.org",
                project_id=name,
                project_number=number,
                bucket=f"{name}-bucket",
            )
            creds = OwnerCredentials(owner.access_token)
            store = GcsBlobStore(make_storage_client(name, creds, ep.storage), owner.bucket)
            wrapper = KmsKeyWrapper(owner.key_name, make_kms_client(creds, ep.kms))
            owners[name] = (
                owner,
                creds,
                store,
                wrapper,
                PoolProvider(number, f"{name}-pool", "attestation"),
            )
        h, hcreds, hstore, hwrap, hpool = owners["hospital"]
        m, mcreds, mstore, mwrap, mpool = owners["modelco"]
        data = seal_dataset(
            prepared, asset_id="ds-bench", key_wrapper=hwrap, store=hstore, prefix="ds/"
        )
        model = seal_model(
            model_path, asset_id="model-bench", key_wrapper=mwrap, store=mstore, prefix="m/"
        )
        recipient = generate_recipient_key()
        image = enclave_image_digest()
        workload = WorkloadIdentity(
            image, data.digest, model.digest, public_key_digest(recipient.public_key()), "1",
            "brats-2023-gli/1",
        )
        for owner, creds, pool, include in ((h, hcreds, hpool, True), (m, mcreds, mpool, False)):
            PolicyWriter.from_credentials(
                creds, iam_url=ep.iam, kms_url=ep.kms, storage_url=ep.storage
            ).sync(
                AssetPolicy(
                    provider=pool,
                    key_name=owner.key_name,
                    bucket=owner.bucket,
                    workloads=frozenset({workload}),
                    include_data=include,
                    issuer_uri=ep.issuer + "/",
                    endpoints=ep.service_endpoints(),
                )
            )
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(hcreds)  # type: ignore[no-untyped-call]
        url = f"{ep.storage}/storage/v1/b/{h.bucket}/iam"
        policy = session.get(url, timeout=30).json()
        member = principal_set(hpool.project_number, hpool.pool_id, workload.uid())
        policy["bindings"] = [
            *policy.get("bindings", []),
            {"role": "roles/storage.objectCreator", "members": [member]},
        ]
        session.put(url, json=policy, timeout=30).raise_for_status()
        spec = RunSpec(
            run_id="bench-1",
            benchmark_id="1",
            metrics_version="brats-2023-gli/1",
            dataset=AssetLocation(
                asset_id="ds-bench",
                uri=f"gs://{h.bucket}/ds",
                kms_key=h.key_name,
                pool_provider=hpool.name,
            ),
            model=AssetLocation(
                asset_id="model-bench",
                uri=f"gs://{m.bucket}/m",
                kms_key=m.key_name,
                pool_provider=mpool.name,
            ),
            result_uri=f"gs://{h.bucket}/results/bench-1",
            recipient_public_key=base64.b64encode(
                public_key_to_raw(recipient.public_key())
            ).decode(),
            data_digest=data.digest,
            model_digest=model.digest,
            recipient_digest=public_key_digest(recipient.public_key()),
            sts_url=ep.sts_token_url,
            kms_endpoint=ep.kms,
            storage_endpoint=ep.storage,
        )
        launcher = MockProcessLauncher(
            cloud.launcher(), image_digest=image, workdir_root=root / "runs"
        )
        lines: list[str] = []
        result = launcher.launch(spec, on_output=lines.append, timeout=3600)
    timings = {}
    from sealbench.client.runs.single import step_timings

    for line in lines:
        timings = step_timings(line) or timings  # the enclave's "done" event
    tee_s, tee_rss = result.wall_seconds, result.peak_rss_bytes or 0
    print(f"(b) confidential on the mock TEE: {tee_s:.1f} s, peak {tee_rss / 2**20:.0f} MiB")
    print(f"ratio (b)/(a) wall time: {tee_s / plain_s:.3f}  (target <= 1.05)")
    print("enclave steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
    print(
        json.dumps(
            {
                "cases": args.cases,
                "shape": shape,
                "model": args.model,
                "plain_s": round(plain_s, 2),
                "tee_s": round(tee_s, 2),
                "ratio": round(tee_s / plain_s, 3),
                "plain_peak_mib": plain_rss >> 20,
                "tee_peak_mib": tee_rss >> 20,
                "steps_s": timings,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
