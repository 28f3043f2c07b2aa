"""The evaluation image as Confidential Space sees it: its launch-policy labels let the operator
set exactly the run-spec variables and nothing else, it runs the enclave as a non-root user with
hash-based bytecode of its own sources and nothing the enclave never runs, it records the source
manifest of the checkout it was built from (rebuilding unchanged sources without the cache
gives the same digest, bytecode and stripped libraries included: ``test_docker_cli.py``).

Needs a Docker engine: see ``conftest.py`` (it installs and starts one as root on Debian, and
fails loudly where it cannot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sealbench.client.images.build import (
    BASE_TAG,
    LABEL_ALLOW_ENV_OVERRIDE,
    LABEL_LOG_REDIRECT,
    LABEL_SOURCE_DIGEST,
    ImageBuildError,
    canonical_config,
    find_source_root,
    fresh_local_image,
)
from sealbench.client.images.source import source_digest
from sealbench.contract.spec import ENV_OVERRIDE_NAMES

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.images.build import ImageBuildResult

pytestmark = pytest.mark.slow


def test_allow_env_override_label_is_exactly_the_run_spec(
    evaluation_image: ImageBuildResult,
) -> None:
    names = evaluation_image.labels[LABEL_ALLOW_ENV_OVERRIDE].split(",")
    assert tuple(names) == ENV_OVERRIDE_NAMES


def test_image_records_the_source_manifest_of_its_checkout(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, source_snapshot: Path
) -> None:
    assert evaluation_image.labels[LABEL_SOURCE_DIGEST] == source_digest(source_snapshot)
    assert fresh_local_image(docker_engine, source_snapshot).digest == evaluation_image.digest


def test_operator_cannot_override_the_command(evaluation_image: ImageBuildResult) -> None:
    assert not any("allow_cmd_override" in label for label in evaluation_image.labels)
    assert evaluation_image.labels[LABEL_LOG_REDIRECT] == "always"


def test_image_runs_the_enclave_as_non_root_with_bytecode_of_its_sources(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult
) -> None:
    """Every module has hash-based bytecode (flags 3: checked against its source's hash, no
    mtime), and every .pyc carries the hash of the source beside it: the enclave compiles
    nothing at start, and a stale .pyc could not be used."""
    config = docker_engine.images.get(evaluation_image.image_id).attrs["Config"]
    assert config["Entrypoint"] == ["python", "-m", "sealbench.enclave"]
    assert config["User"] == "10001:10001"
    assert not config.get("Cmd")
    probe = (
        "import importlib.util, json, os, pathlib, sys, sealbench.enclave, onnxruntime,"
        " google.cloud.kms\n"
        "pyc = sorted(pathlib.Path(sys.prefix).rglob('*.pyc'))\n"
        "flags = sorted({int.from_bytes(p.read_bytes()[4:8], 'little') for p in pyc})\n"
        "def source(p):\n"
        "    return p.parent.parent / (p.name.split('.')[0] + '.py')\n"
        "stale = [str(p) for p in pyc if p.read_bytes()[8:16]"
        " != importlib.util.source_hash(source(p).read_bytes())]\n"
        "print(json.dumps([os.getuid(), sys.prefix, len(pyc), flags, stale[:3],"
        " list(sys.version_info[:2])]))\n"
    )
    out = docker_engine.containers.run(
        evaluation_image.image_id,
        entrypoint=["python", "-c", probe],
        read_only=True,
        network_mode="none",
        remove=True,
    )
    uid, prefix, pyc, flags, stale, version = json.loads(out.decode())
    assert (uid, prefix, version) == (10001, "/opt/sealbench", [3, 11])
    assert pyc > 1000 and flags == [3] and stale == []


def test_image_holds_nothing_the_enclave_never_runs(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult
) -> None:
    """No Compute client (the enclave launches no VM), no pip or setuptools, no test suites,
    nothing an evaluation of a shipped benchmark never loads (tests/perf/image_imports.py: the
    unused subpackages of scipy, ONNX Runtime's tools and C-API library, sealbench's server and
    client, type stubs), while what it does load imports; and no symbol table in the libraries
    strip can take it from (opendp's: 275 MB -> 168 MB); the Python environment's size is what
    tests/perf/image_bench.py reports."""
    probe = (
        "import importlib.util, json, pathlib, sys\n"
        "import scipy.ndimage, scipy.optimize, scipy.spatial, onnxruntime, opendp.measurements\n"
        "site = next(pathlib.Path(sys.prefix).glob('lib/python3*/site-packages'))\n"
        "present = [m for m in ('google.cloud.compute_v1', 'pip', 'setuptools', 'scipy.stats',"
        " 'scipy.io', 'scipy.signal', 'onnxruntime.transformers', 'onnxruntime.quantization',"
        " 'numpy.distutils', 'sealbench.server', 'sealbench.client')"
        " if importlib.util.find_spec(m) is not None]\n"
        "tests = [str(p) for p in site.rglob('tests') if p.is_dir()][:3]\n"
        "unused = [str(p) for pattern in ('*.pyi', '*.h', 'libonnxruntime.so*', '*.onnx')"
        " for p in site.rglob(pattern)][:3]\n"
        "lib = next(site.glob('opendp/lib/*.so'))\n"
        "print(json.dumps([present, tests, unused, b'.symtab' in lib.read_bytes()[-1 << 20:]]))\n"
    )
    out = docker_engine.containers.run(
        evaluation_image.image_id,
        entrypoint=["python", "-c", probe],
        read_only=True,
        network_mode="none",
        remove=True,
    )
    assert json.loads(out.decode()) == [[], [], [], False]


def test_image_digest_is_the_engine_image_id(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult
) -> None:
    image = docker_engine.images.get(evaluation_image.reference)
    assert evaluation_image.digest == evaluation_image.image_id == image.id
    assert evaluation_image.base_image == BASE_TAG


# Rebuilding unchanged sources gives the same digest, every step run again (new build containers,
# new times; layers byte-identical, bytecode and stripped libraries included): held through the
# command people type by test_docker_cli.py::
# test_no_cache_image_build_of_unchanged_sources_reports_the_session_image (a cached rebuild here
# and a no-cache one there were two more builds, about five minutes at load, for one property).


def _inspection(**config: object) -> dict[str, Any]:
    return {
        "Architecture": "amd64",
        "Os": "linux",
        "Created": "2026-12-02T10:00:00.123Z",
        "Container": "0123abcd",
        "RootFS": {"Type": "layers", "Layers": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]},
        "Config": {"Hostname": "0123abcd", "User": "10001:10001", "Labels": {"k": "v"}, **config},
    }


def test_digest_ignores_build_times_and_containers_but_not_settings() -> None:
    base = canonical_config(_inspection(), base_layers=1)
    later = _inspection()
    later.update(Created="2027-01-01T00:00:00Z", Container="ffff")
    later["Config"]["Hostname"] = "ffff"
    assert canonical_config(later, base_layers=1) == base
    assert canonical_config(_inspection(User="0:0"), base_layers=1) != base
    assert canonical_config(_inspection(Labels={"k": "w"}), base_layers=1) != base
    swapped = _inspection()
    swapped["RootFS"]["Layers"].reverse()
    assert canonical_config(swapped, base_layers=1) != base


def test_source_root_is_found_from_inside_the_checkout(source_snapshot: Path) -> None:
    assert find_source_root(source_snapshot / "client" / "launchers") == source_snapshot.resolve()
    with pytest.raises(ImageBuildError, match="no sealbench checkout"):
        find_source_root(source_snapshot.parent)
