"""The Confidential Space launcher's aggregator (issue 27) against a scripted Compute API: the VM
it inserts runs the aggregator image with the aggregate spec, and nothing of an evaluation, as
its ``tee-env-*`` metadata; its outcome is read in the pool's folder, where ``pooled.token``
means success (an evaluation's ``result.token`` does not) and ``failure.json`` failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.cloud import compute_v1

from sealbench.contract.pool import (
    AGGREGATE_ENV_NAMES,
    POOLED_TOKEN_OBJECT,
    AggregateSpec,
)
from sealbench.contract.result import FAILURE_OBJECT, TOKEN_OBJECT, FailureRecord
from sealbench.contract.spec import ENV_OVERRIDE_NAMES
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.launcher import ConfidentialSpaceLauncher, VmSettings, VmStoppedUnexpectedly
from sealbench.platforms.launcher import EnclaveRunFailed
from sealbench.platforms.storage import LocalBlobStore
from tests.unit.contract.test_pool import POOL_ANCHOR, POOL_RECIPIENT, POOL_RECIPIENT_KEY

AGGREGATOR = "sha256:" + "a9" * 32
REFERENCE = f"us-docker.pkg.dev/authority/sealbench/evaluation@{AGGREGATOR}"
EXIT_0 = 'level=INFO msg="TEE container launcher exiting" exit_code=0\n'
#: What a run spec has and an aggregator's never does (its dataset and model).
EVALUATION_ONLY = frozenset(ENV_OVERRIDE_NAMES) - frozenset(AGGREGATE_ENV_NAMES)


class Compute:
    """Records the inserted instance; answers ``get`` and the serial port from a script (the VM
    has stopped once the script is read), and records deletes."""

    def __init__(self, serial: str = "") -> None:
        self.inserted: list[compute_v1.Instance] = []
        self.deleted: list[str] = []
        self.serial = serial

    def insert_unary(self, **request: Any) -> compute_v1.Operation:
        self.inserted.append(request["instance_resource"])
        return compute_v1.Operation(name="op-insert", status=compute_v1.Operation.Status.DONE)

    def get(self, **request: Any) -> compute_v1.Instance:
        return compute_v1.Instance(name=request["instance"], status="TERMINATED")

    def get_serial_port_output(self, *, request: Any, timeout: float) -> Any:
        text, self.serial = self.serial, ""
        return compute_v1.SerialPortOutput(contents=text, start=request.start,
                                           next_=request.start + len(text.encode()))

    def delete_unary(self, **request: Any) -> compute_v1.Operation:
        self.deleted.append(request["instance"])
        return compute_v1.Operation(name="op-delete", status=compute_v1.Operation.Status.DONE)


def spec(folder: Path) -> AggregateSpec:
    return AggregateSpec(
        run_id="pool-7-3-abc",
        benchmark_id="7",
        metrics_version="wdbc/1",
        model_digest=sha256_digest(b"model"),
        recipient_public_key=POOL_RECIPIENT_KEY, recipient_digest=POOL_RECIPIENT,
        log_key=POOL_ANCHOR.log_key,
        inputs_uri=f"file://{folder}/pool-inputs.json",
        inputs_digest=sha256_digest(b"inputs"),
        result_uri=f"file://{folder}",
        sts_url="https://sts.googleapis.com/v1/token",
    )


def launcher(compute: Compute, folder: Path) -> ConfidentialSpaceLauncher:
    store = LocalBlobStore(folder)
    return ConfidentialSpaceLauncher(
        VmSettings(project="authority", zone="us-central1-a",
                   service_account="aggregator@authority.iam.gserviceaccount.com",
                   image_reference=REFERENCE),
        clients=(compute, None),  # type: ignore[arg-type]
        poll_interval=0.0,
        result_store=lambda uri: (store, ""),
    )


def metadata(instance: compute_v1.Instance) -> dict[str, str]:
    return {item.key: item.value for item in instance.metadata.items}


def test_the_aggregator_vm_carries_the_aggregate_spec_and_nothing_of_an_evaluation(
    tmp_path: Path,
) -> None:
    compute = Compute(EXIT_0)
    (tmp_path / POOLED_TOKEN_OBJECT).write_text("token")
    cs = launcher(compute, tmp_path)
    assert cs.aggregator_image_digest == AGGREGATOR  # built on the aggregator image's reference
    aggregate = spec(tmp_path)
    vm = cs.start_aggregator(aggregate)
    items = metadata(compute.inserted[0])
    assert items["tee-image-reference"] == REFERENCE
    env = {k.removeprefix("tee-env-"): v for k, v in items.items() if k.startswith("tee-env-")}
    assert env == aggregate.to_environ()
    assert env["SEALBENCH_POOL_INPUTS_URI"] == f"file://{tmp_path}/pool-inputs.json"
    assert not set(env) & EVALUATION_ONLY
    assert "tee-cmd" not in items  # the image's own command runs
    assert vm.wait(timeout=60).image_digest == AGGREGATOR
    assert compute.deleted == [vm.instance_name]


def test_an_evaluations_result_token_is_not_a_pool_success(tmp_path: Path) -> None:
    """Only ``pooled.token`` (the aggregator's last write) says the pool succeeded: a folder
    with a ``result.token`` and no release is a VM that stopped without its result."""
    (tmp_path / TOKEN_OBJECT).write_text("token")
    compute = Compute(EXIT_0)
    with pytest.raises(VmStoppedUnexpectedly, match="no result"):
        launcher(compute, tmp_path).start_aggregator(spec(tmp_path)).wait(timeout=60)


def test_the_aggregators_failure_record_is_the_pools_failure(tmp_path: Path) -> None:
    record = FailureRecord(run_id="pool-7-3-abc", step="key release", error="KeyReleaseDenied",
                           reason="the dataset owner's pool refused this workload", exit_code=13)
    (tmp_path / FAILURE_OBJECT).write_bytes(record.to_bytes())
    compute = Compute("step 2/4\n")  # the serial port says nothing of the outcome
    vm = launcher(compute, tmp_path).start_aggregator(spec(tmp_path))
    with pytest.raises(EnclaveRunFailed) as info:
        vm.wait(timeout=60)
    assert info.value.exit_code == 13 and "refused this workload" in info.value.reason
    assert compute.deleted == [vm.instance_name]
