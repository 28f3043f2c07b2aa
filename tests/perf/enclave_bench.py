"""What confidentiality costs and what the enclave's memory is: the same N full-size BraTS cases
evaluated in the clear and by the enclave on the mock TEE, each in the old configuration and in
the new one, measured in one run on one machine. A script, not a test::

    .venv/bin/python tests/perf/enclave_bench.py [--cases 4] [--model reference|tiny|FILE]
        [--shape 240,240,155] [--baseline REV] [--keep]

plain old / plain new: a child process reads the prepared case files from disk, decodes,
    segments with ``OnnxSegmenter`` and scores each case in turn (no crypto, no storage, no
    prefetch); old is ``cpu_arena=True`` (ONNX Runtime's CPU memory arena, the configuration
    before issue 42), new is the segmenter's default with the enclave's heap setting
    (:mod:`sealbench.enclave.heap`). Each prints the sha256 of its label maps.
enclave old / enclave new: ``MockProcessLauncher`` runs ``python -m sealbench.enclave`` against
    an in-process mock cloud (STS, KMS, storage emulator), the dataset and model sealed in the
    owners' buckets and released by the real policy path; the result is uploaded to the
    hospital's bucket and opened here with the recipient key. The old arm runs the enclave and
    benchmark code of git revision ``--baseline`` (default: the commit before the arena was
    turned off), put in front of this checkout's on ``PYTHONPATH``; the new arm this checkout's.

Every arm is a child process timed from start to exit (imports included) with its peak resident
memory (``VmHWM``, :class:`PeakWatch`) and its CPU seconds (user + system) from ``wait4``; ONNX
Runtime uses its default thread count everywhere. Printed: per arm wall, CPU and peak; new/old
ratios of peak and CPU; whether the labels (plain) and the per-case results (enclave) of old and
new are identical; the confidential/plain wall ratio (target <= 1.05); and the enclave's own
per-step seconds (attest, unwrap, download, decrypt, load, infer, score, seal, upload; download
and decrypt of case i+1 overlap the inference of case i on the prefetch thread, so steps can sum
to more than the wall time). Targets (issue 42): the new enclave's peak <= 1 GiB for 4 full-size
cases, with the same labels as the old. Exit 1 when old and new disagree.
Setup (generation, preparation, sealing, policies) is not timed.

Everything goes into one temporary folder (raw and prepared cases, sealed copies, the mock's
storage, the baseline's sources: about 300 MiB for 4 full-size cases), removed at the end
whether the run succeeds or not; ``--keep`` keeps it and prints where it is, to look into a run.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: The commit before the BraTS segmenter turned ONNX Runtime's CPU arena off (issue 42).
BASELINE = "66a3a26"
#: The packages the old enclave arm takes from the baseline revision.
BASELINE_PACKAGES = ("benchmarks", "enclave")

CHILD_PLAIN = r"""
import hashlib, sys, time
from pathlib import Path
from sealbench.benchmarks.brats import (BRATS_2023_GLI, BRATS_2023_GLI_METRICS, OnnxSegmenter,
    load_case_from_bytes, score_or_fail)
prepared, model, shape, arena = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
contract = BRATS_2023_GLI.with_shape(tuple(int(x) for x in shape.split(",")))
options = {"cpu_arena": True} if arena == "arena" else {}
if arena != "arena":  # the enclave's process setting (sealbench.enclave.heap)
    from sealbench.enclave.heap import return_freed_buffers
    return_freed_buffers()
segmenter = OnnxSegmenter(model.read_bytes(), contract, **options)  # the enclave's threads
labels = hashlib.sha256()
for folder in sorted((prepared / "data" / "cases").iterdir()):
    files = {f"cases/{folder.name}/{p.name}": p.read_bytes() for p in folder.iterdir()}
    case = load_case_from_bytes(files, contract)
    del files
    # the new arm consumes the case's volumes once normalised, as the plug-in's runner does
    prediction = segmenter.segment(case, consume=arena != "arena")
    labels.update(prediction.tobytes())
    score_or_fail(case.case_id, prediction, case.seg, BRATS_2023_GLI_METRICS,
                  contract.spacing_mm)
    del case, prediction
