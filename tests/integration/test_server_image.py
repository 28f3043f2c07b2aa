"""The registry's container image (``docker/server.Dockerfile``), built offline on the
debootstrap base from a wheelhouse of a snapshot of the checkout, run as an operator would: a
replica refuses to start on a database nobody migrated (the image never migrates by itself),
``migrate`` and ``init`` run once as one-off containers on the data volume, then ``serve``
answers an authenticated API call and serves the dashboard, as uid 10001."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from sealbench.client.images.build import BASE_TAG

if TYPE_CHECKING:
    from docker import DockerClient

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def server_image(
    docker_engine: DockerClient, source_snapshot: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    import docker.errors

    from sealbench.client.images.build import ensure_local_base

    ensure_local_base(docker_engine)
    context = tmp_path_factory.mktemp("server-image")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(context / "wheels"),
            f"{source_snapshot}[server]",
        ],
        check=True,
        timeout=900,
    )
    shutil.copy2(source_snapshot / "docker" / "server.Dockerfile", context / "server.Dockerfile")
    tag = f"sealbench-server:test-{uuid.uuid4().hex[:8]}"
    try:
        docker_engine.images.build(
            path=str(context),
            dockerfile="server.Dockerfile",
            buildargs={"BASE_IMAGE": BASE_TAG},
            tag=tag,
            rm=True,
            forcerm=True,
        )
    except docker.errors.BuildError as exc:
        log = "".join(str(c.get("stream", c.get("error", ""))) for c in exc.build_log)
        pytest.fail(f"the server image did not build: {log[-3000:]}")
    yield tag
    docker_engine.images.remove(tag, force=True)


def _one_off(client: DockerClient, image: str, volume: str, *args: str) -> tuple[int, str]:
    container = client.containers.run(
        image,
        list(args),
        volumes={volume: {"bind": "/var/lib/sealbench", "mode": "rw"}},
        detach=True,
    )
    try:
        status = container.wait(timeout=180)["StatusCode"]
        out = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
    finally:
        container.remove(force=True)
    return int(status), out


def test_server_image_migrates_once_then_serves(
    docker_engine: DockerClient, server_image: str
) -> None:
    volume = docker_engine.volumes.create(f"sealbench-server-test-{uuid.uuid4().hex[:8]}")
    container: Any = None
    try:
        status, out = _one_off(docker_engine, server_image, volume.name, "serve")
        # never migrates itself: it refuses the empty volume, naming --data-dir and init
        assert status == 1 and "no registry at" in out and "'sealbench-server init'" in out, out
        status, out = _one_off(docker_engine, server_image, volume.name, "migrate")
        assert status == 0 and "migrated from revision None" in out, out
        status, out = _one_off(docker_engine, server_image, volume.name, "init")
        assert status == 0 and "transparency log" in out, out
        status, out = _one_off(
            docker_engine, server_image, volume.name, "user", "add", "--email", "a@x.test"
        )
        # the token is on stdout, the notice about it on stderr: their order in the log varies
        tokens = [line.strip() for line in out.splitlines() if line.strip().startswith("sbt_")]
        assert status == 0 and len(tokens) == 1, out
        token = tokens[0]
        container = docker_engine.containers.run(
            server_image,
            volumes={volume.name: {"bind": "/var/lib/sealbench", "mode": "rw"}},
            ports={"8080/tcp": ("127.0.0.1", None)},
            detach=True,
        )
        container.reload()
        port = int(container.attrs["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"])
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            container.reload()
            if container.status == "exited" or time.monotonic() > deadline:
                pytest.fail(f"the server container did not answer: {container.logs()[-2000:]!r}")
            time.sleep(0.3)
        me = httpx.get(f"{url}/api/v1/users/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200 and me.json()["email"] == "a@x.test"
        assert httpx.get(f"{url}/api/v1/users/me").status_code == 401
        assert httpx.get(f"{url}/ui/sign-in").status_code == 200
        uid = container.exec_run(["python", "-c", "import os; print(os.getuid())"]).output
        assert uid.strip() == b"10001"
    finally:
        if container is not None:
            container.remove(force=True)
        volume.remove(force=True)
