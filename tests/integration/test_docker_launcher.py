"""The full confidential evaluation through the Docker launcher: the real evaluation image, run
hardened by the local engine, attested by the mock TEE with the digest of the image actually
run, gets its keys released by the production path (token file -> STS CEL condition -> KMS IAM)
and writes a result the data owner opens and finds equal to the plain evaluation. An image
whose digest is not the benchmark's, even with the very same content, is refused its keys."""

from __future__ import annotations

import io
import time
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest

from sealbench.benchmarks.brats import (
    BRATS_2023_GLI_METRICS,
    CaseResult,
    OnnxSegmenter,
    load_case_from_bytes,
    score_or_fail,
)
from sealbench.benchmarks.release import LocalExact
from sealbench.client.runs.launchers import EnclaveRunFailed, LaunchError
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.contract.errors import KeyReleaseDenied
from sealbench.crypto.attestation import Jwks, unverified_payload
from sealbench.gcp.confidential_space import claims_from_payload
from sealbench.mocktee.docker_launcher import CONTAINER_LAUNCHER_DIR, DockerLauncher
from sealbench.platforms.storage import open_storage_uri

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.images.build import ImageBuildResult

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 600


def _plain_results(world: Any) -> list[CaseResult]:
    """The same evaluation with no encryption, no storage and no TEE."""
    contract = world.contract
    segmenter = OnnxSegmenter(world.weights, contract)
    results: list[CaseResult] = []
    for folder in sorted((world.prepared / "data" / "cases").iterdir()):
        files = {f"cases/{folder.name}/{p.name}": p.read_bytes() for p in folder.iterdir()}
        case = load_case_from_bytes(files, contract)
        assert case.seg is not None
        prediction = segmenter.segment(case)
        results.append(
            score_or_fail(
                case.case_id, prediction, case.seg, BRATS_2023_GLI_METRICS, contract.spacing_mm
            )
        )
    return results


def _container_gone(engine: DockerClient, container_id: str) -> bool:
    try:
        engine.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def test_confidential_evaluation_in_the_image_matches_plain_evaluation(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, docker_world: Any
) -> None:
    world = docker_world
    launcher = DockerLauncher(docker_engine, world.cloud.launcher(), evaluation_image.reference)
    assert launcher.image_digest == evaluation_image.digest
    spec = world.spec()
    lines: list[str] = []
    with launcher.start(spec, on_output=lines.append) as workload:
        host = docker_engine.containers.get(workload.container_id).attrs["HostConfig"]
        result = workload.wait(RUN_TIMEOUT_S)
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["NetworkMode"] == "host"
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]
    assert set(host["Tmpfs"]) == {"/tmp"}
    launcher_mount = next(m for m in host["Mounts"] if m["Target"] == CONTAINER_LAUNCHER_DIR)
    assert launcher_mount["ReadOnly"] is True
    assert _container_gone(docker_engine, workload.container_id)

    assert result.image_digest == evaluation_image.digest
    assert result.peak_rss_bytes is not None
    assert 0 < result.peak_rss_bytes <= host["Memory"]
    assert any("step 7/7" in line for line in lines), lines[-5:]
    store, prefix = open_storage_uri(spec.result_uri)
    opened = open_result(
        download_result(store, prefix),
        world.recipient,
        jwks=Jwks.from_json(world.cloud.verifier.jwks()),
        issuer=world.cloud.endpoints.issuer,
        now=time.time(),
    )
    assert opened.claims.image_digest == evaluation_image.digest
    # The Confidential Space claims of the token open_result verified (the mock mints them).
    claims = claims_from_payload(unverified_payload(opened.token))
    assert claims.submods.container.image_digest == evaluation_image.digest
    assert claims.submods.container.image_reference == evaluation_image.reference
    assert opened.per_case.image_digest == evaluation_image.digest
    expected = _plain_results(world)
    assert list(opened.cases) == expected
    exact = opened.benchmark.summarise(expected, LocalExact())
    if opened.summary.withheld is not None:  # under the small-cell minimum: nothing published
        assert opened.aggregates == exact  # the hospital's own exact figures, computed locally
    else:  # a release of exactly these cases: OpenDP noise on their sums
        released = opened.aggregates.release
        assert released.mechanism == "gaussian" and released.n_cases == exact.n_cases
        for noisy, truth in zip(released.columns, exact.release.columns, strict=True):
            assert noisy.key == truth.key and abs(noisy.sum - truth.sum) <= 6 * noisy.sd


def test_image_with_another_digest_is_refused_its_keys(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, docker_world: Any
) -> None:
    """Same files, one more label: a different image ID, which no policy names."""
    dockerfile = f"FROM {evaluation_image.image_id}\nLABEL sealbench.test.rebadged=yes\n"
    other, _ = docker_engine.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag="sealbench-eval:rebadged", rm=True
    )
    assert other.id != evaluation_image.digest
    launcher = DockerLauncher(
        docker_engine, docker_world.cloud.launcher(), "sealbench-eval:rebadged"
    )
    spec = docker_world.spec()
    try:
        with pytest.raises(EnclaveRunFailed) as info, launcher.start(spec) as workload:
            workload.wait(RUN_TIMEOUT_S)
    finally:
        docker_engine.images.remove("sealbench-eval:rebadged")
    assert info.value.exit_code == 13 and info.value.error_class is KeyReleaseDenied
    assert "owner refused this workload" in info.value.reason, info.value.reason
    assert _container_gone(docker_engine, workload.container_id)
    results = docker_world.result_dir(spec)
    assert not (results / "result.sealed").exists() and not (results / "result.token").exists()


