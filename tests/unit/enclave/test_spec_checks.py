"""What stops a run before any key is requested: a missing or malformed run spec (the error
names the variable), an unknown metrics version, an environment that differs from the attested
overrides, a recipient key that does not match its digest, an unwritable destination."""

from __future__ import annotations

from typing import Any

import pytest

from sealbench.contract.errors import DestinationError, SpecError
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest
from sealbench.enclave.rules import benchmark_for
from sealbench.enclave.run import run_enclave


def _no_keys(world: Any) -> None:
    assert world.access.key_requests == []


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("SEALBENCH_DATA_DIGEST", None, "missing"),
        ("SEALBENCH_DATA_DIGEST", "sha256:xyz", "digest"),
        ("SEALBENCH_MODEL_KMS_KEY", "projects/p", "pattern"),
        ("SEALBENCH_RECIPIENT_PUBLIC_KEY", "AAAA", "32-byte"),
        ("SEALBENCH_RUN_ID", "../../etc", "pattern"),
    ],
)
def test_malformed_spec_stops_before_keys_naming_the_field(
    world: Any, name: str, value: str | None, problem: str
) -> None:
    environ = world.spec.to_environ()
    if value is None:
        del environ[name]
    else:
        environ[name] = value
    attester = world.attester()
    with pytest.raises(SpecError) as info:
        run_enclave(environ, attester, access=lambda *_: world.access)
    assert name in str(info.value) and problem in str(info.value)
    assert attester.tokens == []  # not even a token was asked for
    _no_keys(world)


def test_unknown_metrics_version_stops_before_keys(world: Any) -> None:
    spec = world.with_spec(metrics_version="brats-2023-gli/9")
    with pytest.raises(SpecError, match="installed at version '1', not '9'"):
        world.run(spec)
    _no_keys(world)


def test_environment_differing_from_attested_overrides_stops_before_keys(world: Any) -> None:
    environ = world.spec.to_environ()
    environ["SEALBENCH_RESULT_URI"] = f"file://{world.root / 'elsewhere'}"
    attester = world.attester()  # attests the original spec
    with pytest.raises(SpecError, match="SEALBENCH_RESULT_URI"):
        run_enclave(environ, attester, access=lambda *_: world.access)
    _no_keys(world)


def test_recipient_key_not_matching_its_digest_stops_before_keys(world: Any) -> None:
    spec = world.with_spec(recipient_digest=sha256_digest(b"another recipient"))
    with pytest.raises(DestinationError, match="SEALBENCH_RECIPIENT_DIGEST"):
        world.run(spec)
    _no_keys(world)


def test_unwritable_destination_fails_in_step_one_before_keys(world: Any) -> None:
    world.access.refuse_results = True
    with pytest.raises(DestinationError, match="refused the test write"):
        world.run()
    _no_keys(world)


def test_dataset_prepared_under_another_label_map_rejected() -> None:
    import json

    from sealbench.benchmarks.brats import BRATS2021_LABELS, BRATS_2023_GLI
    from sealbench.benchmarks.interface import CaseError

    plugin = benchmark_for(BenchmarkPin.parse("brats-2023-gli/1"))
    other = BRATS_2023_GLI.model_copy(update={"label_map": BRATS2021_LABELS})
    doc = json.dumps({"contract": other.model_dump(mode="json")}).encode()
    with pytest.raises(CaseError, match="label_map"):
        plugin.open_dataset(doc)
    small = BRATS_2023_GLI.with_shape((32, 32, 24))
    off_grid = json.dumps({"contract": small.model_dump(mode="json")}).encode()
    with pytest.raises(CaseError, match="grid 32x32x24"):  # the grid is the pin's
        plugin.open_dataset(off_grid)
    pinned = benchmark_for(BenchmarkPin.parse("brats-2023-gli/1-32x32x24"))
    assert pinned.open_dataset(off_grid).contract == small  # type: ignore[attr-defined]


