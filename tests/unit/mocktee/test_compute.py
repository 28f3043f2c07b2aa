"""The mock Compute API in-process: insert validation as GCP (and the mock's own rules) refuse,
status transitions, claims derived from the metadata as the Confidential Space launcher derives
them, the launch policy enforced at boot, serial-port paging, delete, quota and fault hooks.

The workload is a fake ``python`` (a script that ignores ``-m sealbench.enclave``), so these
tests need no enclave: it prints the claims of its launcher's token file to the serial port."""

from __future__ import annotations

import base64
import json
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sealbench.contract.pool import AGGREGATE_ENV_NAMES
from sealbench.enclave.__main__ import AGGREGATE_COMMAND
from sealbench.mocktee._compute_vm import SERIAL_BUFFER_BYTES, ImagePolicy, SerialPort
from sealbench.mocktee._http import Request, Response
from sealbench.mocktee.compute import ComputeFault, MockCompute, MockImageEntry
from sealbench.mocktee.identity import Identity
from sealbench.mocktee.image import aggregator_image_digest
from sealbench.mocktee.state import MockState
from sealbench.mocktee.verifier import MockVerifier
from tests.unit.mocktee.conftest import create_project_with_apis

PROJECT, NUMBER, ZONE = "hospital", "200000000002", "us-central1-a"
BASE = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}"
DIGEST = "sha256:" + "ab" * 32
REFERENCE = f"us-docker.pkg.dev/authority/bench/eval@{DIGEST}"
SA = f"runner@{PROJECT}.iam.gserviceaccount.com"
CS = "projects/confidential-space-images/global/images/family/confidential-space"

PRINT_CLAIMS = """
import base64, json, pathlib, sys
d = pathlib.Path(sys.argv[sys.argv.index("--launcher-dir") + 1])
p = (d / "attestation_verifier_claims_token").read_text().split(".")[1]
print("CLAIMS " + base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)).decode())
print("ARGV " + json.dumps(sys.argv[1:]))
print("oops on stderr", file=sys.stderr)
"""


