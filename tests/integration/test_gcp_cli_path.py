"""Every role on Google Cloud through the ``sealbench`` CLI, with ``--cloud gcp`` profiles whose
only difference from production is where the APIs are (``profile add --api-endpoint NAME=URL``,
pointing at the mock's Google-compatible endpoints) and whose credentials come from Application
Default Credentials (an ``external_account_authorized_user`` file, as ``gcloud auth
application-default login --login-config`` writes, refreshed at the mock's token endpoint). The
same google-cloud-kms, google-cloud-storage, google-cloud-compute and IAM REST code runs as
against Google, and no ``InsecureMock*`` class is constructed in this process (only, once the
result token signed by the stand-in's verifier is read, the stand-in's own platform, to read it):

    seal → policy sync → run (Compute stand-in) → result fetch → open → submit → verified

then the failures a real project produces (permission denied, API disabled, key destroyed,
bucket missing, quota exceeded), each a one-line error naming the resource and the gcloud fix,
with the documented exit code, and each detected by ``sealbench doctor``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner, Result

import sealbench.client
import sealbench.platforms
from sealbench.client.cli import app
from sealbench.client.registry.local import create_accounts, registry_process
from sealbench.gcp.failures import bucket_create_command
from sealbench.mocktee.provision import enable_services
from sealbench.mocktee.server import MockCloud, MockEndpoints

ACCOUNTS = {
    "admin": ("admin@gcp.e2e.example", True),
    "authority": ("authority@gcp.e2e.example", False),
    "hospital": ("it@hospital.gcp.e2e.example", False),
    "lab": ("ml@lab.gcp.e2e.example", False),
}
ZONE = "us-central1-a"
CLOUD_EXIT, CONFIG_EXIT = 7, 3


def tiny_onnx(path: Path, seed: int) -> Path:
    weight = np.random.default_rng(seed).standard_normal((4, 4, 1, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, "D", "H", "W"])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def _post(url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read() or b"{}")
        return answer


@dataclass
class Owner:
    """An owner's Google Cloud project (created out of band, as a real one is) and its ADC."""

    email: str
    project: str
    number: str
    adc: Path

    @property
    def runner(self) -> str:
        return f"sealbench-runner@{self.project}.iam.gserviceaccount.com"

    @property
    def bucket(self) -> str:
        return f"{self.project}-sealbench"

    @property
    def key(self) -> str:
        return f"projects/{self.project}/locations/global/keyRings/sealbench/cryptoKeys/assets"


