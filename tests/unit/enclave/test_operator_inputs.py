"""The table of operator-controlled inputs and the key-release condition rendered from it.

For every input the table lists, a genuine token is tampered in that one input and the whole
key-release decision is evaluated as Google's STS (and the mock's) makes it, with cel-python:
the provider's attribute condition, then the mapped ``attribute.workload_uid`` against the
granted uids. A bound or pinned input, tampered, releases nothing; an inert one, tampered, is
still released (its reason says why that is harmless), on the production and the mock condition
alike. A new override without a class, or an entry without a tamper case here, fails a test."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import pytest

from sealbench.contract import inputs
from sealbench.contract.inputs import (
    ALL_OVERRIDE_NAMES,
    ENV_INPUTS,
    OPERATOR_INPUTS,
    POOL_ONLY_NAMES,
    ConditionContext,
    ConditionInputError,
    InputClass,
    Rule,
    TokenDestinationError,
    check_token_destinations,
)
from sealbench.contract.spec import (
    ENDPOINT_ENV_NAMES,
    ENV_OVERRIDE_NAMES,
    AssetLocation,
    RunSpec,
    RunSpecError,
    ServiceEndpoints,
)
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp import _cs_cel
from sealbench.gcp.confidential_space import render_condition, uid_mapping_expression
from sealbench.mocktee.cel import evaluate_bool, evaluate_string

IMAGE = sha256_digest(b"evaluation image")
DATA, MODEL = sha256_digest(b"dataset"), sha256_digest(b"model")
RECIPIENT_KEY = base64.b64encode(bytes(range(32))).decode()
RECIPIENT = sha256_digest(bytes(range(32)))
METRICS = "brats-2023-gli/1"
WORKLOAD = WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "7", METRICS)
MOCK = ServiceEndpoints(
    "http://127.0.0.1:7001/v1/token", "http://127.0.0.1:7002", "http://127.0.0.1:7003"
)
PROVIDER = "projects/1/locations/global/workloadIdentityPools/pool/providers/prov"


def _spec(endpoints: ServiceEndpoints | None) -> RunSpec:
    location = {
        "uri": "gs://bucket-a/prefix",
        "kms_key": "projects/p/locations/global/keyRings/r/cryptoKeys/k",
        "pool_provider": PROVIDER,
    }
    cloud = {} if endpoints is None else {
        "sts_url": endpoints.sts_url,
        "kms_endpoint": endpoints.kms_endpoint,
        "storage_endpoint": endpoints.storage_endpoint,
    }
    return RunSpec(
        run_id="run-1",
        benchmark_id="7",
        metrics_version=METRICS,
        dataset=AssetLocation(asset_id="3", **location),
        model=AssetLocation(asset_id="4", **location),
        result_uri="gs://bucket-r/results/run-1",
        recipient_public_key=RECIPIENT_KEY,
        data_digest=DATA,
        model_digest=MODEL,
        recipient_digest=RECIPIENT,
        **cloud,
    )


def _claims(endpoints: ServiceEndpoints | None) -> dict[str, Any]:
    """What the verifier attests for a genuine run of ``WORKLOAD`` on that platform."""
    return {
        "swname": "CONFIDENTIAL_SPACE",
        "dbgstat": "disabled-since-boot",
        "hwmodel": "GCP_INTEL_TDX",
        "secboot": True,
        "google_service_accounts": ["runner@hospital.iam.gserviceaccount.com"],
        "submods": {
            "confidential_space": {
                "support_attributes": ["LATEST", "STABLE", "USABLE"],
                "monitoring_enabled": {"memory": False},
            },
            "container": {
                "image_digest": IMAGE,
                "restart_policy": "Never",
                "env_override": _spec(endpoints).to_environ(),
                "cmd_override": None,
            },
        },
    }


def _released(claims: dict[str, Any], ctx: ConditionContext) -> bool:
    """Google's decision: the attribute condition holds and the mapped uid was granted."""
    activation = {"assertion": claims}
    try:
        if not evaluate_bool(render_condition(ctx), activation):
            return False
        uid = evaluate_string(uid_mapping_expression(include_data=ctx.include_data), activation)
    except Exception:  # noqa: BLE001 - a condition that cannot be evaluated denies (as GCP)
        return False
    granted = WORKLOAD if ctx.include_data else WORKLOAD.without_data()
    return uid == granted.uid()