def test_run_past_its_timeout_is_killed_and_removed(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, docker_world: Any
) -> None:
    launcher = DockerLauncher(
        docker_engine, docker_world.cloud.launcher(), evaluation_image.reference
    )
    spec = docker_world.spec()
    with launcher.start(spec) as workload:
        assert workload.pid is not None  # running, as the host sees it
        with pytest.raises(LaunchError, match=r"did not finish within 0\.5 s"):
            workload.wait(0.5)
    assert _container_gone(docker_engine, workload.container_id)
    assert not (docker_world.result_dir(spec) / "result.token").exists()


def test_run_over_its_memory_limit_is_reported_as_such(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, docker_world: Any
) -> None:
    launcher = DockerLauncher(
        docker_engine, docker_world.cloud.launcher(), evaluation_image.reference, memory_limit="24m"
    )
    with pytest.raises(EnclaveRunFailed) as info:
        launcher.launch(docker_world.spec(), timeout=RUN_TIMEOUT_S)
    assert info.value.exit_code == 137 and info.value.error_class is None
    assert "memory limit (24m)" in info.value.reason


# -- the operator's attacks, in the real image -------------------------------------------------


# One endpoint here: the image's enclave refuses an overridden endpoint before it sends a token,
# whichever it is, by the code every launcher runs; each of the three (STS, KMS, storage) is held
# on the mock TEE by tests/e2e/test_operator_attacks.py::
# test_token_capture_through_endpoint_override_releases_nothing and by
# tests/integration/test_mocktee_key_release.py::
# test_token_of_run_with_redirected_endpoint_denied_key.
# What only the Docker launcher can get wrong (the override reaching the container and its
# attested token) is the same for each.
@pytest.mark.parametrize("field", ["sts_url"])
def test_token_capture_through_endpoint_override_in_the_image_releases_nothing(
    docker_engine: DockerClient,
    evaluation_image: ImageBuildResult,
    docker_world: Any,
    token_trap: Any,
    field: str,
) -> None:
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import Request

    from sealbench.contract.errors import SpecError
    from sealbench.gcp.credentials import workload_credentials

    name = {
        "sts_url": "SEALBENCH_STS_URL",
        "kms_endpoint": "SEALBENCH_KMS_ENDPOINT",
        "storage_endpoint": "SEALBENCH_STORAGE_ENDPOINT",
    }[field]
    cloud = docker_world.cloud
    launcher = DockerLauncher(docker_engine, cloud.launcher(), evaluation_image.reference)
    hijacked = docker_world.spec().model_copy(update={field: f"{token_trap.url}/v1/token"})
    with pytest.raises(EnclaveRunFailed) as info, launcher.start(hijacked) as workload:
        workload.wait(RUN_TIMEOUT_S)
    assert info.value.error_class is SpecError and name in info.value.reason
    assert token_trap.requests == []
    assert _container_gone(docker_engine, workload.container_id)
    assert not (docker_world.result_dir(hijacked) / "result.sealed").exists()
    # The genuine token of that very launch, replayed at the genuine STS: no access token for
    # either owner's pool.
    with cloud.launcher().start_workload(
        evaluation_image.digest,
        evaluation_image.reference,
        hijacked.to_environ(),
        socket_dir=docker_world.root / f"replay-{field}",
    ) as run:
        for location in (hijacked.dataset, hijacked.model):
            creds = workload_credentials(
                location.pool_provider,
                token_file=run.token_file,
                sts_url=cloud.endpoints.sts_token_url,
            )
            with pytest.raises(GoogleAuthError) as refused:
                creds.refresh(Request())  # type: ignore[no-untyped-call]
            assert "rejected by the attribute condition" in str(refused.value)
            assert name in str(refused.value)
    assert docker_world.weights not in token_trap.captured()


def test_launch_policy_is_read_from_the_image_labels(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult
) -> None:
    from sealbench.contract.spec import ENV_OVERRIDE_NAMES
    from sealbench.mocktee.launcher import ImagePolicy, LaunchPolicyViolation

    labels = docker_engine.images.get(evaluation_image.digest).labels
    policy = ImagePolicy.from_labels(labels)
    assert policy.allow_env_override == frozenset(ENV_OVERRIDE_NAMES)
    assert not policy.allow_cmd_override
    with pytest.raises(LaunchPolicyViolation, match="LD_PRELOAD"):
        policy.check({"LD_PRELOAD": "/tmp/steal.so"}, None)
    with pytest.raises(LaunchPolicyViolation, match="CMD"):
        policy.check({}, ["/bin/sh"])
