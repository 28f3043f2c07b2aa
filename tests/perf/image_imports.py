"""What an evaluation loads, for every shipped benchmark: the evidence behind the evaluation
image's list of things it does not ship (``docker/Dockerfile``, ``unused='...'``). A script,
not a test::

    .venv/bin/python tests/perf/image_imports.py [--cases 2] [--plugin NAME ...]

For each benchmark plug-in (default: every one ``PluginRegistry`` finds) it runs one
confidential evaluation of the plug-in's first shipped model on ``--cases`` demo cases with
``tests/plugins/confidential_run.py`` on the mock TEE: the enclave is a child process of this
venv's interpreter, as in the image. The interpreter is started through a shim environment whose
``sitecustomize`` writes, when the process exits, every module in ``sys.modules`` and every
shared library mapped (``/proc/self/maps``: the ones loaded by ``ctypes`` or as a dependency,
such as opendp's and OpenBLAS, are no module). The enclave's records of all runs are joined.

Printed: per distribution of interest (scipy, numpy, onnxruntime), the sub-packages the
enclaves imported and those they never imported; the shared libraries over 1 MB of those
distributions never mapped (one whose soname another distribution's copy had already loaded
counts as unmapped: scipy's second libgfortran); then each entry of the Dockerfile's list
that an evaluation did load (exit 1 if any: the image would lack something an evaluation
runs). The image itself is the final check: ``tests/integration/test_docker_*.py`` and
``tests/plugins/confidential_run.py --tee docker`` run evaluations in it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "plugins" / "confidential_run.py"
DOCKERFILE = REPO / "docker" / "Dockerfile"
DISTRIBUTIONS = ("scipy", "numpy", "onnxruntime")

SITECUSTOMIZE = """
import atexit, json, os, sys
def _record():
    maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
    with open(os.path.join(OUT, f"{os.getpid()}.json"), "w") as f:
        json.dump({"argv": sys.argv, "modules": sorted(sys.modules), "maps": maps}, f)
atexit.register(_record)
"""


def _shim(root: Path, out: Path) -> Path:
    """A venv whose site-packages adds this one's and records each process at exit."""
    site = Path(sysconfig.get_paths()["purelib"])
    shim_site = root / "lib" / site.parent.name / "site-packages"
    shim_site.mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    (root / "pyvenv.cfg").write_text(
        f"home = {Path(sys.executable).resolve().parent}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    (shim_site / "zz_this_venv.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    # the launcher gives the enclave a clean environment: PYTHONPATH's sources travel this way
    (shim_site / "aa_pythonpath.pth").write_text(
        "".join(f"{entry}\n" for entry in os.environ.get("PYTHONPATH", "").split(":") if entry))
    (shim_site / "sitecustomize.py").write_text(f"OUT = {str(out)!r}\n" + SITECUSTOMIZE)
    return root / "bin" / "python"


def _pruned() -> list[str]:
    text = DOCKERFILE.read_text()
    found = re.search(r"unused='(.*?)'", text, re.S)
    always = re.search(r"for path in \$unused(.*?);", text, re.S)
    assert found and always, "docker/Dockerfile has no unused='...' list or 'for path' loop"
    return (found.group(1) + always.group(1)).replace("\\", " ").split()


def main() -> int:
    parser = argparse.ArgumentParser(prog="tests/perf/image_imports.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2)
    parser.add_argument("--plugin", action="append", help="only these plug-ins (repeatable)")
    args = parser.parse_args()
    from sealbench.benchmarks.registry import PluginRegistry

    registry = PluginRegistry()
    plugins = args.plugin or list(registry.names())
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    modules: set[str] = set()
    maps: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="sealbench-imports-") as tmp:
        records = Path(tmp) / "records"
        records.mkdir()
        python = _shim(Path(tmp) / "shim", records)
        for name in plugins:
            plugin = registry.get(name)
            model = Path(tmp) / f"{name}.onnx"
            model.write_bytes(plugin.model_bytes(plugin.shipped_models[0].name))
            done = subprocess.run(
                [str(python), str(RUNNER), "--plugin", name, "--model", str(model),
                 "--root", str(Path(tmp) / name), "--cases", str(args.cases)],
                capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                print(f"{name}: the evaluation failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                return 2
            enclaves = 0
            for path in sorted(records.glob("*.json")):
                record = json.loads(path.read_text())
                path.unlink()
                if any("enclave" in a for a in record["argv"][:1]):
                    enclaves += 1
                    modules.update(record["modules"])
                    maps.update(record["maps"])
            print(f"{name}: {enclaves} enclave process(es) recorded", flush=True)
            if not enclaves:
                return 2
    loaded = {str(Path(m).resolve().relative_to(site)) for m in maps
              if Path(m).resolve().is_relative_to(site)}
    for dist in DISTRIBUTIONS:
        subs = sorted(p.name for p in (site / dist).iterdir()
                      if p.is_dir() and p.name != "__pycache__")
        used = [s for s in subs if f"{dist}.{s}" in modules]
        print(f"{dist}: imported {' '.join(used)}")
        print(f"{dist}: never imported {' '.join(s for s in subs if s not in used)}")
    unmapped = sorted(str(p.relative_to(site)) for p in site.rglob("*.so*")
                      if p.is_file() and str(p.relative_to(site)) not in loaded
                      and p.relative_to(site).parts[0].removesuffix(".libs") in DISTRIBUTIONS
                      and p.stat().st_size > 1_000_000)
    print(f"shared libraries over 1 MB of {', '.join(DISTRIBUTIONS)} never mapped: "
          + " ".join(unmapped))
    wrong = [entry for entry in _pruned()
             if entry.replace("/", ".") in modules
             or any(path.startswith(entry + "/") for path in loaded)]
    print(f"the Dockerfile's list: {len(_pruned())} entries, loaded by an evaluation: "
          f"{' '.join(wrong) or 'none'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
