"""The Docker launcher runs the benchmark's aggregator (issue 27) on the aggregator image: the
container gets the aggregate spec as its environment and the host folders the aggregator reads
and writes (the pool authorization's folder, the ``file://`` statistics and dataset locations
its inputs document names, the result folder, writable), and the image's own launch policy
decides what the operator may pass, so an evaluation's inputs never reach the aggregator image
and an aggregator's spec never reaches the evaluation image. Checked with a fake engine (the one
of ``test_docker_launcher_timing``) and the real mock launcher's policy check."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    POOL_INPUTS_OBJECT,
    AggregateSpec,
    PoolInput,
    PoolInputs,
)
from sealbench.contract.spec import ENV_OVERRIDE_NAMES, AssetLocation, RunSpec
from sealbench.crypto.digest import sha256_digest

pytest.importorskip("docker")

from sealbench.mocktee.docker_launcher import CONTAINER_LAUNCHER_DIR, DockerLauncher
from sealbench.mocktee.launcher import ImagePolicy, MockLauncher
from sealbench.platforms.launcher import LaunchError
from tests.pool_ledger import Ledger
from tests.unit.client.test_docker_launcher_timing import IMAGE_ID, FakeClock, FakeEngine
from tests.unit.contract.test_pool import POOL_ANCHOR, POOL_RECIPIENT, POOL_RECIPIENT_KEY

POLICY = "tee.launch_policy.allow_env_override"
AGGREGATOR_LABELS = {POLICY: ",".join(AGGREGATE_ENV_NAMES)}
EVALUATION_LABELS = {POLICY: ",".join(ENV_OVERRIDE_NAMES)}
KMS = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
PROVIDER = "projects/1/locations/global/workloadIdentityPools/pool/providers/prov"


@dataclass
class RecordingMockLauncher:
    """The mock launcher's one call, recorded: the environment and the image's policy."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def start_workload(self, digest: str, reference: str, environ: dict[str, str],
                       debug: bool, **options: Any) -> Any:
        self.calls.append({"digest": digest, "environ": environ, **options})
        return _Socket()


class _Socket:
    def stop(self) -> None:
        return None


class NeverMint:
    """A refused launch never gets as far as a token."""

    def mint(self, *args: Any) -> str:
        raise AssertionError("a token was minted for a launch the image's policy refuses")


def _engine(labels: dict[str, str]) -> FakeEngine:
    engine = FakeEngine(FakeClock())
    engine.images.labels = labels
    return engine


def _pool(tmp_path: Path) -> AggregateSpec:
    """A pool of two sites' results: one ran here (``file://`` statistics), one in the cloud;
    the authority's pool folder holds the inputs document and receives the release."""
    folder = tmp_path / "pools" / "pool-1"
    folder.mkdir(parents=True)
    site_a = tmp_path / "site-a" / "runs" / "run-a"
    site_a.mkdir(parents=True)
    inputs = PoolInputs(
        pool_id="pool-1", benchmark_id="7", metrics_version="wdbc/1", model_id="4",
        model_digest=sha256_digest(b"model"),
        inputs=(
            PoolInput(run_id="run-a", dataset=AssetLocation(
                asset_id="3", uri="gs://site-a/datasets/3/", kms_key=KMS, pool_provider=PROVIDER),
                data_digest=sha256_digest(b"a"), statistics_uri=site_a.as_uri(),
                commitment=sha256_digest(b"stats a")),
            PoolInput(run_id="run-b", dataset=AssetLocation(
                asset_id="5", uri="gs://site-b/datasets/5/", kms_key=KMS, pool_provider=PROVIDER),
                data_digest=sha256_digest(b"b"), statistics_uri="gs://site-b/results/run-b",
                commitment=sha256_digest(b"stats b")),
        ),
    )
    # what the client writes there: the registry's signed authorization of these inputs
    authorization = Ledger(recipient_key=POOL_RECIPIENT_KEY).authorize(inputs, rho=0.5)
    (folder / POOL_INPUTS_OBJECT).write_bytes(authorization.to_bytes())
    return AggregateSpec(
        run_id="pool-1", benchmark_id="7", metrics_version="wdbc/1",
        model_digest=sha256_digest(b"model"), recipient_public_key=POOL_RECIPIENT_KEY,
        recipient_digest=POOL_RECIPIENT, log_key=POOL_ANCHOR.log_key,
        inputs_uri=(folder / POOL_INPUTS_OBJECT).as_uri(),
        inputs_digest=authorization.inputs.digest(),
        result_uri=folder.as_uri())