def _env(name: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def tamper(claims: dict[str, Any]) -> None:
        env = claims["submods"]["container"]["env_override"]
        if value is None:
            env.pop(name)
        else:
            env[name] = value

    return tamper


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def tamper(claims: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = claims
        for part in parents:
            node = node[part]
        node[leaf] = value

    return tamper


def _debug_image(claims: dict[str, Any]) -> None:
    claims["dbgstat"] = "enabled"
    del claims["submods"]["confidential_space"]["support_attributes"]


_OTHER = sha256_digest(b"something else")
#: One tamper per table entry: what the operator would change.
TAMPER: dict[str, Callable[[dict[str, Any]], None]] = {
    "SEALBENCH_RUN_ID": _env("SEALBENCH_RUN_ID", "run-2"),
    "SEALBENCH_BENCHMARK_ID": _env("SEALBENCH_BENCHMARK_ID", "8"),
    "SEALBENCH_METRICS_VERSION": _env("SEALBENCH_METRICS_VERSION", "brats-2021/1"),
    "SEALBENCH_DATASET_ID": _env("SEALBENCH_DATASET_ID", "99"),
    "SEALBENCH_DATASET_URI": _env("SEALBENCH_DATASET_URI", "gs://operator-bucket/copy"),
    "SEALBENCH_DATASET_KMS_KEY": _env(
        "SEALBENCH_DATASET_KMS_KEY", "projects/op/locations/global/keyRings/r/cryptoKeys/k"
    ),
    "SEALBENCH_DATASET_POOL_PROVIDER": _env(
        "SEALBENCH_DATASET_POOL_PROVIDER", PROVIDER.replace("pool/", "other/")
    ),
    "SEALBENCH_MODEL_ID": _env("SEALBENCH_MODEL_ID", "98"),
    "SEALBENCH_MODEL_URI": _env("SEALBENCH_MODEL_URI", "gs://operator-bucket/model"),
    "SEALBENCH_MODEL_KMS_KEY": _env(
        "SEALBENCH_MODEL_KMS_KEY", "projects/op/locations/global/keyRings/r/cryptoKeys/m"
    ),
    "SEALBENCH_MODEL_POOL_PROVIDER": _env(
        "SEALBENCH_MODEL_POOL_PROVIDER", PROVIDER.replace("pool/", "other/")
    ),
    "SEALBENCH_RESULT_URI": _env("SEALBENCH_RESULT_URI", "gs://operator-bucket/out"),
    "SEALBENCH_RECIPIENT_PUBLIC_KEY": _env(
        "SEALBENCH_RECIPIENT_PUBLIC_KEY", base64.b64encode(bytes(32)).decode()
    ),
    "SEALBENCH_DATA_DIGEST": _env("SEALBENCH_DATA_DIGEST", _OTHER),
    "SEALBENCH_MODEL_DIGEST": _env("SEALBENCH_MODEL_DIGEST", _OTHER),
    "SEALBENCH_RECIPIENT_DIGEST": _env("SEALBENCH_RECIPIENT_DIGEST", _OTHER),
    # inert: the longest wait (clamped by the enclave) and the CPU allowance release the same
    # the aggregator's only (issue 27): on an evaluation token the condition admits them (a data
    # owner's pool admits the aggregator too); the evaluation enclave refuses to run with them
    "SEALBENCH_POOL_INPUTS_URI": _env("SEALBENCH_POOL_INPUTS_URI", "gs://operator-bucket/in"),
    "SEALBENCH_POOL_INPUTS_DIGEST": _env("SEALBENCH_POOL_INPUTS_DIGEST", _OTHER),
    "SEALBENCH_RESULT_POOL_PROVIDER": _env(
        "SEALBENCH_RESULT_POOL_PROVIDER", PROVIDER.replace("pool/", "other/")),
    # the aggregator's pool anchor (issue 40): an operator's own log key or no witnesses
    "SEALBENCH_POOL_LOG_KEY": _env(
        "SEALBENCH_POOL_LOG_KEY",
        "operator.example/log+01234567+AeBou+Ovis9WJNKB2rp6lxgRGpoHo3nzyA7u/K0tbtCj"),
    "SEALBENCH_POOL_WITNESSES": _env("SEALBENCH_POOL_WITNESSES", ""),
    "SEALBENCH_POOL_WITNESS_QUORUM": _env("SEALBENCH_POOL_WITNESS_QUORUM", "0"),
    "SEALBENCH_IAM_WAIT": _env("SEALBENCH_IAM_WAIT", "999999"),
    "SEALBENCH_CPU_FALLBACK": _env("SEALBENCH_CPU_FALLBACK", "true"),
    **{
        name: _env(name, "https://attacker.example:8443/capture")
        for name in ENDPOINT_ENV_NAMES
    },
    "tee-env-* (any other name)": _env("LD_PRELOAD", "/tmp/steal.so"),
    "release privacy loss and content (e.g. SEALBENCH_RELEASE_EPSILON)": _env(
        "SEALBENCH_RELEASE_EPSILON", "100"),
    "tee-image-reference": _set("submods.container.image_digest", _OTHER),
    "tee-cmd": _set("submods.container.cmd_override", ["/bin/sh", "-c", "env"]),
    "confidentialInstanceType": _set("hwmodel", "GCP_SHIELDED_VM"),
    "shieldedInstanceConfig.enableSecureBoot": _set("secboot", False),
    "sourceImage (Confidential Space image family)": _debug_image,
    "tee-restart-policy": _set("submods.container.restart_policy", "Always"),
    "tee-container-log-redirect": lambda claims: None,  # not in the token: nothing to tamper
    "tee-mount": lambda claims: None,  # refused by the launch policy; not in the token
    "tee-monitoring-memory-enable": _set(
        "submods.confidential_space.monitoring_enabled", {"memory": True}
    ),
    "serviceAccounts / tee-impersonate-service-accounts": _set(
        "google_service_accounts", ["operator@hospital.iam.gserviceaccount.com"]
    ),
}

PLATFORMS = {"production": None, "mock": MOCK}
ANCHOR_NAMES = frozenset({"SEALBENCH_POOL_LOG_KEY", "SEALBENCH_POOL_WITNESSES",
                          "SEALBENCH_POOL_WITNESS_QUORUM"})


def _ctx(endpoints: ServiceEndpoints | None, include_data: bool) -> ConditionContext:
    return ConditionContext(frozenset({IMAGE}), include_data, endpoints)


def test_every_env_override_has_a_class() -> None:
    assert set(ENV_INPUTS) == set(ALL_OVERRIDE_NAMES) >= set(ENV_OVERRIDE_NAMES)
    assert all(isinstance(entry.klass, InputClass) for entry in OPERATOR_INPUTS)


def test_every_table_entry_has_a_tamper_case() -> None:
    assert {entry.name for entry in OPERATOR_INPUTS} == set(TAMPER)


def test_new_override_without_a_class_breaks_the_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    # The renderer (Confidential Space's CEL) reads the run spec's names where it lives.
    monkeypatch.setattr(_cs_cel, "ALL_OVERRIDE_NAMES", (*ALL_OVERRIDE_NAMES, "SEALBENCH_NEW_KNOB"))
    with pytest.raises(ConditionInputError, match="SEALBENCH_NEW_KNOB"):
        render_condition(_ctx(None, True))


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize("include_data", [True, False], ids=["data-owner", "model-owner"])
def test_genuine_run_is_released(platform: str, include_data: bool) -> None:
    endpoints = PLATFORMS[platform]
    assert _released(_claims(endpoints), _ctx(endpoints, include_data))


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize("entry", OPERATOR_INPUTS, ids=lambda e: e.name)
def test_rendered_condition_enforces_the_class(entry: inputs.OperatorInput, platform: str) -> None:
    endpoints = PLATFORMS[platform]
    claims = copy.deepcopy(_claims(endpoints))
    TAMPER[entry.name](claims)
    for include_data in (True, False):
        released = _released(claims, _ctx(endpoints, include_data))
        if entry.klass is InputClass.INERT:
            assert released, f"{entry.name} is inert but tampering it denies the key"
        elif entry.name == "SEALBENCH_DATA_DIGEST" and not include_data:
            # The model owner leaves the dataset open by design (its uid's data field is '-').
            assert released
        elif entry.name == "SEALBENCH_RECIPIENT_PUBLIC_KEY":
            # Bound through the recipient digest: the enclave refuses the key (next test).
            assert released
        elif entry.name in ANCHOR_NAMES:
            # The aggregator's pool anchor: bound through its digest, the uid's recipient
            # field (an aggregator token whose anchor does not hash to it is refused by the
            # aggregator, test_pool.py); on an evaluation token the condition admits the name
            # and the evaluation enclave refuses to start (test_evaluation_refuses_...).
            assert released
        elif entry.rule is Rule.RELEASE_BOUND:
            # The aggregator's inputs digest: bound by its release, which the registry checks;
            # set on an evaluation run, the evaluation enclave refuses to start
            # (test_evaluation_refuses_aggregator_inputs).
            assert released
        else:
            assert not released, f"{entry.name} ({entry.klass}) tampered, yet key released"


@pytest.mark.parametrize("name", sorted(POOL_ONLY_NAMES))
def test_evaluation_refuses_aggregator_inputs(name: str) -> None:
    """The condition admits the aggregator's names (a data owner's pool admits it too), so the
    evaluation enclave refuses a run spec environment carrying one itself."""
    environ = _spec(None).to_environ()
    RunSpec.from_environ(environ)
    with pytest.raises(RunSpecError, match=name):
        RunSpec.from_environ(environ | {name: "gs://operator-bucket/in"})


def test_recipient_key_is_bound_by_its_digest() -> None:
    spec = _spec(None).model_copy(
        update={"recipient_public_key": base64.b64encode(bytes(32)).decode()}
    )
    with pytest.raises(RunSpecError, match="SEALBENCH_RECIPIENT_DIGEST"):
        spec.check_recipient()


def test_production_condition_requires_endpoint_overrides_absent() -> None:
    condition = render_condition(_ctx(None, True))
    for name in ENDPOINT_ENV_NAMES:
        assert f"!has(assertion.submods.container.env_override.{name})" in condition
    # Even Google's own URL, set as an override, is not what a production workload carries.
    claims = _claims(None)
    claims["submods"]["container"]["env_override"]["SEALBENCH_STS_URL"] = (
        "https://sts.googleapis.com/v1/token"
    )
    assert not _released(claims, _ctx(None, True))


def test_mock_condition_refuses_a_run_without_its_endpoints() -> None:
    assert not _released(_claims(None), _ctx(MOCK, True))


def test_condition_literals_cannot_be_injected() -> None:
    with pytest.raises(ConditionInputError):
        render_condition(ConditionContext(
            frozenset({IMAGE}), True, experimental_gpu_images=frozenset({IMAGE}),
            experimental_benchmark_ids=frozenset({"7' || true || '"})))


# -- the enclave's own check (defence in depth) -------------------------------------------------


@pytest.mark.parametrize("name", ENDPOINT_ENV_NAMES)
def test_endpoint_override_on_google_attested_run_refused(name: str) -> None:
    overrides = {name: "https://sts.googleapis.com/v1/token"}
    with pytest.raises(TokenDestinationError) as info:
        check_token_destinations(overrides, None)
    assert info.value.name == name


@pytest.mark.parametrize("name", ENDPOINT_ENV_NAMES)
def test_endpoint_of_another_host_on_mock_attested_run_refused(name: str) -> None:
    overrides = MOCK.env_names() | {name: "http://127.0.0.1:6666/capture"}
    with pytest.raises(TokenDestinationError) as info:
        check_token_destinations(overrides, MOCK)
    assert info.value.name == name


def test_platform_endpoints_accepted() -> None:
    check_token_destinations({}, None)
    check_token_destinations(MOCK.env_names(), MOCK)


@pytest.mark.parametrize(
    "url",
    [
        "http://sts.attacker.example/v1/token",  # http off loopback
        "https://user:pw@sts.googleapis.com/v1/token",  # userinfo
        "https://sts.googleapis.com@attacker.example/v1/token",
        "https://sts.googleapis.com/v1/token?x=1",
        "https://sts.googleapis.com/v1/token\n",
        "ftp://127.0.0.1/v1/token",
    ],
)
def test_malformed_endpoint_refused_by_the_run_spec(url: str) -> None:
    environ = _spec(None).to_environ() | {"SEALBENCH_STS_URL": url}
    with pytest.raises(RunSpecError, match="SEALBENCH_STS_URL"):
        RunSpec.from_environ(environ)


def test_production_spec_carries_no_endpoint_override() -> None:
    environ = _spec(None).to_environ()
    assert not set(ENDPOINT_ENV_NAMES) & set(environ)
    parsed = RunSpec.from_environ(environ)  # absent: the attesting platform's own (Google's)
    assert (parsed.sts_url, parsed.kms_endpoint, parsed.storage_endpoint) == (None, None, None)


def test_the_docs_table_lists_every_input() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "enclave.md").read_text()
    for entry in OPERATOR_INPUTS:
        assert f"`{entry.name}`" in doc or f"`tee-env-{entry.name}`" in doc, entry.name
