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

Where a whole run's time went, per tier and per module, from the junit file of a run (``pytest
--junitxml=FILE``: each test's setup, call and teardown; a module's first test carries its
module-scoped world, a tier's first test its session-scoped one), and two runs side by side:

    .venv/bin/python tests/perf/suite_bench.py --junit before.xml after.xml --top 25
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
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


#: The integration modules that build or run images on the Docker engine.
DOCKER_MODULES = ("test_docker_", "test_server_image", "test_third_party_plugin_docker")


@dataclass(frozen=True)
class JunitTimes:
    """Per module of one junit file: seconds (setup, call and teardown of its tests) and tests."""

    seconds: Counter[str]
    tests: Counter[str]


def read_junit(path: Path) -> JunitTimes:
    seconds: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        parts = case.get("classname", "").split(".")
        ends = [i for i, part in enumerate(parts) if part.startswith("test_")]
        module = "/".join(parts[: ends[0] + 1]) + ".py" if ends else ".".join(parts)
        module = module or "(no module: the test the run was interrupted in)"
        seconds[module] += float(case.get("time") or 0.0)
        tests[module] += 1
    return JunitTimes(seconds, tests)


def tier(module: str) -> str:
    """``tests/unit/server``, ``tests/integration (Docker)``, ``tests/e2e``, ..."""
    parts = module.split("/")
    if parts[:2] == ["tests", "unit"] and len(parts) > 3:
        return "/".join(parts[:3])
    if parts[:2] == ["tests", "integration"]:
        docker = parts[-1].startswith(DOCKER_MODULES)
        return "tests/integration" + (" (Docker)" if docker else "")
    return "/".join(parts[:2])


def _by_tier(times: JunitTimes) -> tuple[Counter[str], Counter[str]]:
    seconds: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for module, s in times.seconds.items():
        seconds[tier(module)] += s
        tests[tier(module)] += times.tests[module]
    return seconds, tests


def junit_report(paths: list[Path], top: int) -> None:
    """Seconds and tests per tier and the ``top`` modules, one column per junit file."""
    runs = [read_junit(p) for p in paths]
    head = "".join(f"  {p.name[:22]:>22}" for p in paths)
    print(f"{'tier':44}{head}   (seconds, tests)")
    tiers = [_by_tier(r) for r in runs]
    names = sorted({t for s, _ in tiers for t in s}, key=lambda t: -tiers[0][0][t])
    for name in [*names, "all"]:
        cells = ""
        for seconds, tests in tiers:
            s = sum(seconds.values()) if name == "all" else seconds[name]
            n = sum(tests.values()) if name == "all" else tests[name]
            cells += f"  {s:14.0f} s {n:5d}"
        print(f"{name:44}{cells}")
    print(f"\n{'module (top ' + str(top) + ' of the first run)':60}{head}")
    for module, _ in runs[0].seconds.most_common(top):
        cells = "".join(f"  {r.seconds[module]:14.0f} s {r.tests[module]:5d}" for r in runs)
        print(f"{module[-60:]:60}{cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selection", nargs="*", help="pytest paths (and options) to run")
    parser.add_argument("--junit", type=Path, nargs="+", metavar="FILE",
                        help="report the junit files of whole runs instead of running anything")
    parser.add_argument("--top", type=int, default=30, help="modules listed with --junit")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternations of one process and two workers (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (default 2)")
    args = parser.parse_args(argv)
    if args.junit:
        junit_report(args.junit, args.top)
        return 0
    if not args.selection:
        parser.error("a pytest selection to run (or --junit FILE...)")
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