@dataclass
class World:
    mock: MockCloud
    tmp: Path
    url: str
    tokens: dict[str, str]
    #: forbids the stand-in's own attestation platform until a condition is rendered for it
    stand_in_platform: pytest.MonkeyPatch
    runner: CliRunner = field(default_factory=CliRunner)
    ids: dict[str, int] = field(default_factory=dict)
    owners: dict[str, Owner] = field(default_factory=dict)

    @property
    def ep(self) -> MockEndpoints:
        return self.mock.endpoints

    def cli(self, profile: str, *args: str) -> Result:
        """``sealbench ARGS --profile PROFILE``, with that owner's ADC (if it has a project)."""
        owner = self.owners.get(profile)
        env = {"GOOGLE_APPLICATION_CREDENTIALS": str(owner.adc) if owner else None}
        return self.runner.invoke(app, [*args, "--profile", profile], env=env)

    def owner_token(self, owner: Owner) -> str:
        answer = _post(f"{self.ep.control}/mock/v1/ownerTokens",
                       {"principal": f"user:{owner.email}"})
        return str(answer["access_token"])

    def new_owner(self, profile: str, account: str, project: str, number: str,
                  *, runner_account: bool = False, give_number: bool = True) -> Owner:
        """A Google Cloud project with ``account``'s email as owner, its ADC file and a
        ``--cloud gcp`` profile for it; with ``runner_account``, the VMs' service account and
        its project roles, made as an IT team does with gcloud."""
        email = ACCOUNTS[account][0]
        ep = self.ep
        _post(f"{ep.control}/mock/v1/projects",
              {"projectId": project, "projectNumber": number, "owner": f"user:{email}"})
        owner_token = _post(f"{ep.control}/mock/v1/ownerTokens", {"principal": f"user:{email}"})
        enable_services(ep, project, str(owner_token["access_token"]))  # gcloud services enable
        refresh = _post(f"{ep.control}/mock/v1/refreshTokens", {"principal": f"user:{email}"})
        adc = self.tmp / f"adc-{profile}.json"
        adc.write_text(json.dumps({
            "type": "external_account_authorized_user",
            "audience": "//iam.googleapis.com/locations/global/workforcePools/tests/providers/x",
            "client_id": "sealbench-tests.example", "client_secret": "not-a-secret",
            "refresh_token": refresh["refresh_token"], "token_url": f"{ep.apis}/token",
        }))
        owner = Owner(email, project, number, adc)
        if runner_account:
            token = self.owner_token(owner)
            _post(f"{ep.iam}/v1/projects/{project}/serviceAccounts",
                  {"accountId": "sealbench-runner"}, token)
            policy = _post(f"{ep.apis}/v1/projects/{project}:getIamPolicy", {}, token)
            policy["bindings"].extend(
                {"role": role, "members": [f"serviceAccount:{owner.runner}"]}
                for role in ("roles/confidentialcomputing.workloadUser",
                             "roles/logging.logWriter"))
            _post(f"{ep.apis}/v1/projects/{project}:setIamPolicy", {"policy": policy}, token)
        endpoints = {
            "kms": ep.kms, "storage": ep.storage, "iam": ep.iam, "sts": ep.sts_token_url,
            "compute": ep.compute, "serviceusage": ep.apis, "cloudresourcemanager": ep.apis,
            "attestation": ep.issuer,
        }
        added = self.runner.invoke(app, [
            "profile", "add", profile, "--server", self.url, "--token", self.tokens[account],
            "--trust-on-first-use",
            "--cloud", "gcp", "--project", project,
            *(("--project-number", number) if give_number else ()),
            "--zone", ZONE, "--service-account", owner.runner, "--bucket-location", "EU",
            *(f"--api-endpoint={name}={url}" for name, url in endpoints.items()),
        ], env={"GOOGLE_APPLICATION_CREDENTIALS": str(adc)})
        assert added.exit_code == 0, added.output
        self.owners[profile] = owner
        return owner

    def inject(self, **fault: object) -> None:
        _post(f"{self.ep.control}/mock/v1/faults", dict(fault))

    def register_model(self, profile: str, seed: int) -> tuple[int, Path]:
        onnx = tiny_onnx(self.tmp / f"model-{profile}-{seed}.onnx", seed)
        registered = ok(self.cli(profile, "model", "register", str(onnx), "--name",
                                 f"m-{profile}-{seed}", "--benchmark", str(self.ids["b"]),
                                 "--json"))
        return int(json.loads(registered.stdout)["id"]), onnx


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def one_line(result: Result) -> tuple[str, str]:
    """The boundary's ``error:`` line and ``what to do:`` line, each one line."""
    lines = [" ".join(line.split()) for line in result.output.splitlines() if line.strip()]
    error = [line for line in lines if line.startswith("error:")]
    fix = [line for line in lines if line.startswith("what to do:")]
    assert len(error) == 1 and len(fix) == 1, result.output
    return error[0], fix[0]


def doctor(world: World, profile: str, *extra: str) -> tuple[int, dict[str, dict[str, Any]]]:
    checked = world.cli(profile, "doctor", "--json", *extra)
    return checked.exit_code, {c["check"]: c for c in json.loads(checked.stdout)}


