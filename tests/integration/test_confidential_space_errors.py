"""What the Confidential Space launcher refuses and how it reports failures, against the mock's
Compute stand-in: a tag reference is refused before any API call; quota, rate-limit, permission
and not-found errors become sealbench errors whose hint says what to grant, request or change;
a run that fails, times out or loses access still has its VM deleted. The ``Instance`` the
launcher builds (machine type per TEE, image family, metadata) is checked field by field."""

from __future__ import annotations

import base64
import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials as OwnerCredentials

from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.contract.events import RunFailed, parse_event
from sealbench.contract.inputs import Rule
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.gcp.launcher import (
    CLOUD_PLATFORM_SCOPE,
    CS_DEBUG_IMAGE_FAMILY,
    CS_IMAGE_FAMILY,
    CapacityUnavailable,
    ComputeNotFound,
    ComputePermissionDenied,
    ConfidentialSpaceError,
    ConfidentialSpaceLauncher,
    ConfidentialSpaceVm,
    ImageReferenceError,
    QuotaExceeded,
    VmSettings,
    VmStoppedUnexpectedly,
    VmTimeout,
    WatchInterrupted,
    image_digest_of,
    instance_resource,
    make_compute_clients,
)
from sealbench.mocktee.compute import ComputeFault
from sealbench.mocktee.provision import OwnerSetup, provision_owner
from sealbench.mocktee.server import MockCloud
from sealbench.platforms.platform import load_platform

DIGEST = "sha256:" + "5e" * 32
REFERENCE = f"us-docker.pkg.dev/authority/sealbench/evaluation@{DIGEST}"
ZONE = "us-central1-a"
RUNNER = "sealbench-runner@hospital.iam.gserviceaccount.com"
POOL = "projects/200000000002/locations/global/workloadIdentityPools/no-pool/providers/attestation"


@dataclasses.dataclass(frozen=True)
class Setup:
    cloud: MockCloud
    hospital: OwnerSetup
    intruder: OwnerSetup


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with MockCloud(tmp_path_factory.mktemp("cs-errors") / "state") as cloud:
        hospital, intruder = (
            provision_owner(
                cloud.endpoints, email=f"{name}@example.org", project_id=name, project_number=n
            )
            for name, n in (("hospital", "200000000002"), ("intruder", "900000000009"))
        )
        cloud.artifacts.grant(REFERENCE, f"serviceAccount:{RUNNER}")  # the runner may pull
        yield Setup(cloud, hospital, intruder)


def spec(setup: Setup | None = None, run_id: str = "err-run") -> RunSpec:
    """A well-formed spec whose pool does not exist (STS refuses it): the enclave fails soon."""
    ep = setup.cloud.endpoints if setup else None
    location = {
        "uri": "gs://hospital-assets/x/",
        "kms_key": "projects/h/locations/global/keyRings/r/cryptoKeys/k",
        "pool_provider": POOL,
    }
    digest = "sha256:" + "11" * 32
    return RunSpec(
        run_id=run_id,
        benchmark_id="1",
        metrics_version="brats-2023-gli/1",
        dataset=AssetLocation(asset_id="ds", **location),
        model=AssetLocation(asset_id="m", **location),
        result_uri=f"gs://hospital-assets/results/{run_id}",
        recipient_public_key=base64.b64encode(bytes(32)).decode(),
        data_digest=digest,
        model_digest=digest,
        recipient_digest=digest,
        sts_url=ep.sts_token_url if ep else "http://127.0.0.1:9/v1/token",
        kms_endpoint=ep.kms if ep else "http://127.0.0.1:9",
        storage_endpoint=ep.storage if ep else "http://127.0.0.1:9",
    )


def settings(**changes: Any) -> VmSettings:
    base: dict[str, Any] = {
        "project": "hospital",
        "zone": ZONE,
        "service_account": RUNNER,
        "image_reference": REFERENCE,
    }
    return VmSettings(**{**base, **changes})


