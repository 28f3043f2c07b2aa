"""The evaluation image, old beside new: the size of its Python environment and the enclave's
start, measured in one run on one machine. A script, not a test::

    .venv/bin/python tests/perf/image_bench.py --old IMAGE --new IMAGE [--starts 7]

IMAGE is an image on the local Docker engine (an ID or a tag); build the old one from the
revision before issue 42 in a copy of the sources, e.g.::

    git archive 66a3a26 --prefix=old/ | tar -x -C /tmp
    .venv/bin/python -c "from pathlib import Path; from sealbench.client.images.build import \\
        build_image, connect_engine; print(build_image(connect_engine(), Path('/tmp/old'), \\
        repository='old-eval').reference)"

and the new one with ``sealbench image build`` (or the same call on this checkout).

Printed per image:

- **venv**: the apparent size of ``/opt/sealbench`` (bytes of its files, what a registry
  stores and Confidential Space pulls at every VM start, before compression) in MB (10^6 bytes),
  its ``.pyc`` files' share, and its ten largest packages; then the largest packages of
  either image side by side, old -> new. Target (issue 42): <= 350 MB.
- **start**: inside a container of the image, as Confidential Space runs it (read-only root, no
  network, its user), a probe starts ``python -m sealbench.enclave`` (the image's ENTRYPOINT)
  and reads its stdout until the first step's event (``"event":"step","index":0``: the enclave
  has imported what it runs and reads its run specification); it then kills it and reads its
  CPU seconds (user + system) from ``wait4``, and the wall seconds from start to that line.
  Two rounds, old then new in each, of ``ceil(starts / 2)`` starts per container after one
  unmeasured start (the page cache); the median per image is printed, then new/old ratios.
  After each start the probe also times, to its exit, a process importing what a BraTS
  evaluation imports before its first case (:data:`RUN_IMPORTS_CODE`: the entry point, the
  plug-in with ONNX Runtime, scipy and nibabel, the Google Cloud adapters, opendp): its CPU
  seconds are the start a run pays in all.

The containers are removed at the end; nothing else is written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = r"""
import json, os, signal, subprocess, sys, time
starts, RUN_IMPORTS = int(sys.argv[1]), sys.argv[2]
samples = []
for attempt in range(starts + 1):
    begin = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "sealbench.enclave"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall = None
    for line in child.stdout:
        if '"event":"step"' in line and '"index":0' in line:
            wall = time.perf_counter() - begin
            child.kill()
            break
    _, status, usage = os.wait4(child.pid, 0)
    if wall is None:
        raise SystemExit("the enclave ended before its first step")
    begin = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", RUN_IMPORTS])
    _, _, imports = os.wait4(child.pid, 0)
    if attempt:  # the first start warms the page cache
        samples.append({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                        "run_imports_cpu_s": imports.ru_utime + imports.ru_stime})
print(json.dumps(samples))
"""
#: What a BraTS evaluation imports before its first case: the entry point, the plug-in and its
#: runtime (ONNX Runtime, scipy, nibabel), the Google Cloud adapters and the release's opendp.
RUN_IMPORTS_CODE = (
    "import sealbench.enclave.__main__, sealbench.gcp.kms, sealbench.gcp.gcs, "
    "sealbench.gcp.credentials, sealbench.benchmarks.release, onnxruntime, opendp.measurements\n"
    "from sealbench.benchmarks.registry import BenchmarkPin, load\n"
    "load(BenchmarkPin.parse('brats-2023-gli/1'))\n"
)

SIZES = r"""
import json, os, sys
from pathlib import Path
root = Path("/opt/sealbench")
total = pyc = 0
packages = {}
site = next(root.glob("lib/python3*/site-packages"))
for folder, _dirs, files in os.walk(root):
    for name in files:
        path = Path(folder, name)
        if path.is_symlink():
            continue
        size = path.stat().st_size
        total += size
        pyc += size if name.endswith(".pyc") else 0
        if path.is_relative_to(site):
            top = path.relative_to(site).parts[0]
            packages[top] = packages.get(top, 0) + size
print(json.dumps({"total": total, "pyc": pyc, "packages": packages}))
"""


def _run(image: str, code: str, *args: str) -> object:
    out = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp",
         "--entrypoint", "python", image, "-c", code, *args],
        capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout)


def _mb(size: float) -> str:
    return f"{size / 1e6:.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(prog="tests/perf/image_bench.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="the image before (ID or tag)")
    parser.add_argument("--new", required=True, help="the image after (ID or tag)")
    parser.add_argument("--starts", type=int, default=7, help="measured starts per image")
    args = parser.parse_args()
    images = {"old": args.old, "new": args.new}
    sizes: dict[str, dict[str, object]] = {}
    for name, image in images.items():
        found = _run(image, SIZES)
        assert isinstance(found, dict)
        sizes[name] = found
        packages = sorted(found["packages"].items(), key=lambda kv: -kv[1])[:10]
        print(f"{name} {image}: venv {_mb(found['total'])} ({_mb(found['pyc'])} of it .pyc); "
              + ", ".join(f"{p} {v / 1e6:.0f}" for p, v in packages), flush=True)
    starts: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _round in range(2):  # two rounds, interleaved, so drift hits both
        for name, image in images.items():
            got = _run(image, PROBE, str((args.starts + 1) // 2), RUN_IMPORTS_CODE)
            assert isinstance(got, list)
            starts[name] += got
    medians = {name: {key: statistics.median(s[key] for s in samples)
                      for key in ("wall_s", "cpu_s", "run_imports_cpu_s")}
               for name, samples in starts.items()}
    for name, median in medians.items():
        print(f"{name} start to first step: CPU {median['cpu_s']:.2f} s, wall "
              f"{median['wall_s']:.2f} s; a BraTS run's imports: CPU "
              f"{median['run_imports_cpu_s']:.2f} s (medians of {len(starts[name])})")
    old_packages, new_packages = sizes["old"]["packages"], sizes["new"]["packages"]
    assert isinstance(old_packages, dict) and isinstance(new_packages, dict)
    largest = sorted({*old_packages, *new_packages},
                     key=lambda p: -max(old_packages.get(p, 0), new_packages.get(p, 0)))[:14]
    print("per package, MB old -> new: " + ", ".join(
        f"{p} {old_packages.get(p, 0) / 1e6:.1f} -> {new_packages.get(p, 0) / 1e6:.1f}"
        for p in largest))
    old_total, new_total = sizes["old"]["total"], sizes["new"]["total"]
    assert isinstance(old_total, int) and isinstance(new_total, int)
    print(f"venv new/old {new_total / old_total:.3f}: {_mb(new_total)} (target <= 350 MB)")
    print(f"start CPU new/old {medians['new']['cpu_s'] / medians['old']['cpu_s']:.3f}, wall "
          f"{medians['new']['wall_s'] / medians['old']['wall_s']:.3f}; run imports CPU "
          f"{medians['new']['run_imports_cpu_s'] / medians['old']['run_imports_cpu_s']:.3f}")
    print(json.dumps({"images": images, "venv_bytes": {k: v["total"] for k, v in sizes.items()},
                      "pyc_bytes": {k: v["pyc"] for k, v in sizes.items()},
                      "start_median": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