def _mock_classes() -> list[type]:
    """Every ``InsecureMock*`` class of sealbench the client could reach: the client and the
    cloud adapters, the mock's owner cloud (what the mock platform hands out) and every
    installed TEE platform (the stand-in's own, ``insecure-mock``)."""
    from importlib.metadata import entry_points

    found: dict[str, type] = {}
    names = ["sealbench.mocktee.owner_cloud"]
    for package in (sealbench.client, sealbench.platforms):
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
                  if not m.name.endswith(".__main__")]  # importing __main__ runs the CLI
    for module_name in names:
        loaded = importlib.import_module(module_name)
        for name, value in vars(loaded).items():
            if name.startswith("InsecureMock") and inspect.isclass(value):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    for point in entry_points(group="sealbench.platforms"):
        value = point.load()
        if inspect.isclass(value) and value.__name__.startswith("InsecureMock"):
            found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("gcp-cli")
    patch = pytest.MonkeyPatch()
    patch.setenv("SEALBENCH_CONFIG_DIR", str(tmp / "home"))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER", "SEALBENCH_TOKEN",
                 "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"):
        patch.delenv(name, raising=False)
    classes = _mock_classes()
    assert any(c.__name__ == "InsecureMockOwnerCloud" for c in classes)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("an InsecureMock* class was constructed on the Google Cloud path")

    stand_in = pytest.MonkeyPatch()
    try:
        with MockCloud(tmp / "mock") as mock:
            tokens = create_accounts(tmp / "registry", ACCOUNTS)
            with registry_process(tmp / "registry", mock.endpoints, tmp / "server.log") as url:
                world = World(mock, tmp, url, tokens, stand_in)
                for name in ("admin", "authority"):
                    ok(world.runner.invoke(app, ["profile", "add", name, "--server", url,
                                                 "--token", tokens[name],
                                                 "--trust-on-first-use"]))
                # From here on, the path must not construct any. Only ``__init__`` is patched:
                # every call ``cls(...)`` runs it, and patching ``__new__`` cannot be undone
                # (CPython keeps the class's tp_new slot pointing at the removed override, so
                # later constructions in this session fail with "object.__new__() takes exactly
                # one argument").
                for cls in classes:
                    where = (world.stand_in_platform
                             if cls.__module__ == "sealbench.mocktee.platform" else patch)
                    where.setattr(cls, "__init__", forbidden)
                world.new_owner("hospital", "hospital", "hospital-gcp", "210000000021",
                                runner_account=True)
                # the lab's profile looks its project number up (Resource Manager, its ADC)
                world.new_owner("lab", "lab", "lab-gcp", "310000000031", give_number=False)
                yield world
    finally:
        stand_in.undo()
        patch.undo()


@pytest.fixture(scope="module")
def benchmark(world: World) -> int:
    """The authority's benchmark (pinning the evaluation image by digest), approved."""
    created = ok(world.cli("authority", "benchmark", "create", "--tee", "mock", "--definition",
                           "brats-small", "--json"))
    world.ids["b"] = json.loads(created.stdout)["id"]
    ok(world.cli("admin", "benchmark", "approve", str(world.ids["b"])))
    return world.ids["b"]