def launcher(setup: Setup, owner: OwnerSetup | None = None, **options: Any) -> Any:
    return ConfidentialSpaceLauncher(
        settings(**options),
        credentials=OwnerCredentials((owner or setup.hospital).access_token),
        api_endpoint=setup.cloud.endpoints.compute,
        poll_interval=0.05,
    )


def gone(setup: Setup, name: str) -> bool:
    instances, _ = make_compute_clients(
        OwnerCredentials(setup.hospital.access_token), setup.cloud.endpoints.compute
    )
    try:
        instances.get(project="hospital", zone=ZONE, instance=name, timeout=30)
    except gexc.NotFound:
        return True
    return False


# -- refused before any API call ---------------------------------------------------------------


@pytest.mark.parametrize(
    "reference",
    [
        "us-docker.pkg.dev/authority/sealbench/evaluation:latest",
        "us-docker.pkg.dev/authority/sealbench/evaluation",
        f"us-docker.pkg.dev/authority/sealbench/evaluation:v1@{DIGEST}",
        DIGEST,
        f"us-docker.pkg.dev/authority/sealbench/evaluation@sha256:{'5E' * 32}",
    ],
)
def test_image_by_tag_refused_before_any_api_call(reference: str) -> None:
    with pytest.raises(ImageReferenceError) as info:
        settings(image_reference=reference)
    assert "@sha256:" in info.value.hint
    with pytest.raises(ImageReferenceError):
        dataclasses.replace(settings(), image_reference=reference)
    assert image_digest_of(REFERENCE) == DIGEST


# -- the Instance the launcher inserts ----------------------------------------------------------


def test_sev_vm_is_n2d_with_live_migration_and_every_run_variable_as_tee_env() -> None:
    environ = spec().to_environ()
    rendered = load_platform("confidential-space").launch_environment(environ)
    instance = instance_resource(settings(), "vm-a", rendered)
    assert instance.machine_type == f"zones/{ZONE}/machineTypes/n2d-standard-2"
    assert instance.confidential_instance_config.confidential_instance_type == "SEV"
    assert instance.scheduling.on_host_maintenance == "MIGRATE"
    assert instance.shielded_instance_config.enable_secure_boot
    (disk,) = instance.disks
    assert disk.boot and disk.auto_delete
    assert disk.initialize_params.source_image == CS_IMAGE_FAMILY
    assert [(a.email, list(a.scopes)) for a in instance.service_accounts] == [
        (RUNNER, [CLOUD_PLATFORM_SCOPE])
    ]
    metadata = {item.key: item.value for item in instance.metadata.items}
    assert metadata.pop("tee-image-reference") == REFERENCE
    assert metadata.pop("tee-restart-policy") == "Never"
    assert metadata.pop("tee-container-log-redirect") == "true"
    assert metadata == {f"tee-env-{k}": v for k, v in environ.items()}
    with pytest.raises(ValueError, match="tee-image-reference"):
        instance_resource(settings(), "vm-a", {"tee-image-reference": "attacker/image@" + DIGEST})


def test_tdx_vm_is_c3_and_terminates_on_maintenance() -> None:
    instance = instance_resource(settings(tee="TDX"), "vm-b", {})
    assert instance.machine_type.endswith("/c3-standard-4")
    assert instance.confidential_instance_config.confidential_instance_type == "TDX"
    assert instance.scheduling.on_host_maintenance == "TERMINATE"


def test_debug_family_only_when_asked_for() -> None:
    assert (
        instance_resource(settings(debug=True), "vm-c", {}).disks[0].initialize_params.source_image
        == CS_DEBUG_IMAGE_FAMILY
    )
    assert CS_DEBUG_IMAGE_FAMILY.endswith("/family/confidential-space-debug")


# -- API errors, mapped ---------------------------------------------------------------------------