def test_unknown_benchmark_plugin_stops_before_keys(world: Any) -> None:
    spec = world.with_spec(metrics_version="brats-2099/9")
    with pytest.raises(SpecError, match="no benchmark plug-in named 'brats-2099'"):
        world.run(spec)
    _no_keys(world)


def _main(environ: dict[str, str], tmp_path: Any) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "sealbench.enclave", "--launcher-dir", str(tmp_path)],
        env={"PATH": "/usr/bin:/bin", **environ},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_entry_point_without_spec_exits_10_with_one_line_naming_the_field(tmp_path: Any) -> None:
    done = _main({}, tmp_path)
    assert done.returncode == 10
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("sealbench-enclave: ")
    assert "SEALBENCH_RUN_ID: missing" in done.stderr
    # the failure as the client reads it: the typed event on stdout, with the same reason
    from sealbench.contract.events import RunFailed, parse_event

    [failed] = [e for e in map(parse_event, done.stdout.splitlines()) if isinstance(e, RunFailed)]
    assert (failed.exit_code, failed.code, failed.rule) == (10, "spec", None)
    assert done.stderr == f"sealbench-enclave: {failed.reason} (exit 10)\n"


def test_entry_point_without_launcher_exits_11_before_keys(world: Any, tmp_path: Any) -> None:
    done = _main(world.spec.to_environ(), tmp_path)  # no socket in tmp_path
    assert done.returncode == 11 and "no attestation token" in done.stderr
    assert done.stderr.count("\n") == 1
    assert not world.results().exists()  # nothing was written anywhere


# -- token destinations: the enclave sends no token outside the attesting platform -------------


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ("sts_url", "SEALBENCH_STS_URL"),
        ("kms_endpoint", "SEALBENCH_KMS_ENDPOINT"),
        ("storage_endpoint", "SEALBENCH_STORAGE_ENDPOINT"),
    ],
)
def test_endpoint_override_on_google_attested_run_stops_before_any_token_leaves(
    world: Any, field: str, name: str
) -> None:
    spec = world.with_spec(**{field: "https://capture.attacker.example/v1/token"})
    with pytest.raises(SpecError) as info:
        world.run(spec)
    assert name in str(info.value) and "refusing to send any token" in str(info.value)
    _no_keys(world)
    assert not world.results().exists()


def _attest_with(world: Any, spec: Any, issuer: str, resolve: Any) -> Any:
    from sealbench.enclave.steps import attest
    from sealbench.enclave.timing import StepTimer

    attester = world.attester(spec)
    attester.issuer = issuer
    return attest(spec.to_environ(), attester, StepTimer(), resolve)


def test_mock_attested_run_must_name_the_mocks_own_endpoints(world: Any) -> None:
    from sealbench.contract.spec import ServiceEndpoints
    from sealbench.platforms.platform import TokenDestinations

    mock = ServiceEndpoints(
        "http://127.0.0.1:7001/v1/token", "http://127.0.0.1:7002", "http://127.0.0.1:7003"
    )
    issuers: list[str] = []

    def resolve(issuer: str) -> TokenDestinations:
        issuers.append(issuer)
        return TokenDestinations(mock, fixed=False)

    genuine = world.with_spec(
        sts_url=mock.sts_url, kms_endpoint=mock.kms_endpoint, storage_endpoint=mock.storage_endpoint
    )
    run = _attest_with(world, genuine, "http://127.0.0.1:7000", resolve)
    assert run.spec == genuine and issuers == ["http://127.0.0.1:7000"]
    hijacked = genuine.model_copy(update={"kms_endpoint": "http://127.0.0.1:6666"})
    with pytest.raises(SpecError, match="SEALBENCH_KMS_ENDPOINT"):
        _attest_with(world, hijacked, "http://127.0.0.1:7000", resolve)


def test_token_of_an_unknown_platform_is_sent_nowhere(world: Any) -> None:
    from sealbench.contract.errors import AttestationUnavailable
    from sealbench.enclave.platforms import resolve_platform

    with pytest.raises(AttestationUnavailable, match="no platform"):
        _attest_with(world, world.spec, "https://verifier.attacker.example", resolve_platform)
    _no_keys(world)