def body(name: str = "vm-1", **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{ZONE}/machineTypes/n2d-standard-2",
        "confidentialInstanceConfig": {"confidentialInstanceType": "SEV"},
        "shieldedInstanceConfig": {"enableSecureBoot": True},
        "scheduling": {"onHostMaintenance": "MIGRATE"},
        "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"sourceImage": CS}}],
        "serviceAccounts": [
            {"email": SA, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
        ],
        "metadata": {
            "items": [
                {"key": "tee-image-reference", "value": REFERENCE},
                {"key": "tee-restart-policy", "value": "Never"},
                {"key": "tee-container-log-redirect", "value": "true"},
                {"key": "tee-env-SEALBENCH_RUN_ID", "value": "run-7"},
            ]
        },
    }
    doc.update(changes)
    return doc


def with_metadata(extra: dict[str, str], **changes: Any) -> dict[str, Any]:
    doc = body(**changes)
    doc["metadata"]["items"] += [{"key": k, "value": v} for k, v in extra.items()]
    return doc


class Api:
    """Calls :meth:`MockCompute.handle` the way the REST client does."""

    def __init__(self, compute: MockCompute, token: str) -> None:
        self.compute = compute
        self.token = token

    def call(
        self, method: str, path: str, doc: object = None, query: dict[str, str] | None = None
    ) -> Response:
        raw = json.dumps(doc).encode() if doc is not None else b""
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        return self.compute.handle(Request(method, path, path, query or {}, headers, raw))

    def json(self, method: str, path: str, doc: object = None, **query: str) -> Any:
        reply = self.call(method, path, doc, query)
        assert reply.status == 200, reply.body
        return json.loads(reply.body)

    def insert(self, doc: dict[str, Any]) -> Any:
        return self.json("POST", f"{BASE}/instances", doc)

    def status(self, name: str = "vm-1") -> str:
        return str(self.json("GET", f"{BASE}/instances/{name}")["status"])

    def serial(self, name: str = "vm-1", start: int = 0) -> Any:
        return self.json("GET", f"{BASE}/instances/{name}/serialPort", start=str(start), port="1")

    def wait_for(self, name: str = "vm-1", *, line: str = "TEE container launcher exiting") -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = str(self.serial(name)["contents"])
            if line in text:
                return text
            time.sleep(0.02)
        raise AssertionError(f"{line!r} never appeared on the serial port")

    def wait_terminated(self, name: str = "vm-1") -> str:
        text = self.wait_for(name)
        deadline = time.monotonic() + 10
        while self.status(name) != "TERMINATED":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return text


@pytest.fixture
def fake_python(tmp_path: Path) -> Callable[[str], str]:
    def make(program: str) -> str:
        script = tmp_path / f"fake-python-{abs(hash(program))}"
        script.write_text(f"#!{sys.executable}\n{program}")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return str(script)

    return make


@pytest.fixture
def owner(identity: Identity, state: MockState) -> str:
    create_project_with_apis(identity, state, PROJECT, NUMBER, "user:ops@hospital.example")
    create_project_with_apis(
        identity, state, "elsewhere", "900000000009", "user:someone@else.example"
    )
    return identity.issue("user:ops@hospital.example")[0]


@pytest.fixture
def make_api(
    identity: Identity, verifier: MockVerifier, owner: str, fake_python: Callable[[str], str]
) -> Iterator[Callable[..., Api]]:
    made: list[MockCompute] = []

    def build(program: str = PRINT_CLAIMS, **options: Any) -> Api:
        # these tests read a VM's whole serial log, also after it stopped (Google does not
        # keep it readable: test_serial_port_is_gone_once_the_vm_stopped)
        options.setdefault("serial_after_stop", True)
        # GPU tests need the project-wide GPU quota a new project lacks (test_compute_catalog)
        options.setdefault("gpus_all_regions", 8)
        compute = MockCompute(identity, verifier, python=fake_python(program), **options)
        made.append(compute)
        return Api(compute, owner)

    yield build
    for compute in made:
        compute.stop()


def claims_from(serial: str) -> dict[str, Any]:
    line = next(x for x in serial.splitlines() if x.startswith("CLAIMS "))
    claims: dict[str, Any] = json.loads(line.removeprefix("CLAIMS "))
    return claims


# -- the life of a VM -----------------------------------------------------------------------


def test_vm_runs_the_workload_then_terminates(make_api: Callable[..., Api]) -> None:
    api = make_api()
    op = api.insert(body())
    assert (op["kind"], op["status"], op["operationType"]) == (
        "compute#operation",
        "DONE",
        "insert",
    )
    assert op["targetLink"].endswith(f"/projects/{PROJECT}/zones/{ZONE}/instances/vm-1")
    assert "error" not in op
    serial = api.wait_terminated()
    assert api.compute.status_history(PROJECT, ZONE, "vm-1") == (
        "PROVISIONING",
        "STAGING",
        "RUNNING",
        "STOPPING",
        "TERMINATED",
    )
    assert "oops on stderr" in serial  # stderr is redirected too
    # the current launcher's structured exit line (go-tpm-tools since October 2024)
    assert serial.rstrip().endswith('level=INFO msg="TEE container launcher exiting" exit_code=0')
    assert "exit code: " not in serial
    for path in (f"{BASE}/operations/{op['name']}", f"{BASE}/operations/{op['name']}/wait"):
        method = "POST" if path.endswith("/wait") else "GET"
        assert api.json(method, path)["name"] == op["name"]


def test_claims_derived_from_metadata_like_the_real_launcher(make_api: Callable[..., Api]) -> None:
    api = make_api()
    doc = body(
        machineType=f"zones/{ZONE}/machineTypes/c3-standard-4",
        confidentialInstanceConfig={"confidentialInstanceType": "TDX"},
        scheduling={"onHostMaintenance": "TERMINATE"},
    )
    api.insert(doc)
    claims = claims_from(api.wait_terminated())
    instance = api.json("GET", f"{BASE}/instances/vm-1")
    container = claims["submods"]["container"]
    assert container["image_reference"] == REFERENCE
    assert container["image_digest"] == DIGEST
    assert container["env_override"] == {"SEALBENCH_RUN_ID": "run-7"}
    assert container["env"]["SEALBENCH_RUN_ID"] == "run-7"
    assert container["cmd_override"] is None
    assert container["restart_policy"] == "Never"
    assert claims["dbgstat"] == "disabled-since-boot"
    assert claims["submods"]["confidential_space"]["support_attributes"] == [
        "LATEST",
        "STABLE",
        "USABLE",
    ]
    assert claims["hwmodel"] == "GCP_INTEL_TDX"
    assert claims["google_service_accounts"] == [SA]
    assert claims["submods"]["gce"] == {
        "zone": ZONE,
        "project_id": PROJECT,
        "project_number": NUMBER,
        "instance_name": "vm-1",
        "instance_id": instance["id"],
    }
    assert claims["sub"].endswith(f"/projects/{PROJECT}/zones/{ZONE}/instances/vm-1")


def test_debug_family_is_attested_as_debug_and_the_vm_stays_up(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    doc = body()
    doc["disks"][0]["initializeParams"]["sourceImage"] = CS + "-debug"
    api.insert(doc)
    serial = api.wait_for()
    claims = claims_from(serial)
    assert claims["dbgstat"] == "enabled"
    assert "support_attributes" not in claims["submods"]["confidential_space"]
    assert 'msg="TEE container launcher exiting" exit_code=4' in serial
    time.sleep(0.2)
    assert api.status() == "RUNNING"


def test_env_override_outside_the_allow_list_is_refused_at_boot(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    api.insert(with_metadata({"tee-env-LD_PRELOAD": "/tmp/evil.so"}))
    serial = api.wait_terminated()
    assert "env var LD_PRELOAD is not allowed to be overridden on this image" in serial
    assert "workload started" not in serial and "CLAIMS" not in serial
    assert "exit_code=1" in serial


def test_cmd_override_refused_by_the_evaluation_image_policy(make_api: Callable[..., Api]) -> None:
    api = make_api()
    api.insert(with_metadata({"tee-cmd": '["--launcher-dir", "/tmp/forged"]'}))
    serial = api.wait_terminated()
    assert "CMD is not allowed to be overridden on this image" in serial
    assert "CLAIMS" not in serial


def test_cmd_override_attested_and_appended_when_the_image_allows_it(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(image_policy=ImagePolicy(allow_cmd_override=True))
    api.insert(with_metadata({"tee-cmd": '["--extra", "1"]'}))
    serial = api.wait_terminated()
    assert claims_from(serial)["submods"]["container"]["cmd_override"] == ["--extra", "1"]
    argv_line = next(x for x in serial.splitlines() if x.startswith("ARGV "))
    assert json.loads(argv_line.removeprefix("ARGV "))[-2:] == ["--extra", "1"]


def test_container_output_stays_off_the_serial_port_without_log_redirect(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    doc = body()
    doc["metadata"]["items"] = [
        i for i in doc["metadata"]["items"] if i["key"] != "tee-container-log-redirect"
    ]
    api.insert(doc)
    serial = api.wait_terminated()
    assert "workload started" in serial
    assert "CLAIMS" not in serial and "oops on stderr" not in serial


def test_log_redirect_refused_on_production_when_the_image_allows_it_only_for_debug(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(image_policy=ImagePolicy(log_redirect="debugonly"))
    api.insert(body())
    serial = api.wait_terminated()
    assert "log redirection is not allowed" in serial and "CLAIMS" not in serial


def test_failing_workload_reports_launcher_exit_1(make_api: Callable[..., Api]) -> None:
    api = make_api("import sys\nprint('sealbench-enclave: no key', file=sys.stderr)\nsys.exit(13)")
    api.insert(body())
    serial = api.wait_terminated()
    assert "sealbench-enclave: no key" in serial
    assert "workload finished with a non-zero return code" in serial
    assert 'msg="TEE container launcher exiting" exit_code=1' in serial


# -- the image catalogue: the aggregator image (issue 27) -----------------------------------

#: An aggregator's launch: its spec's variables (the launcher checks names, not values).
AGGREGATE_ENV = {
    "SEALBENCH_RUN_ID": "pool-7-3-abc",
    "SEALBENCH_POOL_INPUTS_URI": "file:///pools/pool-7-3-abc/pool-inputs.json",
    "SEALBENCH_POOL_INPUTS_DIGEST": "sha256:" + "11" * 32,
    "SEALBENCH_RESULT_URI": "file:///pools/pool-7-3-abc",
}
assert set(AGGREGATE_ENV) <= set(AGGREGATE_ENV_NAMES)


def aggregator_body(extra: dict[str, str] | None = None, digest: str | None = None
                    ) -> dict[str, Any]:
    """A VM of the mock aggregator image (``digest``: another) with the aggregate spec."""
    reference = f"us-docker.pkg.dev/authority/bench/eval@{digest or aggregator_image_digest()}"
    doc = body()
    doc["metadata"]["items"] = [
        {"key": "tee-image-reference", "value": reference},
        {"key": "tee-restart-policy", "value": "Never"},
        {"key": "tee-container-log-redirect", "value": "true"},
        *({"key": f"tee-env-{k}", "value": v} for k, v in AGGREGATE_ENV.items()),
        *({"key": k, "value": v} for k, v in (extra or {}).items()),
    ]
    return doc


def argv_from(serial: str) -> list[str]:
    line = next(x for x in serial.splitlines() if x.startswith("ARGV "))
    argv: list[str] = json.loads(line.removeprefix("ARGV "))
    return argv


def test_the_aggregator_image_runs_its_own_command_with_the_aggregate_spec(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    api.insert(aggregator_body())
    serial = api.wait_terminated()
    argv = argv_from(serial)
    # the image's command, python -m sealbench.enclave aggregate (no tee-cmd)
    assert argv[:3] == ["-m", "sealbench.enclave", AGGREGATE_COMMAND]
    assert argv[3] == "--launcher-dir" and len(argv) == 5
    container = claims_from(serial)["submods"]["container"]
    assert container["image_digest"] == aggregator_image_digest()
    assert container["env_override"] == AGGREGATE_ENV and container["cmd_override"] is None
    assert 'exit_code=0' in serial


@pytest.mark.parametrize(("digest", "extra", "refusal"), [
    # an evaluation input, or an operator's endpoint override, beside the aggregate spec
    (None, {"tee-env-SEALBENCH_DATASET_URI": "gs://h/datasets/d"}, "env var SEALBENCH_DATASET_URI"),
    (None, {"tee-env-HTTPS_PROXY": "http://127.0.0.1:9"}, "env var HTTPS_PROXY"),
    (None, {"tee-cmd": '["--launcher-dir", "/tmp/forged"]'}, "CMD is not allowed"),
    # the evaluation image does not take the aggregator's inputs either
    (DIGEST, {}, "env var SEALBENCH_POOL_INPUTS_DIGEST"),
])
def test_a_launch_outside_its_images_policy_is_refused_at_boot(
    make_api: Callable[..., Api], digest: str | None, extra: dict[str, str], refusal: str,
) -> None:
    api = make_api()
    api.insert(aggregator_body(extra, digest))
    serial = api.wait_terminated()
    assert refusal in serial
    assert "workload started" not in serial and "ARGV" not in serial
    assert 'msg="TEE container launcher exiting" exit_code=1' in serial


def test_the_image_catalogue_is_explicit(make_api: Callable[..., Api]) -> None:
    """Without the aggregator in the catalogue its digest is an evaluation image (it runs the
    evaluation's command under the evaluation's policy, which refuses the aggregate spec); an
    entry of another digest runs that entry's command."""
    api = make_api(images={})
    api.insert(aggregator_body())
    assert "env var SEALBENCH_POOL_INPUTS_DIGEST" in api.wait_terminated()
    other = make_api(images={DIGEST: MockImageEntry(("serve",), ImagePolicy())})
    other.insert(body())
    assert argv_from(other.wait_terminated())[:3] == ["-m", "sealbench.enclave", "serve"]


# -- what insert refuses --------------------------------------------------------------------

BAD_INSERTS: dict[str, tuple[dict[str, Any], int, str]] = {
    "tag_reference": (
        {"metadata": {"items": [{"key": "tee-image-reference", "value": "repo/eval:latest"}]}},
        400,
        "by digest",
    ),
    "no_image_reference": ({"metadata": {"items": []}}, 400, "by digest"),
    "duplicate_metadata_key": (
        {
            "metadata": {
                "items": [{"key": "tee-image-reference", "value": REFERENCE}] * 2,
            }
        },
        400,
        "Duplicate metadata key",
    ),
    "no_secure_boot": ({"shieldedInstanceConfig": {}}, 400, "Secure Boot"),
    "not_confidential": ({"confidentialInstanceConfig": {}}, 400, "only Confidential VMs"),
    "sev_on_c3": (
        {"machineType": f"zones/{ZONE}/machineTypes/c3-standard-4"},
        400,
        "not supported for machine type",
    ),
    "tdx_with_live_migration": (
        {
            "machineType": f"zones/{ZONE}/machineTypes/c3-standard-4",
            "confidentialInstanceConfig": {"confidentialInstanceType": "TDX"},
        },
        400,
        "onHostMaintenance to TERMINATE",
    ),
    "machine_type_in_another_zone": (
        {"machineType": "zones/europe-west4-a/machineTypes/n2d-standard-2"},
        400,
        "machineType",
    ),
    "plain_debian_image": (
        {
            "disks": [
                {
                    "boot": True,
                    "initializeParams": {
                        "sourceImage": "projects/debian-cloud/global/images/family/debian-12"
                    },
                }
            ]
        },
        404,
        "was not found",
    ),
    "service_account_of_another_project": (
        {"serviceAccounts": [{"email": "sa@elsewhere.iam.gserviceaccount.com"}]},
        400,
        "iam.serviceAccountUser",
    ),
    "bad_name": ({"name": "VM_1"}, 400, "resource.name"),
}


@pytest.mark.parametrize("case", sorted(BAD_INSERTS))
def test_invalid_insert_refused_before_any_vm_exists(
    make_api: Callable[..., Api], case: str
) -> None:
    changes, code, text = BAD_INSERTS[case]
    api = make_api()
    reply = api.call("POST", f"{BASE}/instances", body(**changes))
    assert reply.status == code
    error = json.loads(reply.body)["error"]
    assert text in error["message"] and error["errors"][0]["reason"]
    assert api.call("GET", f"{BASE}/instances/{changes.get('name', 'vm-1')}").status == 404


def test_second_instance_with_the_same_name_conflicts(make_api: Callable[..., Api]) -> None:
    api = make_api()
    api.insert(body())
    assert api.call("POST", f"{BASE}/instances", body()).status == 409


def test_caller_without_owner_token_is_refused(
    make_api: Callable[..., Api], identity: Identity
) -> None:
    api = make_api()
    api.token = ""
    assert api.call("POST", f"{BASE}/instances", body()).status == 401
    api.token = identity.issue("user:someone@else.example")[0]
    reply = api.call("POST", f"{BASE}/instances", body())
    assert reply.status == 403
    assert "compute.instances.create" in json.loads(reply.body)["error"]["message"]
    assert api.call("GET", "/compute/v1/projects/nope/zones/z/instances/x").status == 404


# -- serial port, delete, quota, faults ------------------------------------------------------


def test_serial_output_pages_by_offset(make_api: Callable[..., Api]) -> None:
    api = make_api()
    api.insert(body())
    api.wait_terminated()
    whole = api.serial()
    assert whole["start"] == "0" and int(whole["next"]) == len(whole["contents"].encode())
    middle = 20
    tail = api.serial(start=middle)
    assert tail["start"] == str(middle) and tail["next"] == whole["next"]
    assert tail["contents"] == whole["contents"].encode()[middle:].decode()
    beyond = api.serial(start=int(whole["next"]))
    assert beyond["contents"] == "" and beyond["next"] == whole["next"]
    other_port = api.json("GET", f"{BASE}/instances/vm-1/serialPort", port="2", start="0")
    assert other_port["contents"] == ""
    assert api.call("GET", f"{BASE}/instances/vm-1/serialPort", query={"start": "x"}).status == 400


def test_serial_port_keeps_only_the_last_mebibyte() -> None:
    port = SerialPort()
    line = "x" * 1023
    for _ in range(SERIAL_BUFFER_BYTES // 1024 + 10):
        port.write_line(line)
    contents, start, end = port.read(0)
    assert start == 10 * 1024 and end - start == SERIAL_BUFFER_BYTES
    assert len(contents) == SERIAL_BUFFER_BYTES


def test_delete_kills_a_running_workload_and_forgets_the_vm(
    make_api: Callable[..., Api],
) -> None:
    api = make_api("import time\nprint('started', flush=True)\ntime.sleep(120)")
    api.insert(body())
    api.wait_for(line="started")
    op = api.json("DELETE", f"{BASE}/instances/vm-1")
    assert (op["operationType"], op["status"]) == ("delete", "DONE")
    assert api.call("GET", f"{BASE}/instances/vm-1").status == 404
    assert api.call("GET", f"{BASE}/instances/vm-1/serialPort").status == 404
    assert api.call("DELETE", f"{BASE}/instances/vm-1").status == 404
    started = time.monotonic()
    api.compute.stop()  # joins the VM thread: the killed workload has been reaped
    assert time.monotonic() - started < 10


def test_cpu_quota_exceeded_fails_the_insert_operation(make_api: Callable[..., Api]) -> None:
    api = make_api("import time\ntime.sleep(120)", cpu_quota=2)
    assert "error" not in api.insert(body("vm-1"))
    op = api.insert(body("vm-2"))
    assert op["status"] == "DONE" and op["httpErrorStatusCode"] == 403
    assert op["error"]["errors"][0]["code"] == "QUOTA_EXCEEDED"
    assert (
        "Quota 'N2D_CPUS' exceeded.  Limit: 2.0 in region us-central1."
        in (op["error"]["errors"][0]["message"])
    )
    assert api.call("GET", f"{BASE}/instances/vm-2").status == 404


def test_fault_hook_answers_the_next_call_only(make_api: Callable[..., Api]) -> None:
    api = make_api()
    api.compute.fail_next("insert", ComputeFault.rate_limited())
    reply = api.call("POST", f"{BASE}/instances", body())
    assert reply.status == 429
    error = json.loads(reply.body)["error"]
    assert error["details"][0]["reason"] == "RATE_LIMIT_EXCEEDED"
    assert "error" not in api.insert(body())


def test_workload_token_is_signed_by_the_mock_issuer(
    make_api: Callable[..., Api], verifier: MockVerifier
) -> None:
    program = (
        "import pathlib, sys\n"
        "d = pathlib.Path(sys.argv[sys.argv.index('--launcher-dir') + 1])\n"
        "print('TOKEN ' + (d / 'attestation_verifier_claims_token').read_text())\n"
    )
    api = make_api(program)
    api.insert(body())
    serial = api.wait_terminated()
    token = next(x for x in serial.splitlines() if x.startswith("TOKEN ")).removeprefix("TOKEN ")
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header["kid"] == verifier.kid


def test_serial_port_is_gone_once_the_vm_stopped(make_api: Callable[..., Api]) -> None:
    """As on Google Cloud: a stopped VM's serial output cannot be read (a client must judge the
    run by its result, not by a last line it may never see)."""
    api = make_api(serial_after_stop=False)
    api.insert(body())
    deadline = time.monotonic() + 30
    while api.status() != "TERMINATED":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    reply = api.call("GET", f"{BASE}/instances/vm-1/serialPort", query={"port": "1"})
    assert reply.status == 400 and b"not running" in reply.body