def test_cpu_quota_exceeded_names_the_quota_to_raise(setup: Setup) -> None:
    setup.cloud.compute.cpu_quota = 1
    try:
        with pytest.raises(QuotaExceeded) as info:
            launcher(setup).start(spec())
    finally:
        setup.cloud.compute.cpu_quota = 64
    assert "N2D_CPUS" in info.value.hint and "us-central1" in info.value.hint


def test_api_rate_limit_is_reported_as_quota_with_wait_hint(setup: Setup) -> None:
    setup.cloud.compute.fail_next("insert", ComputeFault.rate_limited())
    with pytest.raises(QuotaExceeded) as info:
        launcher(setup).start(spec())
    assert "rate limit" in info.value.hint


def test_quota_error_answered_synchronously_is_mapped_too(setup: Setup) -> None:
    fault = ComputeFault.quota_exceeded("C3_CPUS", 0, "europe-west4")
    setup.cloud.compute.fail_next("insert", fault)
    with pytest.raises(QuotaExceeded) as info:
        launcher(setup, tee="TDX").start(spec())
    assert "C3_CPUS" in info.value.hint


def test_caller_who_is_not_the_operator_is_told_what_to_grant(setup: Setup) -> None:
    with pytest.raises(ComputePermissionDenied) as info:
        launcher(setup, owner=setup.intruder).start(spec())
    assert "compute.instances.create" in str(info.value)
    assert "roles/compute.instanceAdmin.v1" in info.value.hint


def test_service_account_of_another_project_needs_service_account_user(setup: Setup) -> None:
    foreign = "runner@intruder.iam.gserviceaccount.com"
    with pytest.raises(ComputePermissionDenied) as info:
        launcher(setup, service_account=foreign).start(spec())
    assert "roles/iam.serviceAccountUser" in info.value.hint and foreign in info.value.hint


def test_unknown_project_is_not_found_with_api_enable_hint(setup: Setup) -> None:
    with pytest.raises(ComputeNotFound) as info:
        launcher(setup, project="no-such-project").start(spec())
    assert "gcloud services enable compute.googleapis.com" in info.value.hint


# -- failures after the VM exists: it is always deleted --------------------------------------------


def test_failed_workload_reports_the_enclave_reason_and_deletes_the_vm(setup: Setup) -> None:
    lines: list[str] = []
    vm = launcher(setup).start(spec(setup, "err-fail"), on_output=lines.append)
    with pytest.raises(EnclaveRunFailed) as info:
        vm.wait(timeout=120)
    events = [e for e in map(parse_event, lines) if isinstance(e, RunFailed)]
    assert events and events[-1].exit_code == info.value.exit_code
    assert info.value.exit_code != 1 and info.value.error_class is not None
    assert info.value.reason == events[-1].reason and info.value.code == events[-1].code
    # the operator's prose line is still there
    assert f"sealbench-enclave: {events[-1].reason} (exit {info.value.exit_code})" in lines
    assert gone(setup, vm.instance_name)


def test_lost_permission_while_watching_keeps_the_vm_and_says_how_to_delete_it(
    setup: Setup,
) -> None:
    """Issue 44: a VM is deleted for the run's own reasons only; a watch the Compute API
    refuses cannot tell whether the workload still works, so it keeps the VM (deleting it would
    kill a run that may finish and write its result) and names the command."""
    vm = launcher(setup).start(spec(setup, "err-perm"))
    resource = f"projects/hospital/zones/{ZONE}/instances/{vm.instance_name}"
    fault = ComputeFault.permission_denied("compute.instances.get", resource)
    setup.cloud.compute.fail_next("get", fault)
    with pytest.raises(WatchInterrupted) as lost:
        vm.wait(timeout=120)
    assert isinstance(lost.value.__cause__, ComputePermissionDenied)
    assert not lost.value.retryable  # a retry would start a second VM on the same workload
    assert f"gcloud compute instances delete {vm.instance_name}" in lost.value.hint
    assert not gone(setup, vm.instance_name)
    vm.kill()
    assert gone(setup, vm.instance_name)


