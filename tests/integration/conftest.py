"""Fixtures of the Docker tier (``test_docker_*.py``); nothing here is autouse, so the other
integration tests never touch Docker.

``docker_engine`` (session): a Docker engine, always. It reuses a running one (``DOCKER_HOST``
or the local socket). Otherwise, on a Debian machine where the tests run as root, it installs
Debian's ``docker.io`` with apt-get if it is missing, starts ``dockerd`` in the background and
waits for its socket; a daemon it started is stopped at the end of the session. When none of
that is possible the tier FAILS with the reason: it never skips and never passes without an
engine.

``evaluation_image`` (session): the evaluation image, built once per session with
:func:`sealbench.client.images.build.build_image` from a snapshot of the checkout (so an edit
made by someone while the tests run cannot change the digest between two builds), on the cached
offline base (made by debootstrap the first time, about a minute; Debian's ``debootstrap`` is
installed the same way when missing).

``aggregator_image`` (session): the aggregator image (issue 27) that build derived from
``evaluation_image`` (the same layers, its own command and launch policy).

``docker_world`` (session): an in-process mock cloud with a hospital and a model owner, three
tiny synthetic cases and a tiny ONNX model sealed into their buckets through the real Google
clients, and both keys' policies (pool provider, KMS and bucket IAM) written by the policy
writer for the workload of ``evaluation_image``'s digest only.

``sealbench_wheel`` (session): the sealbench wheel, built once per session from
``source_snapshot`` without touching the checkout (``test_wheel_install.py`` and
``test_role_extras.py`` install it into fresh virtual environments).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sealbench.benchmarks.brats import BRATS_2023_GLI, BratsContract
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.crypto.digest import Sha256Digest
from sealbench.crypto.sealing import public_key_digest, public_key_to_raw
from sealbench.mocktee.provision import OwnerSetup
from sealbench.mocktee.server import MockCloud

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.images.build import ImageBuildResult

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


def _ensure_tool(tool: str, package: str) -> None:
    """Install Debian's ``package`` when ``tool`` is missing (root on Debian only)."""
    if shutil.which(tool) is not None:
        return
    if os.geteuid() != 0 or not Path("/etc/debian_version").is_file():
        _tier_cannot_run(f"{tool} is missing and this is not a Debian machine running as root")
    _apt_install([package])
    if shutil.which(tool) is None:
        _tier_cannot_run(f"apt-get installed {package} but {tool} is still not on PATH")


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
    client = _try_connect()
    started: subprocess.Popen[bytes] | None = None
    if client is None:
        _ensure_tool("dockerd", "docker.io")
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
def sealbench_wheel(tmp_path_factory: pytest.TempPathFactory, source_snapshot: Path) -> Path:
    """The wheel of ``source_snapshot`` (``pip wheel --no-deps``; the build writes nothing into
    the checkout)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(source_snapshot)],
        check=True,
        timeout=300,
    )
    [built] = out.glob("sealbench-*.whl")
    return built


@pytest.fixture(scope="session")
def evaluation_image(docker_engine: DockerClient, source_snapshot: Path) -> ImageBuildResult:
    """The :class:`~sealbench.client.images.build.ImageBuildResult` of this session's build."""
    import docker.errors

    from sealbench.client.images.build import BASE_TAG, BUILD_TAG, build_image

    for tag in (BASE_TAG, BUILD_TAG):
        try:
            docker_engine.images.get(tag)
        except docker.errors.ImageNotFound:
            _ensure_tool("debootstrap", "debootstrap")  # each is made once, then reused
    return build_image(docker_engine, source_snapshot)


@pytest.fixture(scope="session")
def aggregator_image(evaluation_image: ImageBuildResult) -> ImageBuildResult:
    """The aggregator image :func:`~sealbench.client.images.build.build_image` derived from
    this session's evaluation image."""
    assert evaluation_image.aggregator is not None, "a CPU build derives the aggregator image"
    return evaluation_image.aggregator


# -- a sealed world on the mock TEE for the Docker launcher -----------------------------------

DOCKER_HOSPITAL_POOL = (
    "projects/200000000012/locations/global/workloadIdentityPools/hospital-pool"
    "/providers/attestation"
)
DOCKER_MODELCO_POOL = (
    "projects/300000000013/locations/global/workloadIdentityPools/modelco-pool"
    "/providers/attestation"
)