def _evaluation(tmp_path: Path) -> RunSpec:
    location = {"kms_key": KMS, "pool_provider": PROVIDER}
    return RunSpec(
        run_id="run-1", benchmark_id="7", metrics_version="wdbc/1",
        dataset=AssetLocation(asset_id="3", uri="gs://site-a/datasets/3/", **location),
        model=AssetLocation(asset_id="4", uri="gs://lab/models/4/", **location),
        result_uri=(tmp_path / "results" / "run-1").as_uri(),
        recipient_public_key=base64.b64encode(bytes(range(32))).decode(),
        data_digest=sha256_digest(b"a"), model_digest=sha256_digest(b"model"),
        recipient_digest=sha256_digest(bytes(range(32))),
    )


def test_aggregator_gets_its_spec_and_exactly_the_folders_it_reads_and_writes(
    tmp_path: Path,
) -> None:
    engine, mock = _engine(AGGREGATOR_LABELS), RecordingMockLauncher()
    launcher = DockerLauncher(engine, mock, "sealbench-aggregate:latest")  # type: ignore[arg-type]
    assert launcher.aggregator_image_digest == IMAGE_ID
    spec = _pool(tmp_path)
    with launcher.start_aggregator(spec) as workload:
        workload.wait()
    [container] = engine.containers.created
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in container.options["mounts"]}
    pool, site_a = tmp_path / "pools" / "pool-1", tmp_path / "site-a" / "runs" / "run-a"
    assert {target: ro for target, (_, ro) in mounts.items()} == {
        CONTAINER_LAUNCHER_DIR: True,
        str(site_a): True,  # the site's sealed statistics, read-only
        str(pool): False,  # the release goes here; the inputs document lies in it
    }
    assert all(source == target for target, (source, _) in mounts.items()
               if target != CONTAINER_LAUNCHER_DIR)
    assert container.options["user"] == f"{os.getuid()}:{os.getgid()}"
    assert container.options["labels"] == {"sealbench.run-id": "pool-1"}
    [call] = mock.calls
    assert call["environ"] == spec.to_environ() and call["digest"] == IMAGE_ID
    assert call["policy"] == ImagePolicy.from_labels(AGGREGATOR_LABELS)


def test_aggregator_with_an_unreadable_inputs_document_mounts_only_its_pool(
    tmp_path: Path,
) -> None:
    """The aggregator refuses such a document itself; the launcher mounts nothing it names."""
    spec = _pool(tmp_path)
    (tmp_path / "pools" / "pool-1" / POOL_INPUTS_OBJECT).write_bytes(b"{not json")
    engine = _engine(AGGREGATOR_LABELS)
    launcher = DockerLauncher(engine, RecordingMockLauncher(), "agg")  # type: ignore[arg-type]
    with launcher.start_aggregator(spec) as workload:
        workload.wait()
    [container] = engine.containers.created
    assert [m["Target"] for m in container.options["mounts"]] == [
        CONTAINER_LAUNCHER_DIR, str(tmp_path / "pools" / "pool-1")]


def test_evaluation_inputs_refused_on_the_aggregator_image(tmp_path: Path) -> None:
    """An operator who starts an evaluation (dataset, model, recipient key) on the aggregator
    image is refused by that image's launch policy, as Confidential Space refuses it; the
    container is removed and no token is minted."""
    engine = _engine(AGGREGATOR_LABELS)
    launcher = DockerLauncher(engine, MockLauncher(NeverMint()), "agg")  # type: ignore[arg-type]
    with pytest.raises(LaunchError, match=r"SEALBENCH_DATASET_[A-Z_]+ is not allowed"):
        launcher.start(_evaluation(tmp_path))
    assert [c.removed for c in engine.containers.created] == [True]


def test_aggregator_spec_refused_on_the_evaluation_image(tmp_path: Path) -> None:
    """The evaluation image allows no pool variable: the aggregator's spec cannot be attested
    by it, so an evaluation image cannot pass for the aggregator."""
    engine = _engine(EVALUATION_LABELS)
    launcher = DockerLauncher(engine, MockLauncher(NeverMint()), "eval")  # type: ignore[arg-type]
    with pytest.raises(LaunchError, match=r"SEALBENCH_POOL_INPUTS_[A-Z]+ is not allowed"):
        launcher.start_aggregator(_pool(tmp_path))
    assert [c.removed for c in engine.containers.created] == [True]