def test_run_past_its_timeout_is_stopped_and_its_vm_deleted(setup: Setup) -> None:
    ticks = itertools.count(step=1000.0)
    slow = ConfidentialSpaceLauncher(
        settings(),
        credentials=OwnerCredentials(setup.hospital.access_token),
        api_endpoint=setup.cloud.endpoints.compute,
        poll_interval=0.0,
        clock=lambda: next(ticks),
    )
    vm = slow.start(spec(setup, "err-slow"))
    with pytest.raises(VmTimeout) as info:
        vm.wait(timeout=1500.0)
    assert "raise the run timeout" in info.value.hint
    assert gone(setup, vm.instance_name)


def test_exhausted_zone_suggests_another_zone(setup: Setup) -> None:
    fault = ComputeFault(503, "The zone does not have enough resources", "resourcePoolExhausted")
    setup.cloud.compute.fail_next("insert", dataclasses.replace(fault, error_info_reason=None))
    with pytest.raises(ConfidentialSpaceError):
        launcher(setup).start(spec())
    exhausted = ComputeFault(
        403,
        "A n2d-standard-2 VM instance is currently unavailable",
        "forbidden",
        "ZONE_RESOURCE_POOL_EXHAUSTED",
    )
    setup.cloud.compute.fail_next("insert", exhausted)
    with pytest.raises(CapacityUnavailable) as info:
        launcher(setup).start(spec())
    assert "another zone" in info.value.hint


# -- watching a VM, with a scripted Compute API ------------------------------------------------


class ScriptedInstances:
    """Answers ``get`` and ``getSerialPortOutput`` from a script, and records deletes."""

    def __init__(self, statuses: list[str], serial: list[tuple[int, str]]) -> None:
        self.statuses = statuses
        self.serial = serial
        self.deleted: list[str] = []

    def get(self, **request: Any) -> compute_v1.Instance:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return compute_v1.Instance(name=request["instance"], status=status)

    def get_serial_port_output(self, *, request: Any, timeout: float) -> Any:
        start, text = self.serial.pop(0) if self.serial else (request.start, "")
        start = max(start, request.start)
        return compute_v1.SerialPortOutput(
            contents=text, start=start, next_=start + len(text.encode())
        )

    def insert_unary(self, **request: Any) -> compute_v1.Operation:
        return compute_v1.Operation(name="op-insert", status=compute_v1.Operation.Status.RUNNING)

    def delete_unary(self, **request: Any) -> compute_v1.Operation:
        self.deleted.append(request["instance"])
        return compute_v1.Operation(name="op-delete", status=compute_v1.Operation.Status.DONE)


def scripted(
    instances: ScriptedInstances, on_output: Any = None, **options: Any
) -> ConfidentialSpaceVm:
    launcher = ConfidentialSpaceLauncher(
        settings(**options),
        clients=(instances, None),  # type: ignore[arg-type]
        poll_interval=0.0,
    )
    return ConfidentialSpaceVm(launcher, "vm-scripted", on_output)


def test_vm_that_stops_without_the_launcher_exit_line_is_reported(setup: Setup) -> None:
    instances = ScriptedInstances(["RUNNING", "TERMINATED"], [(0, "booting\n")])
    with pytest.raises(VmStoppedUnexpectedly):
        scripted(instances).wait(timeout=60)
    assert instances.deleted == ["vm-scripted"]


def test_lost_serial_output_is_said_and_lines_split_across_reads_are_joined(setup: Setup) -> None:
    lines: list[str] = []
    exit_line = "TEE container launcher exiting, exit code: 0 (workload finished successfully)\n"
    instances = ScriptedInstances(
        ["RUNNING", "RUNNING", "TERMINATED"],
        [(0, "step 1/7 half"), (500, "-line\n" + exit_line)],
    )
    scripted(instances, lines.append).wait(timeout=60)
    assert lines[0] == "[sealbench: 487 bytes of serial output lost]"
    assert lines[1] == "step 1/7 half-line"


