"""A hospital with its own mock cloud in a shared registry is told precisely why it cannot take
part (issue 29): its TEE attests to its own mock verifier and exchanges its token at its own
mock STS, which does not know the model owner's pool provider (on the benchmark's shared mock,
whose verifier that provider trusts). ``sealbench run`` refuses before launching anything,
naming both issuers and the provider, instead of a key-release refusal (``invalid_target``)
after the launch.

Two mock clouds: the shared one (the registry trusts its issuer; the authority and the model
owner use it) and the hospital's own (``mock-tee up`` on its machine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sealbench.client.cli import app
from sealbench.client.registry.local import create_accounts, publish_log_key, registry_process
from sealbench.client.runs.launchers.trust import (
    TeeVerifier,
    UntrustedTeeError,
    check_owner_trust,
    issuers_released_to,
)
from sealbench.contract.spec import AssetLocation, RunSpec
from sealbench.gcp.sts_probe import sts_knows_provider
from sealbench.mocktee import MockCloud
from tests.e2e.test_cli_flow import tiny_onnx

pytestmark = pytest.mark.timeout(300)

ACCOUNTS = {
    "admin": ("admin@own-mock.example", True),
    "authority": ("authority@own-mock.example", False),
    "hospital": ("it@hospital.own-mock.example", False),
    "lab": ("ml@lab.own-mock.example", False),
}


@dataclass
class Clouds:
    cli: Any
    shared: MockCloud
    own: MockCloud
    ids: dict[str, str]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def clouds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clouds]:
    tmp = tmp_path_factory.mktemp("own-mock")
    patch = pytest.MonkeyPatch()
    patch.setenv("SEALBENCH_CONFIG_DIR", str(tmp / "home"))
    for name in ("SEALBENCH_DATA_DIR", "SEALBENCH_PROFILE", "SEALBENCH_SERVER", "SEALBENCH_TOKEN"):
        patch.delenv(name, raising=False)
    runner = CliRunner()

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args))

    try:
        with MockCloud(tmp / "shared") as shared, MockCloud(tmp / "own") as own:
            tokens = create_accounts(tmp / "registry", ACCOUNTS)
            log_key = publish_log_key(tmp / "registry")
            with registry_process(tmp / "registry", shared.endpoints, tmp / "server.log") as url:
                for name, token in tokens.items():
                    state = own.state_dir if name == "hospital" else shared.state_dir
                    ok(cli("profile", "add", name, "--server", url, "--token", token,
                           "--mock-tee", str(state), "--log-key", log_key))
                world = Clouds(cli, shared, own, {})
                _setup(world, tmp)
                yield world
    finally:
        patch.undo()


def _setup(world: Clouds, tmp: Path) -> None:
    cli, ids = world.cli, world.ids
    b = str(json.loads(ok(cli("benchmark", "create", "--tee", "mock", "--definition",
                              "brats-small", "--json", "--profile", "authority")).stdout)["id"])
    ok(cli("benchmark", "approve", b, "--profile", "admin"))
    onnx = tiny_onnx(tmp / "lab.onnx", 0)
    m = str(json.loads(ok(cli("model", "register", str(onnx), "--name", "lab", "--benchmark", b,
                              "--json", "--profile", "lab")).stdout)["id"])
    ok(cli("model", "seal", str(onnx), "--model", m, "--profile", "lab"))
    ok(cli("model", "associate", "--model", m, "--benchmark", b, "--profile", "lab"))
    ok(cli("keys", "init", "--profile", "hospital"))
    raw, prepared = tmp / "raw", tmp / "prepared"
    ok(cli("dataset", "synthesize", str(raw), "--cases", "1", "--benchmark", b,
           "--profile", "hospital"))
    ok(cli("dataset", "prepare", str(raw), str(prepared), "--benchmark", b,
           "--profile", "hospital"))
    d = str(json.loads(ok(cli("dataset", "register", str(prepared), "--name", "h", "--benchmark",
                              b, "--json", "--profile", "hospital")).stdout)["id"])
    ok(cli("dataset", "seal", str(prepared), "--dataset", d, "--profile", "hospital"))
    ok(cli("dataset", "associate", "--dataset", d, "--benchmark", b, "--profile", "hospital"))
    for kind, asset in (("--dataset", d), ("--model", m)):
        ok(cli("association", "approve", "--benchmark", b, kind, asset, "--profile",
               "authority"))
    ok(cli("policy", "sync", "--dataset", d, "--profile", "hospital"))
    ok(cli("policy", "sync", "--model", m, "--profile", "lab"))
    ids.update(b=b, d=d, m=m)


def test_a_hospital_on_its_own_mock_is_told_why_before_any_launch(clouds: Clouds) -> None:
    ids = clouds.ids
    ran = clouds.cli("run", "--benchmark", ids["b"], "--dataset", ids["d"], "--model", ids["m"],
                     "--profile", "hospital")
    flat = " ".join(ran.output.split())
    assert ran.exit_code != 0, ran.output
    assert "the model owner's key cannot be released to this run" in flat, flat
    assert f"your TEE attests to {clouds.own.endpoints.issuer}" in flat
    assert clouds.own.endpoints.sts_token_url in flat
    assert "does not know the model owner's pool provider projects/" in flat
    assert "shared mock-tee" in flat and "--tee confidential-space" in flat
    records = json.loads(ok(clouds.cli("result", "ls", "--json", "--profile",
                                       "hospital")).stdout)
    assert [r["status"] for r in records] == ["failed"], records
    assert records[0]["reason"] == "launch"  # never launched: no key refusal, no VM, no child


def test_the_probe_tells_the_two_clouds_apart(clouds: Clouds) -> None:
    coords = json.loads(ok(clouds.cli("model", "show", clouds.ids["m"], "--json", "--profile",
                                      "lab")).stdout)
    provider = _provider(coords)
    assert sts_knows_provider(clouds.shared.endpoints.sts_token_url, provider) is True
    assert sts_knows_provider(clouds.own.endpoints.sts_token_url, provider) is False
    assert sts_knows_provider("http://127.0.0.1:9/v1/token", provider) is None  # no answer


def _provider(shown: dict[str, Any]) -> str:
    for value in _walk(shown):
        if isinstance(value, str) and "/workloadIdentityPools/" in value:
            return value.removeprefix("//iam.googleapis.com/")
    raise AssertionError(f"no pool provider in {shown}")


def _walk(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)
    else:
        yield node


# -- the decision, with a probe standing in for the STS ------------------------------------------

_PROVIDER = "projects/{}/locations/global/workloadIdentityPools/pool-x/providers/attestation"


def _spec(sts_url: str | None) -> RunSpec:
    key = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    digest = "sha256:" + "a" * 64
    return RunSpec(
        run_id="r1", benchmark_id="1", metrics_version="brats-2023-gli/1",
        dataset=AssetLocation(asset_id="1", uri="gs://bucket-d/x", kms_key=key,
                              pool_provider=_PROVIDER.format(111)),
        model=AssetLocation(asset_id="2", uri="gs://bucket-m/x", kms_key=key,
                            pool_provider=_PROVIDER.format(222)),
        result_uri="gs://bucket-d/results", recipient_public_key="A" * 43 + "=",
        data_digest=digest, model_digest=digest, recipient_digest=digest,
        **({} if sts_url is None else {"sts_url": sts_url, "kms_endpoint": "http://127.0.0.1:2",
                                       "storage_endpoint": "http://127.0.0.1:3"}),
    )


def test_the_issuer_the_owner_trusts_is_named_when_the_registry_shows_it() -> None:
    class VerifiedResult:
        def __init__(self, model_id: int, issuer: str) -> None:
            self.dataset_id, self.model_id, self.token_issuer = 9, model_id, issuer

    results = [VerifiedResult(2, "http://127.0.0.1:1111"), VerifiedResult(3, "https://other")]
    mine = TeeVerifier("http://127.0.0.1:2222", "your own mock-tee")
    with pytest.raises(UntrustedTeeError) as info:
        check_owner_trust(
            _spec("http://127.0.0.1:2222/v1/token"), mine,
            probe=lambda _sts, provider: provider.startswith("projects/111/"),
            trusted_issuers=lambda kind: issuers_released_to(results, kind, 2))
    message = str(info.value)
    assert message.startswith("the model owner's key cannot be released to this run: your TEE "
                              "attests to http://127.0.0.1:2222 (your own mock-tee) and "
                              "exchanges its token at http://127.0.0.1:2222/v1/token, which does "
                              "not know the model owner's pool provider projects/222/")
    assert message.endswith("; its key has been released to runs attested by "
                            "http://127.0.0.1:1111")


def test_a_known_provider_or_no_answer_lets_the_run_go() -> None:
    mine = TeeVerifier("http://127.0.0.1:2222", "your own mock-tee")
    check_owner_trust(_spec("http://127.0.0.1:2222/v1/token"), mine, probe=lambda *_: True)
    check_owner_trust(_spec("http://127.0.0.1:2222/v1/token"), mine, probe=lambda *_: None)


def test_google_sts_is_not_probed() -> None:
    def never(*_: str) -> bool:
        raise AssertionError("probed Google's STS")

    check_owner_trust(_spec(None), TeeVerifier("https://confidentialcomputing.googleapis.com",
                                               "Google's"), probe=never)
