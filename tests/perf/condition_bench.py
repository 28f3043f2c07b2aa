"""The size of one owner's key-release policy as approvals grow (issue 28). A script, not a
test::

    .venv/bin/python tests/perf/condition_bench.py

For a data owner's pool it prints, per (benchmarks, distinct images, models, GPU opt-in), the
attribute condition's length against Google's 4,096-character limit and the IAM members the
key's policy holds (count and bytes). The uid names the benchmark and the pin, so the condition
grows only with distinct images; members grow with approvals."""

from __future__ import annotations

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.policy import (
    MAX_CONDITION_CHARS,
    AssetPolicy,
    PoolProvider,
    attribute_condition,
    condition_context,
)
from sealbench.platforms.errors import CloudError

POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
KEY = "projects/h/locations/global/keyRings/r/cryptoKeys/k"
PIN = "brats-2023-gli/1-64x64x48-exact"  # a long pin


def _policy(benchmarks: int, images: int, models: int, gpu: bool) -> AssetPolicy:
    workloads = frozenset(
        WorkloadIdentity(sha256_digest(f"image {b % images}".encode()), sha256_digest(b"data"),
                         sha256_digest(f"model {m}".encode()), sha256_digest(b"recipient"),
                         str(b + 1), PIN)
        for b in range(benchmarks) for m in range(models))
    return AssetPolicy(
        POOL, KEY, None, workloads, True,
        experimental_gpu_images=frozenset(w.image_digest for w in workloads) if gpu else
        frozenset(),
        experimental_benchmark_ids=frozenset(w.benchmark_id for w in workloads) if gpu else
        frozenset())


def main() -> None:
    print(f"{'benchmarks':>10} {'images':>6} {'models':>6} {'gpu':>5} {'condition':>10} "
          f"{'of limit':>8} {'members':>8} {'member KB':>9}")
    for benchmarks in (1, 10, 30):
        for images in sorted({1, benchmarks}):
            for models in (1, 41):
                for gpu in (False, True):
                    policy = _policy(benchmarks, images, models, gpu)
                    try:
                        size = str(len(attribute_condition(condition_context(policy))))
                        share = f"{int(size) / MAX_CONDITION_CHARS:.0%}"
                    except CloudError:
                        size, share = "refused", "> 100%"
                    members = policy.members()
                    print(f"{benchmarks:>10} {images:>6} {models:>6} {gpu!s:>5} {size:>10} "
                          f"{share:>8} {len(members):>8} "
                          f"{sum(map(len, members)) / 1024:>9.1f}")


if __name__ == "__main__":
    main()
