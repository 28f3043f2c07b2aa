"""One process or two: the same pytest selection run serially and on ``-n 2`` xdist workers
(``--dist loadgroup``, the grouping of ``tests/conftest.py``), alternately, side by side in one
run, and the wall and CPU seconds of each (the whole process tree's, from the kernel's rusage of
the finished children), with the ratio two workers / one process.

Issue 42 part 6 asks for parallel tests where it is honest: two workers become the default of
``make test`` only if they cost less wall time and no more than a little more CPU on two cores.
On a machine other work keeps loaded the wall times say little (two workers also take a larger
share of a contended machine); the CPU seconds and the load average printed with each run say
how far to trust them.

    .venv/bin/python tests/perf/suite_bench.py tests/unit/crypto --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float
    load: float
    passed: bool


def run_once(selection: list[str], workers: int) -> Timing:
    """Run ``selection`` with ``workers`` xdist workers (0: one process, xdist not loaded)."""
    parallel = ["-n", str(workers), "--dist", "loadgroup"] if workers else ["-p", "no:xdist"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.monotonic()
    done = subprocess.run([*PYTEST, *parallel, *selection], cwd=REPO, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    print(f"  {'one process' if not workers else f'{workers} workers':12} wall {wall:7.1f} s  "
          f"CPU {cpu:7.1f} s  load {load:5.2f}  {last}", flush=True)
    return Timing(wall, cpu, load, done.returncode == 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selection", nargs="+", help="pytest paths (and options) to run")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternations of one process and two workers (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (default 2)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.workers < 2:
        parser.error("--rounds must be >= 1 and --workers >= 2")
    print(f"# pytest {' '.join(args.selection)}: one process vs {args.workers} workers, "
          f"{args.rounds} round(s), {os.cpu_count()} CPUs")
    serial: list[Timing] = []
    parallel: list[Timing] = []
    for _ in range(args.rounds):
        serial.append(run_once(args.selection, 0))
        parallel.append(run_once(args.selection, args.workers))
    wall = sum(t.wall_s for t in parallel) / sum(t.wall_s for t in serial)
    cpu = sum(t.cpu_s for t in parallel) / sum(t.cpu_s for t in serial)
    print(f"{args.workers} workers / one process: wall {wall:.2f}x, CPU {cpu:.2f}x "
          f"(below 1: the workers cost less)")
    return 0 if all(t.passed for t in serial + parallel) else 1


if __name__ == "__main__":
    sys.exit(main())