def test_debug_vm_that_held_after_a_failed_workload_is_a_failure(setup: Setup) -> None:
    """Even without the enclave's event (it died before writing one), with the launcher's
    status and its last word."""
    serial = (
        "sealbench-enclave: the dataset owner's pool refused this workload: dbgstat\n"
        "workload finished with a non-zero return code\n"
        "TEE container launcher exiting, exit code: 4 (VM remains running)\n"
    )
    instances = ScriptedInstances(["RUNNING"], [(0, serial)])
    with pytest.raises(EnclaveRunFailed) as info:
        scripted(instances, debug=True).wait(timeout=60)
    assert info.value.exit_code == 1 and "dbgstat" in info.value.reason
    assert instances.deleted == ["vm-scripted"]  # the debug VM would run forever


def test_the_enclave_failure_comes_from_its_event_on_the_serial_port(setup: Setup) -> None:
    """The launcher reports exit 4 (debug hold); the enclave's exit code, failure code and
    refused rule come from its ``failed`` event, read as typed data among the serial lines."""
    event = RunFailed(exit_code=13, code="key_release_denied", rule=Rule.PRODUCTION_IMAGE,
                      reason="the dataset owner's pool refused this workload: dbgstat")
    serial = (
        f"{event.to_line()}\r\n"
        f"sealbench-enclave: {event.reason} (exit 13)\n"
        "workload finished with a non-zero return code\n"
        "TEE container launcher exiting, exit code: 4 (VM remains running)\n"
    )
    instances = ScriptedInstances(["RUNNING"], [(0, serial)])
    with pytest.raises(EnclaveRunFailed) as info:
        scripted(instances, debug=True).wait(timeout=60)
    failed = info.value
    assert (failed.exit_code, failed.code, failed.rule) == (13, "key_release_denied",
                                                            Rule.PRODUCTION_IMAGE)
    assert failed.reason == event.reason and failed.failure_class == "key_release_denied"


def test_keep_vm_keeps_the_vm_after_success(setup: Setup) -> None:
    done = "TEE container launcher exiting, exit code: 0 (workload finished successfully)\n"
    instances = ScriptedInstances(["TERMINATED"], [(0, done)])
    result = scripted(instances, keep_vm=True).wait(timeout=60)
    assert result.image_digest == DIGEST and instances.deleted == []


class StuckOperations:
    """A zone-operations client whose operations never finish."""

    def __init__(self) -> None:
        self.polls = 0

    def wait(self, **request: Any) -> compute_v1.Operation:
        self.polls += 1
        return compute_v1.Operation(name=request["operation"], status="RUNNING")


def test_insert_operation_that_never_finishes_times_out_and_cleans_up(setup: Setup) -> None:
    instances, operations = ScriptedInstances(["RUNNING"], []), StuckOperations()
    ticks = itertools.count(step=100.0)
    launcher = ConfidentialSpaceLauncher(
        settings(),
        clients=(instances, operations),  # type: ignore[arg-type]
        clock=lambda: next(ticks),
    )
    with pytest.raises(VmTimeout) as info:
        launcher.start(spec())
    assert "did not finish" in str(info.value) and operations.polls >= 1
    assert len(instances.deleted) == 1 and instances.deleted[0].startswith(
        "sealbench-eval-err-run-"
    )


# -- the outcome once the VM has stopped (issue 29) ------------------------------------------

NEW_EXIT = 'level=INFO msg="TEE container launcher exiting" exit_code={code}\n'


class GoneSerial(ScriptedInstances):
    """Google's behaviour: once the VM has stopped its serial port cannot be read."""

    def get_serial_port_output(self, *, request: Any, timeout: float) -> Any:
        if self.statuses[0] == "TERMINATED":
            raise gexc.BadRequest("the instance is not running")
        return super().get_serial_port_output(request=request, timeout=timeout)


