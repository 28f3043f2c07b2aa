"""The Docker backend's reported wall time runs from the creation of the container to its exit:
creating and starting a container is part of what a run costs (as the interpreter's start is
part of a mock run's), so the timings of the two backends compare. Checked with a fake engine
and a fake clock that the engine's calls advance."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.crypto.digest import sha256_digest

pytest.importorskip("docker")

from sealbench.mocktee.docker_launcher import DockerLauncher

IMAGE_ID = str(sha256_digest(b"image config"))
CREATE_S, START_S, RUN_S = 5.0, 2.0, 3.0


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeImage:
    id: str = IMAGE_ID
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeContainer:
    clock: FakeClock
    options: dict[str, Any] = field(default_factory=dict)
    id: str = "c0ffee"
    attrs: dict[str, Any] = field(default_factory=lambda: {"Image": IMAGE_ID, "Config": {}})
    removed: bool = False

    def start(self) -> None:
        self.clock.now += START_S

    def wait(self, timeout: float | None = None) -> dict[str, int]:
        self.clock.now += RUN_S
        return {"StatusCode": 0}

    def remove(self, force: bool = False) -> None:
        self.removed = True

    def kill(self) -> None:
        return None

    def reload(self) -> None:
        return None


@dataclass
class FakeContainers:
    clock: FakeClock
    created: list[FakeContainer] = field(default_factory=list)

    def create(self, image: str, **options: Any) -> FakeContainer:
        self.clock.now += CREATE_S
        container = FakeContainer(self.clock, options)
        self.created.append(container)
        return container


@dataclass
class FakeImages:
    """Every reference names one image, with ``labels``."""

    labels: dict[str, str] = field(default_factory=dict)

    def get(self, reference: str) -> FakeImage:
        return FakeImage(labels=self.labels)


class FakeApi:
    def attach(self, container: str, **options: Any) -> Iterator[tuple[bytes, None]]:
        return iter([(b"step 7/7: done\n", None)])

    def stats(self, container: str, decode: bool = False) -> Iterator[dict[str, Any]]:
        return iter([{"memory_stats": {"usage": 123 * 2**20}}])


@dataclass
class FakeEngine:
    clock: FakeClock
    images: FakeImages = field(default_factory=FakeImages)
    api: FakeApi = field(default_factory=FakeApi)
    containers: FakeContainers = field(init=False)

    def __post_init__(self) -> None:
        self.containers = FakeContainers(self.clock)


class FakeWorkloadSocket:
    def stop(self) -> None:
        return None


class FakeMockLauncher:
    """The mock launcher's one call the Docker launcher makes."""

    def start_workload(self, *args: Any, socket_dir: Path, **options: Any) -> FakeWorkloadSocket:
        return FakeWorkloadSocket()


def _spec() -> RunSpec:
    location = {
        "uri": "gs://bucket-a/prefix",
        "kms_key": "projects/p/locations/global/keyRings/r/cryptoKeys/k",
        "pool_provider": "projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
    }
    return RunSpec(
        run_id="run-1",
        benchmark_id="7",
        metrics_version="brats-2023-gli/1",
        dataset=AssetLocation(asset_id="3", **location),
        model=AssetLocation(asset_id="4", **location),
        result_uri="gs://bucket-r/results/run-1",
        recipient_public_key=base64.b64encode(bytes(range(32))).decode(),
        data_digest=sha256_digest(b"dataset"),
        model_digest=sha256_digest(b"model"),
        recipient_digest=sha256_digest(bytes(range(32))),
    )


def test_wall_time_includes_container_creation_and_start() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock)
    launcher = DockerLauncher(
        engine,  # type: ignore[arg-type]
        FakeMockLauncher(),  # type: ignore[arg-type]
        "sealbench-eval:latest",
        clock=clock,
    )
    lines: list[str] = []
    result = launcher.launch(_spec(), on_output=lines.append)
    assert result.wall_seconds == pytest.approx(CREATE_S + START_S + RUN_S)
    assert result.image_digest == IMAGE_ID and result.peak_rss_bytes == 123 * 2**20
    assert lines == ["step 7/7: done"]
    assert [c.removed for c in engine.containers.created] == [True]