def docker_tiny_model(seed: int = 0) -> bytes:
    """A 1x1x1 convolution from 4 modalities to 4 classes (fast, deterministic)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(seed).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
    spatial = ["D", "H", "W"]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, *spatial])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, *spatial])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


@dataclass
class DockerWorld:
    """A mock cloud, a hospital and a model owner with sealed assets, and the keys' policies
    written for the evaluation image's digest only."""

    cloud: MockCloud
    root: Path
    hospital: OwnerSetup
    modelco: OwnerSetup
    recipient: X25519PrivateKey
    prepared: Path
    contract: BratsContract
    weights: bytes
    data_digest: Sha256Digest
    model_digest: Sha256Digest
    _runs: int = 0

    def spec(self) -> RunSpec:
        """A fresh run whose result goes to a ``file://`` folder, as ``sealbench run`` does."""
        self._runs += 1
        ep = self.cloud.endpoints
        run_id = f"docker-run-{self._runs}"
        result_dir = self.root / "results" / run_id
        return RunSpec(
            run_id=run_id,
            benchmark_id="1",
            metrics_version="brats-2023-gli/1-32x32x24",
            dataset=AssetLocation(
                asset_id="ds-docker",
                uri=f"gs://{self.hospital.bucket}/datasets/docker/",
                kms_key=self.hospital.key_name,
                pool_provider=DOCKER_HOSPITAL_POOL,
            ),
            model=AssetLocation(
                asset_id="model-docker",
                uri=f"gs://{self.modelco.bucket}/models/docker/",
                kms_key=self.modelco.key_name,
                pool_provider=DOCKER_MODELCO_POOL,
            ),
            result_uri=result_dir.as_uri(),
            recipient_public_key=base64.b64encode(
                public_key_to_raw(self.recipient.public_key())
            ).decode(),
            data_digest=self.data_digest,
            model_digest=self.model_digest,
            recipient_digest=public_key_digest(self.recipient.public_key()),
            sts_url=ep.sts_token_url,
            kms_endpoint=ep.kms,
            storage_endpoint=ep.storage,
        )

    def result_dir(self, spec: RunSpec) -> Path:
        return self.root / "results" / spec.run_id

    def authorize(self, image_digest: Sha256Digest) -> None:
        """Both owners allow exactly the workload of ``image_digest`` on these assets."""
        from google.oauth2.credentials import Credentials

        from sealbench.contract.workload import WorkloadIdentity
        from sealbench.gcp.owner_cloud import pool_provider_from_name
        from sealbench.gcp.policy import AssetPolicy
        from sealbench.gcp.policy_writer import PolicyWriter

        workload = WorkloadIdentity(
            image_digest,
            self.data_digest,
            self.model_digest,
            public_key_digest(self.recipient.public_key()),
            "1",
            "brats-2023-gli/1-32x32x24",
        )
        ep = self.cloud.endpoints
        for owner, pool, include_data in (
            (self.hospital, DOCKER_HOSPITAL_POOL, True),
            (self.modelco, DOCKER_MODELCO_POOL, False),
        ):
            writer = PolicyWriter.from_credentials(
                Credentials(owner.access_token),  # type: ignore[no-untyped-call]
                iam_url=ep.iam,
                kms_url=ep.kms,
                storage_url=ep.storage,
            )
            writer.sync(
                AssetPolicy(
                    provider=pool_provider_from_name(pool),
                    key_name=owner.key_name,
                    bucket=owner.bucket,
                    workloads=frozenset({workload}),
                    include_data=include_data,
                    issuer_uri=ep.issuer + "/",
                    endpoints=ep.service_endpoints(),
                )
            )


def _owner_store_and_wrapper(cloud: MockCloud, owner: OwnerSetup) -> tuple[Any, Any]:
    from google.oauth2.credentials import Credentials

    from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
    from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client

    creds = Credentials(owner.access_token)  # type: ignore[no-untyped-call]
    store = GcsBlobStore(
        make_storage_client(owner.project_id, creds, cloud.endpoints.storage), owner.bucket
    )
    return store, KmsKeyWrapper(owner.key_name, make_kms_client(creds, cloud.endpoints.kms))


@pytest.fixture(scope="session")
def docker_world(
    tmp_path_factory: pytest.TempPathFactory, evaluation_image: ImageBuildResult
) -> Iterator[DockerWorld]:
    """Three tiny synthetic cases and a tiny model, sealed into the mock cloud, with both keys'
    policies naming ``evaluation_image``'s digest."""
    from sealbench.benchmarks.brats.prepare import prepare_dataset
    from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
    from sealbench.client.assets.store import seal_dataset, seal_model
    from sealbench.crypto.sealing import generate_recipient_key
    from sealbench.mocktee.provision import provision_owner

    root = tmp_path_factory.mktemp("docker-world")
    contract = BRATS_2023_GLI.with_shape((32, 32, 24))
    with MockCloud(root / "state") as cloud:
        hospital, modelco = (
            provision_owner(
                cloud.endpoints,
                email=f"{name}@example.org",
                project_id=f"{name}-docker",
                project_number=pool.split("/")[1],
                bucket=f"{name}-docker-bucket",
            )
            for name, pool in (("hospital", DOCKER_HOSPITAL_POOL), ("modelco", DOCKER_MODELCO_POOL))
        )
        raw, prepared = root / "raw", root / "prepared"
        for seed in (1, 2, 3):
            write_case(
                generate_case(seed, contract.shape, contract), raw, case_id_for(seed), contract
            )
        prepare_dataset(raw, prepared, contract)
        store, wrapper = _owner_store_and_wrapper(cloud, hospital)
        data = seal_dataset(
            prepared,
            asset_id="ds-docker",
            key_wrapper=wrapper,
            store=store,
            prefix="datasets/docker/",
        )
        weights = docker_tiny_model()
        (root / "tiny.onnx").write_bytes(weights)
        store, wrapper = _owner_store_and_wrapper(cloud, modelco)
        model = seal_model(
            root / "tiny.onnx",
            asset_id="model-docker",
            key_wrapper=wrapper,
            store=store,
            prefix="models/docker/",
        )
        world = DockerWorld(
            cloud,
            root,
            hospital,
            modelco,
            generate_recipient_key(),
            prepared,
            contract,
            weights,
            data.digest,
            model.digest,
        )
        world.authorize(evaluation_image.digest)
        yield world
