"""A third platform reached from the client's commands (issue 26: adding a platform touches its
own package and an entry point). With the double (``tests/platforms_double``) installed by entry
point only, a profile whose cloud is its account runs ``sealbench run --tee <its backend>``
against the real registry (in-process): the backend is accepted, the double's platform builds the
launcher from the benchmark's image and the account's settings, the run spec names the double's
token destinations and a result location in the account's own storage, the verifier the run must
attest to is the double's, and the owner's policy sync renders through the double's condition.
No client module names the double (``tests/integration/test_third_platform.py``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from sealbench.client.assets import owner
from sealbench.client.assets.accounts import profile_account
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.assets.result_key import init_result_key
from sealbench.client.backends import check_tee
from sealbench.client.cli import app
from sealbench.client.cli.common import using_client_factory
from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import (
    PlatformAccount,
    Profile,
    ProfileStore,
    ResolvedProfile,
)
from sealbench.client.runs.launch import prepare_runs, tee_verifier
from sealbench.client.runs.local_results import verifier_key_source
from sealbench.client.runs.options import RunOptions
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import (
    BenchmarkCreate,
    CoordinatesUpdate,
    DatasetCreate,
    ModelCreate,
)

SERVER = "http://testserver"


@pytest.fixture
def hospital(
    third_platform: ModuleType, cli_home: Path, registry: Any, tmp_path: Path
) -> ResolvedProfile:
    """The hospital's profile: its cloud is an account on the double."""
    store = ProfileStore.from_environment(os.environ)
    account = PlatformAccount(platform=third_platform.NAME,
                              settings={"account": "hosp", "root": str(tmp_path / "bucket")})
    store.add("hospital", Profile(server=SERVER, token=registry.tokens["hospital"],
                                  account=account))
    return store.resolve("hospital")


@pytest.fixture
def pair(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate],
    hospital: ResolvedProfile,
) -> tuple[int, int, int]:
    """An approved (benchmark, dataset, model), the dataset's results sealed to the hospital's
    result key."""
    recipient = init_result_key(hospital.secrets_dir).digest
    b = api["authority"].create_benchmark(benchmark_body()).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(DatasetCreate(
        name="d", digest=sha256_digest(b"data"), case_count=1,
        statistics={RECIPIENT_STATISTIC: recipient})).id
    api["hospital"].request_association("dataset", b, d)
    api["authority"].decide_association("dataset", b, d, approve=True)
    m = api["modelco"].register_model(
        ModelCreate(name="m", version="1", digest=sha256_digest(b"weights"))).id
    api["modelco"].request_association("model", b, m)
    api["authority"].decide_association("model", b, m, approve=True)
    cloud = owner.owner_cloud(hospital, client=None, mock_tee=None)  # type: ignore[arg-type]
    for kind, asset, who in (("dataset", d, "hospital"), ("model", m, "modelco")):
        where = cloud.default_coordinates(kind, asset)  # type: ignore[arg-type]
        api[who].put_coordinates(kind, asset, CoordinatesUpdate(
            kms_key_name=where.kms_key_name, storage_uri=where.storage_uri,
            wip_provider=where.wip_provider))
    return b, d, m


@pytest.fixture
def cli(runner: CliRunner, http: TestClient, hospital: ResolvedProfile) -> Iterator[
        Callable[..., Result]]:
    transport = http._transport

    def in_process(profile: ResolvedProfile) -> RegistryClient:
        return RegistryClient.connect(profile.server, profile.token, transport=transport)

    with using_client_factory(in_process):
        yield lambda *args: runner.invoke(app, list(args))


def test_its_backend_is_one_the_client_accepts(third_platform: ModuleType) -> None:
    assert check_tee(third_platform.BACKEND) == third_platform.BACKEND
    with pytest.raises(ConfigError) as refused:
        check_tee("sgx")
    assert third_platform.BACKEND in (refused.value.hint or "")


def test_the_profile_account_is_its_owner_cloud(
    third_platform: ModuleType, hospital: ResolvedProfile
) -> None:
    cloud = owner.owner_cloud(hospital, client=None, mock_tee=None)  # type: ignore[arg-type]
    assert cloud.names()["bucket"] == "hosp-bucket"
    wrapper = cloud.key_wrapper(cloud.key_name)
    assert wrapper.unwrap(wrapper.wrap(b"k" * 32, b"aad"), b"aad") == b"k" * 32
    root = Path(hospital.profile.account.settings["root"])  # type: ignore[union-attr]
    assert owner.default_result_uri(hospital) == f"{root.resolve().as_uri()}/results"
    assert owner.spec_endpoints(hospital) == third_platform.ENDPOINTS
    assert verifier_key_source(hospital).issuer == third_platform.ISSUER
    assert verifier_key_source(hospital).jwks_url is None  # found by OpenID discovery


def test_a_profile_naming_a_platform_not_installed_is_refused(
    cli_home: Path, registry: Any
) -> None:
    store = ProfileStore.from_environment(os.environ)
    store.add("elsewhere", Profile(server=SERVER, token=registry.tokens["hospital"],
                                   account=PlatformAccount(platform="nitro")))
    with pytest.raises(ConfigError, match="no TEE platform named 'nitro'"):
        owner.owner_cloud(store.resolve("elsewhere"), client=None,  # type: ignore[arg-type]
                          mock_tee=None)