@dataclass(frozen=True)
class Ready:
    sealed_model: str
    coordinates: dict[str, Any]
    synced: dict[str, Any]
    doctor: tuple[int, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class Flow:
    ready: Ready
    ran: str
    fetched: str
    opened: str
    submitted: str
    results: list[dict[str, Any]]


@pytest.fixture(scope="module")
def ready(world: World, benchmark: int) -> Ready:
    """Every role's setup on Google Cloud profiles, once per module: seal, associate, approve,
    policy sync, doctor."""
    cli, tmp, ids = world.cli, world.tmp, world.ids
    b = str(benchmark)
    # model owner: seal creates the project's key ring, key and bucket, then uses them
    mid, onnx = world.register_model("lab", 0)
    ids["m"] = mid
    sealed = ok(cli("lab", "model", "seal", str(onnx), "--model", str(mid))).output
    ok(cli("lab", "model", "associate", "--model", str(mid), "--benchmark", b))
    # hospital: its dataset, sealed into its own project
    ok(cli("hospital", "keys", "init"))
    raw, prepared = tmp / "raw", tmp / "prepared"
    ok(cli("hospital", "dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b))
    ok(cli("hospital", "dataset", "prepare", str(raw), str(prepared), "--benchmark", b))
    ids["d"] = json.loads(ok(cli("hospital", "dataset", "register", str(prepared), "--name",
                                 "h-gcp", "--benchmark", b, "--json")).stdout)["id"]
    d = str(ids["d"])
    hospital = world.owners["hospital"]
    coords = json.loads(ok(cli("hospital", "dataset", "seal", str(prepared), "--dataset", d,
                               "--json")).stdout)["coordinates"]
    ok(cli("hospital", "dataset", "associate", "--dataset", d, "--benchmark", b))
    for kind, asset in (("--dataset", d), ("--model", str(mid))):
        ok(cli("authority", "association", "approve", "--benchmark", b, kind, asset))
    # Up to here nothing constructed any InsecureMock* class. A key-release condition is
    # rendered by the platform whose verifier attests the workloads (Platform.
    # key_release_condition, found by issuer): these profiles trust the stand-in's verifier, so
    # only the stand-in's own platform may now be constructed, to render the condition (with
    # its endpoints pinned) and read the result token; the owner-cloud and launcher mocks stay
    # forbidden. With Google's verifier the lookup constructs Confidential Space's alone.
    world.stand_in_platform.undo()
    synced = json.loads(ok(cli("hospital", "policy", "sync", "--dataset", d, "--result-bucket",
                               hospital.bucket, "--json")).stdout)
    ok(cli("lab", "policy", "sync", "--model", str(mid)))
    return Ready(sealed, coords, synced, doctor(world, "hospital", "--benchmark", b))


@pytest.fixture(scope="module")
def flow(world: World, ready: Ready) -> Flow:
    """The run on the Compute stand-in, in the hospital's project, and what follows it."""
    cli, ids = world.cli, world.ids
    b, d, mid = str(ids["b"]), str(ids["d"]), str(ids["m"])
    ran = ok(cli("hospital", "run", "--benchmark", b, "--dataset", d, "--model", mid,
                 "--tee", "confidential-space")).output
    run_id = json.loads(ok(cli("hospital", "result", "ls", "--json")).stdout)[-1]["run_id"]
    fetched = ok(cli("hospital", "result", "fetch", run_id)).output
    return Flow(
        ready=ready,
        ran=ran,
        fetched=fetched,
        opened=ok(cli("hospital", "result", "open", run_id)).output,
        submitted=ok(cli("hospital", "result", "submit", run_id)).output,
        results=json.loads(ok(cli("authority", "benchmark", "results", b, "--json")).stdout),
    )


def test_every_role_on_google_cloud_seal_sync_run_fetch_open_submit_verified(
    world: World, flow: Flow
) -> None:
    lab, hospital, ids, ready = world.owners["lab"], world.owners["hospital"], world.ids, flow.ready
    shown = json.loads(ok(world.runner.invoke(app, ["profile", "show", "lab", "--json"])).stdout)
    assert shown["pool provider"].startswith(f"projects/{lab.number}/")  # looked up
    assert f"gs://{lab.bucket}/models/{ids['m']}" in ready.sealed_model
    assert lab.key in ready.sealed_model
    assert ready.coordinates["storage_uri"] == f"gs://{hospital.bucket}/datasets/{ids['d']}"
    assert ready.coordinates["kms_key_name"] == hospital.key
    assert ready.coordinates["wip_provider"].startswith(f"projects/{hospital.number}/")
    assert ready.synced["pool_created"] and len(ready.synced["workloads"]) == 1
    code, checks = ready.doctor
    assert code == 0 and all(c["ok"] for c in checks.values()), checks
    assert {"APIs enabled", "runner service account", "CPU quota", "image reference"} <= set(
        checks
    )
    assert "succeeded" in flow.ran
    assert "result in" in flow.fetched
    assert "BraTS-GLI-" in flow.opened
    assert "attestation verified" in flow.submitted
    assert [(r["dataset_id"], r["model_id"]) for r in flow.results] == [(ids["d"], ids["m"])]


def _sealed_owner(
    world: World, profile: str, project: str, number: str, seed: int
) -> tuple[Owner, int]:
    """A model owner with a fresh project, one model sealed into it."""
    owner = world.new_owner(profile, "lab", project, number)
    mid, onnx = world.register_model(profile, seed)
    ok(world.cli(profile, "model", "seal", str(onnx), "--model", str(mid)))
    return owner, mid


def test_permission_denied_names_the_bucket_and_the_grant(world: World, benchmark: int) -> None:
    owner, _ = _sealed_owner(world, "denied", "denied-gcp", "410000000041", 11)
    world.inject(fault="permission-denied", project=owner.project, principal=f"user:{owner.email}")
    mid, onnx = world.register_model("denied", 12)
    failed = world.cli("denied", "model", "seal", str(onnx), "--model", str(mid))
    assert failed.exit_code == CLOUD_EXIT, failed.output
    error, fix = one_line(failed)
    assert f"permission denied on bucket gs://{owner.bucket}" in error
    assert f"add-iam-policy-binding gs://{owner.bucket}" in fix
    code, checks = doctor(world, "denied")
    assert code == CLOUD_EXIT
    assert "permission denied" in checks["KMS key"]["detail"].lower()
    assert f"add-iam-policy-binding {owner.key}" in checks["KMS key"]["fix"]
    assert not checks["bucket"]["ok"]
    assert f"add-iam-policy-binding gs://{owner.bucket}" in checks["bucket"]["fix"]


def test_api_disabled_names_the_api_and_enabling_it_fixes_the_seal(
    world: World, benchmark: int
) -> None:
    owner, _ = _sealed_owner(world, "disabled", "disabled-gcp", "510000000051", 21)
    world.inject(fault="api-disabled", project=owner.project, service="cloudkms.googleapis.com")
    mid, onnx = world.register_model("disabled", 22)
    failed = world.cli("disabled", "model", "seal", str(onnx), "--model", str(mid))
    assert failed.exit_code == CLOUD_EXIT, failed.output
    error, fix = one_line(failed)
    assert f"cloudkms.googleapis.com API is disabled in project {owner.project}" in error
    assert fix == ("what to do: gcloud services enable cloudkms.googleapis.com --project "
                   f"{owner.project}")
    code, checks = doctor(world, "disabled")
    assert code == CLOUD_EXIT
    assert not checks["APIs enabled"]["ok"] and "cloudkms" in checks["APIs enabled"]["fix"]
    assert not checks["KMS key"]["ok"]
    # what the fix says, done through Service Usage, is enough
    _post(f"{world.ep.apis}/v1/projects/{owner.project}/services/cloudkms.googleapis.com:enable",
          {}, world.owner_token(owner))
    ok(world.cli("disabled", "model", "seal", str(onnx), "--model", str(mid)))


def test_destroyed_key_names_the_key_and_a_new_primary_version(
    world: World, benchmark: int
) -> None:
    owner, _ = _sealed_owner(world, "destroyed", "destroyed-gcp", "610000000061", 31)
    world.inject(fault="key-destroyed", key=owner.key)
    mid, onnx = world.register_model("destroyed", 32)
    failed = world.cli("destroyed", "model", "seal", str(onnx), "--model", str(mid))
    assert failed.exit_code == CLOUD_EXIT, failed.output
    error, fix = one_line(failed)
    assert f"primary version of key {owner.key} is DESTROYED" in error
    assert f"gcloud kms keys versions create --key {owner.key} --primary" in fix
    code, checks = doctor(world, "destroyed")
    assert code == CLOUD_EXIT and "DESTROYED" in checks["KMS key"]["detail"]
    assert "versions create" in checks["KMS key"]["fix"]


def test_missing_bucket_names_the_bucket_and_how_to_create_it(
    world: World, benchmark: int
) -> None:
    owner, mid = _sealed_owner(world, "nobucket", "nobucket-gcp", "710000000071", 41)
    world.inject(fault="bucket-missing", bucket=owner.bucket)
    failed = world.cli("nobucket", "policy", "sync", "--model", str(mid))
    assert failed.exit_code == CLOUD_EXIT, failed.output
    error, fix = one_line(failed)
    assert f"bucket gs://{owner.bucket} does not exist" in error
    assert fix == ("what to do: " + bucket_create_command(owner.bucket, owner.project))
    assert fix.endswith("--uniform-bucket-level-access --public-access-prevention")
    code, checks = doctor(world, "nobucket")
    assert code == CLOUD_EXIT and "does not exist" in checks["bucket"]["detail"]
    assert checks["bucket"]["fix"].startswith(f"gcloud storage buckets create gs://{owner.bucket}")


def test_quota_exceeded_names_the_quota_and_region(world: World, ready: Ready) -> None:
    hospital = world.owners["hospital"]
    world.inject(fault="quota-exceeded", project=hospital.project, metric="N2D_CPUS", limit=0)
    try:
        failed = world.cli("hospital", "run", "--benchmark", str(world.ids["b"]), "--dataset",
                           str(world.ids["d"]), "--model", str(world.ids["m"]), "--tee",
                           "confidential-space", "--force")
        assert failed.exit_code == CLOUD_EXIT, failed.output
        error, fix = one_line(failed)
        # the cause is printed once, on the failed run's line; the error points to it
        lines = [" ".join(line.split()) for line in failed.output.splitlines()]
        run_line = [line for line in lines if " failed (quota): " in line]
        assert len(run_line) == 1, failed.output
        assert "Quota 'N2D_CPUS' exceeded" in run_line[0] and "us-central1" in run_line[0]
        assert "the cause is on each failed run's line above" in error, error
        assert "request a quota increase for N2D_CPUS in region us-central1" in fix
        code, checks = doctor(world, "hospital")
        assert code == CLOUD_EXIT and not checks["CPU quota"]["ok"]
        assert "N2D_CPUS in us-central1: 0 of 0 free" in checks["CPU quota"]["detail"]
        assert "--quota-id=N2D-CPUS-per-project-region" in checks["CPU quota"]["fix"]
    finally:
        world.inject(fault="quota-exceeded", project=hospital.project, metric="N2D_CPUS",
                     limit=64)
