"""Peak memory of sealing a large model and of loading it in the enclave, the whole-buffer way
(before) against the streamed way (now), each measured in a fresh child process. A script, not a
test (pytest collects nothing here)::

    .venv/bin/python tests/perf/model_stream_bench.py [--size-mb 300] [--workdir DIR]

- sealing: a file of ``--size-mb`` random bytes (the sealer never parses ONNX).
  old = ``read_bytes`` + ``sha256_digest`` + ``seal_weights`` (whole ciphertext) + ``put_bytes``;
  new = :func:`sealbench.client.assets.store.seal_model` (hash in chunks, ``encrypt_stream`` to a
  temporary file, ``put_stream``).
- enclave: a real ONNX model of that size (one float32 initializer ``W`` and ``Y = Gather(W, I)``,
  so ONNX Runtime must keep ``W``), sealed once into a local bucket. Measured: the enclave's
  model step without the BraTS contract (the model does not meet it): old = ``get_bytes``
  + ``open_weights`` (``decrypt_bytes``) + ``onnxruntime.InferenceSession(bytes)``; new =
  ``open_read`` + the enclave's own size check (``sealbench.enclave.steps._sized``) +
  ``open_weights_stream`` (decrypt and hash segment by segment into one preallocated buffer) +
  the same ``InferenceSession``. ONNX Runtime's copy of the model is in both. The same two
  without ``InferenceSession`` (``fetch-*``) isolate download, decryption and hashing.
- base: a child that imports the same modules and does nothing, the process's floor.

Peak resident memory is ``VmHWM`` from ``/proc/self/status`` of each child. Ratios are old/new,
of the peak and of the peak above the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ASSET = "model-bench"
KEY = "projects/bench/locations/global/keyRings/r/cryptoKeys/model"


def _vmhwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child(mode: str, work: Path) -> None:
    import onnxruntime as ort

    from sealbench.crypto.digest import Sha256Digest, sha256_digest
    from sealbench.crypto.envelope import (
        DataKey,
        InsecureInMemoryKeyWrapper,
        asset_aad,
        wrap_key,
    )
    from sealbench.crypto.sealed_asset import (
        MAX_WEIGHTS_BYTES,
        open_weights,
        open_weights_stream,
        seal_weights,
    )
    from sealbench.enclave.steps import MAX_WEIGHTS_CIPHERTEXT, _sized
    from sealbench.platforms import LocalBlobStore

    t0 = time.perf_counter()
    if mode == "seal-old":
        store = LocalBlobStore(work / "seal-old")
        wrapper = InsecureInMemoryKeyWrapper(KEY)
        path = work / "random.bin"
        assert path.stat().st_size <= MAX_WEIGHTS_BYTES
        weights = path.read_bytes()
        digest = sha256_digest(weights)
        dek = DataKey.generate()
        store.put_bytes(
            "dek.wrapped", wrap_key(wrapper, dek, asset_aad("model", ASSET, digest)).to_bytes()
        )
        store.put_bytes("weights.sealed", seal_weights(dek, ASSET, weights))
    elif mode == "seal-new":
        from sealbench.client.assets.store import seal_model

        seal_model(
            work / "random.bin",
            asset_id=ASSET,
            key_wrapper=InsecureInMemoryKeyWrapper(KEY),
            store=LocalBlobStore(work / "seal-new"),
            prefix="",
        )
    elif mode in ("load-old", "load-new", "fetch-old", "fetch-new"):
        meta = json.loads((work / "model.json").read_text())
        dek = DataKey.from_bytes(bytes.fromhex(meta["dek"]))
        digest = Sha256Digest(meta["digest"])
        store = LocalBlobStore(work / "model-bucket")
        if mode.endswith("-old"):
            ciphertext = store.get_bytes("weights.sealed", MAX_WEIGHTS_CIPHERTEXT)
            weights = open_weights(dek, ASSET, ciphertext, digest)
            del ciphertext
        else:
            with store.open_read("weights.sealed") as src:
                src, size = _sized(src, "weights.sealed")
                weights = open_weights_stream(dek, ASSET, src, size, digest)
        if mode.startswith("load-"):
            session = ort.InferenceSession(weights, providers=["CPUExecutionProvider"])
            del weights
            assert session.get_outputs()[0].name == "Y"
    elif mode != "base":
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps({"mode": mode, "peak_mib": _vmhwm_mib(), "s": time.perf_counter() - t0}))


def _run_child(mode: str, work: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--workdir", str(work)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _make_inputs(work: Path, size: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from sealbench.crypto.digest import sha256_file
    from sealbench.crypto.envelope import DataKey
    from sealbench.crypto.sealed_asset import seal_weights_stream
    from sealbench.platforms import LocalBlobStore

    with (work / "random.bin").open("wb") as f:
        left = size
        while left:
            n = min(left, 16 << 20)
            f.write(os.urandom(n))
            left -= n
    rng = np.random.default_rng(0)
    w = rng.standard_normal(size // 4, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "I"], ["Y"], axis=0)],
        "big_initializer",
        [helper.make_tensor_value_info("I", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_path = work / "big.onnx"
    onnx.save_model(model, onnx_path)
    del model, graph, w
    digest = sha256_file(onnx_path)
    dek = DataKey.generate()
    LocalBlobStore(work / "model-bucket")
    with onnx_path.open("rb") as src, (work / "model-bucket" / "weights.sealed").open("wb") as out:
        seal_weights_stream(dek, ASSET, src, out, digest)
    # A throwaway key for a throwaway model: the children must open what the parent sealed.
    (work / "model.json").write_text(
        json.dumps({"dek": dek.secret_bytes().hex(), "digest": digest})
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.workdir)
        return
    with tempfile.TemporaryDirectory(prefix="model-stream-bench-", dir=args.workdir) as tmp:
        work = Path(tmp)
        size = args.size_mb * 1_000_000
        _make_inputs(work, size)
        onnx_mb = (work / "big.onnx").stat().st_size / 1e6
        results = {
            m: _run_child(m, work)
            for m in (
                "base",
                "seal-old",
                "seal-new",
                "fetch-old",
                "fetch-new",
                "load-old",
                "load-new",
            )
        }
    base = results["base"]["peak_mib"]
    print(f"model: {size / 1e6:.0f} MB random (sealing), {onnx_mb:.0f} MB ONNX (enclave load)")
    print(f"floor (imports only): {base:.0f} MiB peak RSS")
    print("| step | old peak | new peak | old/new | old/new above floor | old s | new s |")
    print("|---|---|---|---|---|---|---|")
    for step, old, new in (
        ("seal", "seal-old", "seal-new"),
        ("enclave: download + decrypt + hash", "fetch-old", "fetch-new"),
        ("enclave: the same + InferenceSession", "load-old", "load-new"),
    ):
        o, n = results[old], results[new]
        above = (o["peak_mib"] - base) / max(n["peak_mib"] - base, 1e-9)
        print(
            f"| {step} | {o['peak_mib']:.0f} MiB | {n['peak_mib']:.0f} MiB | "
            f"{o['peak_mib'] / n['peak_mib']:.2f}x | {above:.2f}x | {o['s']:.2f} | {n['s']:.2f} |"
        )


if __name__ == "__main__":
    main()