print(f"labels sha256:{labels.hexdigest()}", flush=True)
"""


@dataclass(frozen=True)
class Arm:
    """One measured child: wall seconds, CPU seconds (user + system), peak RSS bytes, and what
    must be equal between old and new (the labels' digest, or the per-case results)."""

    name: str
    wall_s: float
    cpu_s: float
    peak: int
    outcome: str

    def line(self) -> str:
        return (f"{self.name:12s} wall {self.wall_s:6.1f} s  CPU {self.cpu_s:6.1f} s  "
                f"peak {self.peak / 2**20:6.0f} MiB")


class PeakWatch:
    """The peak RSS of process ``pid``: its ``VmHWM``, read every 20 ms until it exits.
    (``wait4``'s ``ru_maxrss`` would not do: a child inherits its parent's peak at exec, and
    this parent holds the mock cloud; VmHWM starts afresh at exec and never decreases, so the
    last read is the peak unless the peak came in the last 20 ms, when the run is writing its
    result.)"""

    def __init__(self, pid: int) -> None:
        self._status = Path(f"/proc/{pid}/status")
        self.peak = 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            try:
                text = self._status.read_text()
            except OSError:
                return
            for line in text.splitlines():
                if line.startswith("VmHWM:"):
                    self.peak = max(self.peak, int(line.split()[1]) * 1024)
                    break
            else:
                return  # a zombie has no memory lines
            time.sleep(0.02)

    def done(self) -> int:
        self._thread.join(timeout=5)
        return self.peak


def _child(name: str, argv: list[str], env: dict[str, str]) -> Arm:
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    watch = PeakWatch(process.pid)
    out = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed with {process.returncode}")
    digest = next((line for line in out.splitlines() if line.startswith("labels ")), "")
    return Arm(name, time.perf_counter() - start, usage.ru_utime + usage.ru_stime,
               watch.done(), digest)


def _baseline_python(revision: str, root: Path) -> Path:
    """A Python executable (a wrapper script) that imports the packages of
    :data:`BASELINE_PACKAGES` from git ``revision`` of this checkout and the rest from this
    checkout: ``sealbench`` is a namespace package, so the overlay's portions come first."""
    checkout = Path(__file__).resolve().parents[2]
    overlay = root / f"baseline-{revision}"
    archive = subprocess.run(
        ["git", "-C", str(checkout), "archive", "--format=tar", revision, *BASELINE_PACKAGES],
        check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(overlay / "src", filter="data")
    (overlay / "sealbench").mkdir()
    for package in BASELINE_PACKAGES:
        (overlay / "sealbench" / package).symlink_to(overlay / "src" / package)
    return _python_on(overlay, os.pathsep.join(filter(None, (str(overlay), _inherited()))))


def _inherited() -> str:
    """This process's ``PYTHONPATH``: both enclave arms import what this process imports."""
    return os.environ.get("PYTHONPATH", "")


def _python_on(folder: Path, path: str) -> Path:
    """A wrapper script in ``folder`` running this Python with ``PYTHONPATH`` ``path`` (the mock
    launcher gives its child no environment of this process's)."""
    if not path:
        return Path(sys.executable)
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{path}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


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
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--model", default="reference")
    parser.add_argument("--shape", default="240,240,155")
    parser.add_argument(
        "--baseline", default=BASELINE,
        help=f"git revision of the old configuration's enclave and benchmark code "
        f"(default {BASELINE})")
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
    from sealbench.client.runs.outcome import step_timings
    from sealbench.client.runs.result_open import download_result, open_result
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
    # the full grid's pin, or the one of another grid (a small grid runs in seconds)
    grid = "" if shape == (240, 240, 155) else "-" + "x".join(map(str, shape))
    pin = f"brats-2023-gli/1{grid}"
    print(f"setup in {root}: {args.cases} cases of {shape}, model {args.model}", flush=True)
    list(write_dataset(root / "raw", range(500, 500 + args.cases), shape, contract))  # type: ignore[arg-type]
    prepared = root / "prepared"
    prepare_dataset(root / "raw", prepared, contract)
    model_path = root / "model.onnx"
    model_path.write_bytes(_model(args.model))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    old_python = _baseline_python(args.baseline, root)

    arms: dict[str, Arm] = {}
    for name, arena in (("plain old", "arena"), ("plain new", "default")):
        arms[name] = _child(
            name,
            [sys.executable, "-c", CHILD_PLAIN, str(prepared), str(model_path), args.shape, arena],
            env,
        )
        print(arms[name].line(), flush=True)

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
            pin,
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
            metrics_version=pin,
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
        timings: dict[str, dict[str, float]] = {}
        new_python = _python_on(root / "current", _inherited())
        for name, python in (("enclave old", old_python), ("enclave new", new_python)):
            run_id = "bench-old" if name.endswith("old") else "bench-new"
            arm_spec = spec.model_copy(
                update={"run_id": run_id, "result_uri": f"gs://{h.bucket}/results/{run_id}"})
            launcher = MockProcessLauncher(
                cloud.launcher(), image_digest=image, workdir_root=root / "runs",
                python=str(python),
            )
            lines: list[str] = []
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            with launcher.start(arm_spec, on_output=lines.append) as workload:
                assert workload.pid is not None
                watch = PeakWatch(workload.pid)
                result = workload.wait(3600)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            steps: dict[str, float] = {}
            for line in lines:
                steps = step_timings(line) or steps  # the enclave's "done" event
            timings[name] = steps
            opened = open_result(download_result(hstore, f"results/{run_id}"), recipient)
            cases = json.dumps(opened.per_case.cases, sort_keys=True)
            arms[name] = Arm(
                name, result.wall_seconds,
                after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                watch.done(),
                "cases sha256:" + hashlib.sha256(cases.encode()).hexdigest())
            print(arms[name].line(), flush=True)
    return _report(args, shape, arms, timings)


def _report(args: argparse.Namespace, shape: tuple[int, ...], arms: dict[str, Arm],
            timings: dict[str, dict[str, float]]) -> int:
    print()
    for arm in arms.values():
        print(arm.line() + f"  {arm.outcome[:40]}")
    for kind in ("plain", "enclave"):
        old, new = arms[f"{kind} old"], arms[f"{kind} new"]
        same = "identical" if old.outcome == new.outcome and old.outcome else "DIFFERENT"
        print(f"{kind}: new/old peak {new.peak / old.peak:.3f}, CPU {new.cpu_s / old.cpu_s:.3f}; "
              f"{'labels' if kind == 'plain' else 'per-case results'} {same}")
    tee, plain = arms["enclave new"], arms["plain new"]
    print(f"enclave new peak {tee.peak / 2**30:.3f} GiB (target <= 1 GiB for 4 full-size cases)")
    print(f"ratio enclave/plain wall time (new): {tee.wall_s / plain.wall_s:.3f}  (target <= 1.05)")
    for name, steps in timings.items():
        print(f"{name} steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
    print(json.dumps({
        "cases": args.cases, "shape": shape, "model": args.model, "baseline": args.baseline,
        "arms": {a.name: {"wall_s": round(a.wall_s, 2), "cpu_s": round(a.cpu_s, 2),
                          "peak_mib": a.peak >> 20, "outcome": a.outcome} for a in arms.values()},
        "steps_s": timings,
    }))
    same = all(arms[f"{k} old"].outcome == arms[f"{k} new"].outcome for k in ("plain", "enclave"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
