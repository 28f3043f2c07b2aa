"""Fixtures of the Docker tier (``test_docker_*.py``); nothing here is autouse, so the other
integration tests never touch Docker.

``docker_engine`` (session): a Docker engine, always. It reuses a running one (``DOCKER_HOST``
or the local socket). Otherwise, on a Debian machine where the tests run as root, it installs
Debian's ``docker.io`` (and ``debootstrap``, which the offline base image needs) with apt-get if
they are missing, starts ``dockerd`` in the background and waits for its socket; a daemon it
started is stopped at the end of the session. When none of that is possible the tier FAILS with
the reason: it never skips and never passes without an engine.

``evaluation_image`` (session): the evaluation image, built once per session with
:func:`sealbench.client.image.build_image` from a snapshot of the checkout (so an edit made by
someone while the tests run cannot change the digest between two builds), on the cached offline
base (made by debootstrap the first time, about a minute).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.image import ImageBuildResult

REPO = Path(__file__).resolve().parents[2]
DOCKERD_START_TIMEOUT_S = 90.0
APT_TIMEOUT_S = 900
_SOCKET = Path("/var/run/docker.sock")


def _tier_cannot_run(reason: str) -> None:
    pytest.fail(
        f"DOCKER TIER CANNOT RUN: {reason}. This tier needs a Docker engine (or root on Debian "
        "to install docker.io and start dockerd); it is never skipped.",
        pytrace=False,
    )


def _try_connect() -> DockerClient | None:
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except docker.errors.DockerException:
        return None
    return client


def _apt_install(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            _tier_cannot_run(f"{' '.join(argv)} failed: {done.stderr.strip()[-800:]}")


def _ensure_tools() -> None:
    missing = [
        package
        for package, tool in (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
        if shutil.which(tool) is None
    ]
    if not missing:
        return
    if os.geteuid() != 0 or not Path("/etc/debian_version").is_file():
        _tier_cannot_run(
            f"{', '.join(missing)} missing and this is not a Debian machine running as root"
        )
    _apt_install(missing)


def _start_dockerd(log_path: Path) -> subprocess.Popen[bytes]:
    if os.geteuid() != 0:
        _tier_cannot_run("no Docker engine is running and only root can start dockerd")
    dockerd = shutil.which("dockerd")
    assert dockerd is not None
    log = log_path.open("wb")
    process = subprocess.Popen(
        [dockerd, f"--host=unix://{_SOCKET}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + DOCKERD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-1500:]
            _tier_cannot_run(f"dockerd exited {process.returncode}: {tail}")
        if _SOCKET.exists() and _try_connect() is not None:
            return process
        time.sleep(0.5)
    process.terminate()
    _tier_cannot_run(f"dockerd did not answer within {DOCKERD_START_TIMEOUT_S} s")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerClient]:
    """A connected Docker SDK client (the SDK is imported lazily, so that the other
    integration tests do not need it)."""
    try:
        import docker  # noqa: F401
    except ImportError:
        _tier_cannot_run("the Docker SDK is not installed: pip install 'sealbench[docker]'")
    _ensure_tools()
    client = _try_connect()
    started: subprocess.Popen[bytes] | None = None
    if client is None:
        started = _start_dockerd(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
        client = _try_connect()
        assert client is not None
    yield client
    if started is not None:
        started.send_signal(signal.SIGTERM)
        try:
            started.wait(timeout=60)
        except subprocess.TimeoutExpired:
            started.kill()


@pytest.fixture(scope="session")
def source_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the image is built from: metadata, package folders, docker/."""
    import tomllib

    dst = tmp_path_factory.mktemp("sealbench-source")
    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dst / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in sorted({*package_dirs.values(), "docker"}):
        shutil.copytree(REPO / folder, dst / folder, ignore=ignore)
    return dst


@pytest.fixture(scope="session")
def evaluation_image(docker_engine: DockerClient, source_snapshot: Path) -> ImageBuildResult:
    """The :class:`~sealbench.client.image.ImageBuildResult` of this session's build."""
    from sealbench.client.image import build_image

    return build_image(docker_engine, source_snapshot)