def test_a_run_on_its_backend_is_prepared_by_its_platform(
    third_platform: ModuleType, hospital: ResolvedProfile, api: dict[str, RegistryClient],
    pair: tuple[int, int, int], cli: Callable[..., Result],
) -> None:
    b, d, m = pair
    prepared = prepare_runs(hospital, api["hospital"], RunOptions(
        benchmark=b, dataset=d, model=m, tee=third_platform.BACKEND))
    launcher = prepared.launcher
    assert isinstance(launcher, third_platform.DoubleLauncher)
    benchmark = api["hospital"].get_benchmark(b)
    assert launcher.options == {
        "image_reference": benchmark.image_reference, "image_digest": benchmark.image_digest,
        "account": third_platform.DoubleAccountSettings(
            account="hosp", root=hospital.profile.account.settings["root"]),
        "launch": third_platform.DoubleLaunchOptions(),  # its typed options, their defaults
        "debug": False,
    }
    spec = prepared.make_spec(d, m, "run-1")
    pinned = third_platform.ENDPOINTS
    assert (spec.sts_url, spec.kms_endpoint, spec.storage_endpoint) == (
        pinned.sts_url, pinned.kms_endpoint, pinned.storage_endpoint)
    assert spec.result_uri == f"{owner.default_result_uri(hospital)}/run-1"
    account = profile_account(hospital)
    assert account is not None and account.platform_name == third_platform.NAME
    assert tee_verifier(account.routes()).issuer == third_platform.ISSUER


def test_sealbench_run_reaches_its_launcher(
    third_platform: ModuleType, pair: tuple[int, int, int], cli: Callable[..., Result]
) -> None:
    b, d, m = pair
    third_platform.DoublePlatform.started.clear()
    ran = cli("run", "--benchmark", str(b), "--dataset", str(d), "--model", str(m),
              "--tee", third_platform.BACKEND)
    assert ran.exit_code != 0
    assert "the double starts no workload" in " ".join(ran.output.split())
    [spec] = third_platform.DoublePlatform.started
    assert spec.benchmark_id == str(b)
    assert (spec.dataset.asset_id, spec.model.asset_id) == (str(d), str(m))


def test_policy_sync_renders_its_condition(
    third_platform: ModuleType, pair: tuple[int, int, int], cli: Callable[..., Result]
) -> None:
    b, d, _ = pair
    third_platform.DoublePlatform.synced.clear()
    synced = cli("policy", "sync", "--dataset", str(d))
    assert synced.exit_code == 0, synced.output
    [report] = third_platform.DoublePlatform.synced
    image = cli("benchmark", "show", str(b), "--json")
    assert report.condition.startswith("double: images [")
    assert json.loads(image.stdout)["image_digest"] in report.condition
    assert report.key.added and all(m.startswith("principalSet://") for m in report.key.added)


def _add(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, ["profile", "add", "acct", "--server", "http://127.0.0.1:9",
                               "--token", "t", "--no-use", *args])


def test_profile_add_takes_an_account_on_it(
    third_platform: ModuleType, runner: CliRunner, cli_home: Path, tmp_path: Path
) -> None:
    added = _add(runner, "--cloud", third_platform.NAME, "--setting", "account=lab",
                 "--setting", f"root={tmp_path}")
    assert added.exit_code == 0, added.output
    saved = dict(ProfileStore.from_environment(os.environ).names())["acct"]
    assert saved.account == PlatformAccount(
        platform=third_platform.NAME, settings={"account": "lab", "root": str(tmp_path)})
    shown = runner.invoke(app, ["profile", "show", "acct", "--json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.stdout)
    assert rows["cloud"] == "an account on the double platform"
    assert rows["bucket"] == "lab-bucket"
    assert rows["attestation issuer"] == f"{third_platform.ISSUER}/"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--cloud", "nitro"), 2, "no TEE platform named 'nitro' is installed"),
        (("--cloud", "double", "--setting", "bogus=1"), 2,
         "the double account setting 'account' is not valid: Field required"),
        (("--cloud", "double", "--setting", "account=a", "--setting", "bogus=1"), 2,
         "the double account setting 'bogus' is not valid: Extra inputs are not permitted"),
        (("--cloud", "double", "--setting", "account"), 2, "'account' is not KEY=VALUE"),
        (("--cloud", "double", "--setting", "account=a", "--setting", "account=b"), 2,
         "account is given twice"),
        (("--setting", "account=a"), 2, "--setting goes with --cloud NAME"),
        (("--cloud", "confidential-space", "--setting", "a=b"), 2, "use --cloud gcp"),
        (("--cloud", "double", "--project", "my-project-1"), 2, "takes --setting, not"),
    ],
)
def test_profile_add_refuses_an_account_it_cannot_use(
    third_platform: ModuleType, runner: CliRunner, cli_home: Path, args: tuple[str, ...],
    code: int, message: str,
) -> None:
    refused = _add(runner, *args)
    assert refused.exit_code == code, refused.output
    assert message in " ".join(refused.output.split())
    assert "acct" not in dict(ProfileStore.from_environment(os.environ).names())


def test_doctor_runs_its_checks(
    third_platform: ModuleType, cli: Callable[..., Result]
) -> None:
    checked = cli("doctor", "--json")
    assert checked.exit_code == 0, checked.output
    rows = {r["check"]: r for r in json.loads(checked.stdout)}
    assert rows["double account"]["ok"] and rows["double account"]["detail"] == "hosp"
    assert "double VMs" not in rows  # no Compute VM settings invented for it (the mock's)