def _with_result(instances: ScriptedInstances, tmp_path: Any, *objects: tuple[str, bytes],
                 **options: Any) -> ConfidentialSpaceVm:
    """A scripted VM whose run wrote ``objects`` at its result location (a local folder)."""
    from sealbench.platforms.storage import LocalBlobStore

    store = LocalBlobStore(tmp_path)
    for name, data in objects:
        store.put_bytes(f"results/run-x/{name}", data)
    launcher = ConfidentialSpaceLauncher(
        settings(**options), clients=(instances, None),  # type: ignore[arg-type]
        poll_interval=0.0, result_store=lambda uri: (store, "results/run-x/"))
    return ConfidentialSpaceVm(launcher, "vm-scripted", None, "gs://hospital-bucket/results/run-x")


@pytest.mark.parametrize("code", [0, 1])
def test_current_launcher_exit_line_is_read(setup: Setup, code: int) -> None:
    """go-tpm-tools' structured exit line since October 2024: a success is a success (not a
    VM that 'stopped unexpectedly'), a failure a failure."""
    instances = ScriptedInstances(["RUNNING", "TERMINATED"],
                                  [(0, "booting\n" + NEW_EXIT.format(code=code))])
    if code == 0:
        assert scripted(instances).wait(timeout=60).image_digest == DIGEST
    else:
        with pytest.raises(EnclaveRunFailed):
            scripted(instances).wait(timeout=60)


def test_debug_vm_with_the_current_exit_line_ends_the_wait(setup: Setup) -> None:
    """A debug VM stays RUNNING: its exit line alone ends the wait (it used to wait 6 hours)."""
    instances = ScriptedInstances(["RUNNING"], [(0, NEW_EXIT.format(code=4))])
    assert scripted(instances, debug=True).wait(timeout=60).image_digest == DIGEST
    assert instances.deleted == ["vm-scripted"]


def test_unreadable_serial_after_stop_is_judged_by_the_result(setup: Setup, tmp_path: Any
                                                              ) -> None:
    instances = GoneSerial(["RUNNING", "TERMINATED"], [(0, "step 3/7\n")])
    vm = _with_result(instances, tmp_path, ("result.token", b"t"), ("summary.json", b"{}"))
    assert vm.wait(timeout=60).image_digest == DIGEST


def test_failure_record_decides_over_a_silent_serial_port(setup: Setup, tmp_path: Any) -> None:
    from sealbench.contract.result import FailureRecord

    record = FailureRecord(run_id="run-x", step="key release", error="KeyReleaseDenied",
                           reason="the dataset owner's pool refused this workload", exit_code=11)
    instances = GoneSerial(["RUNNING", "TERMINATED"], [(0, "step 2/7\n")])
    vm = _with_result(instances, tmp_path, ("failure.json", record.to_bytes()))
    with pytest.raises(EnclaveRunFailed) as info:
        vm.wait(timeout=60)
    assert info.value.exit_code == 11 and "refused this workload" in info.value.reason


def test_stopped_vm_without_result_or_serial_is_never_an_unchecked_success(
    setup: Setup, tmp_path: Any
) -> None:
    """Before: a VM whose serial port could not be read once stopped came back as a success,
    failed runs included."""
    instances = GoneSerial(["RUNNING", "TERMINATED"], [(0, "booting\n")])
    with pytest.raises(VmStoppedUnexpectedly, match="without a result or failure record"):
        _with_result(instances, tmp_path).wait(timeout=60)
    no_store = GoneSerial(["RUNNING", "TERMINATED"], [(0, "booting\n")])
    with pytest.raises(VmStoppedUnexpectedly, match="outcome is unknown"):
        scripted(no_store).wait(timeout=60)


def test_launcher_success_without_a_result_is_refused(setup: Setup, tmp_path: Any) -> None:
    instances = ScriptedInstances(["RUNNING", "TERMINATED"], [(0, NEW_EXIT.format(code=0))])
    with pytest.raises(VmStoppedUnexpectedly, match="no result"):
        _with_result(instances, tmp_path).wait(timeout=60)
