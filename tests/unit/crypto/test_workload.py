"""Workload identity: the uid is exactly what GCP's CEL attribute mapping computes, it names the
benchmark and the plug-in pin of one approval, it cannot be forged by shifting fields between
overrides, and it round-trips through every form."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench.contract import workload as wl
from sealbench.crypto.errors import PolicyViolationError
from sealbench.gcp import confidential_space as cs

IMAGE = "sha256:" + "1" * 64
DATA = "sha256:" + "d" * 64
MODEL = "sha256:" + "e" * 64
RECIPIENT = "sha256:" + "f" * 64
BENCH = "7"
PIN = "brats-2023-gli/1"
TAIL = {wl.ENV_BENCHMARK_ID: BENCH, wl.ENV_METRICS_VERSION: PIN}

digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)


def identity(data: str | None = DATA) -> wl.WorkloadIdentity:
    return wl.WorkloadIdentity(IMAGE, data, MODEL, RECIPIENT, BENCH, PIN)  # type: ignore[arg-type]


def cel_eval(expression: str, assertion: dict[str, Any]) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return program.evaluate({"assertion": celpy.json_to_cel(assertion)})


def assertion_for(image: str, env_override: dict[str, str] | None) -> dict[str, Any]:
    return {"submods": {"container": {"image_digest": image, "env_override": env_override}}}


def test_uid_format() -> None:
    assert identity().uid() == f"{IMAGE}::{DATA}::{MODEL}::{RECIPIENT}::{BENCH}::{PIN}"
    assert identity(None).uid() == f"{IMAGE}::-::{MODEL}::{RECIPIENT}::{BENCH}::{PIN}"
    assert len(identity().uid()) == 290 + 2 + len(BENCH) + 2 + len(PIN)


def test_longest_uid_is_within_what_the_mapping_may_produce() -> None:
    """The longest uid (an 18-digit benchmark id, a 64-character pin) stays far below the
    8 KB Google allows all mapped attributes together."""
    longest = wl.WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, "9" * 18,  # type: ignore[arg-type]
                                  "a" * 48 + "/" + "b" * 16)
    assert len(longest.uid()) == 290 + 2 + 18 + 2 + 65 < 8192


@pytest.mark.parametrize(("bench", "pin"), [
    ("0", PIN), ("07", PIN), ("7\n", PIN), ("x", PIN), (BENCH, "brats"), (BENCH, "a::b/1"),
    (BENCH, "Brats/1"), (BENCH, "brats/1\n"), ("", PIN), (BENCH, "")])
def test_malformed_benchmark_or_pin_refused(bench: str, pin: str) -> None:
    with pytest.raises(ValueError):
        wl.WorkloadIdentity(IMAGE, DATA, MODEL, RECIPIENT, bench, pin)  # type: ignore[arg-type]
    env = {**identity().env_overrides(), wl.ENV_BENCHMARK_ID: bench, wl.ENV_METRICS_VERSION: pin}
    with pytest.raises(PolicyViolationError):
        wl.WorkloadIdentity.from_env_overrides(IMAGE, env)
    assert not cel_eval(cs.env_shape_condition(include_data=True), assertion_for(IMAGE, env))


# CEL compiles each expression per example: slow on two shared cores, so no deadline.
@settings(deadline=None)
@given(image=digests, data=st.none() | digests, model=digests, recipient=digests)
def test_cel_mapping_computes_the_uid(
    image: str, data: str | None, model: str, recipient: str
) -> None:
    who = wl.WorkloadIdentity(image, data, model, recipient, BENCH, PIN)  # type: ignore[arg-type]
    full = wl.WorkloadIdentity(  # type: ignore[arg-type]
        image, data or DATA, model, recipient, BENCH, PIN)
    assertion = assertion_for(image, full.env_overrides())
    assert str(cel_eval(cs.uid_mapping_expression(include_data=True), assertion)) == full.uid()
    assert str(cel_eval(cs.uid_mapping_expression(include_data=False), assertion)) == (
        who.without_data().uid()
    )
    assert wl.WorkloadIdentity.from_uid(who.uid()) == who


def test_mapping_expression_within_gcp_limit() -> None:
    for include_data in (True, False):
        assert len(cs.uid_mapping_expression(include_data=include_data)) <= 2048


def test_cel_mapping_fails_closed_without_override() -> None:
    env = identity().env_overrides()
    del env[wl.ENV_MODEL_DIGEST]
    with pytest.raises(celpy.CELEvalError):
        cel_eval(cs.uid_mapping_expression(include_data=True), assertion_for(IMAGE, env))


def _mapped(data: str, model: str, recipient: str) -> str:
    env = {wl.ENV_DATA_DIGEST: data, wl.ENV_MODEL_DIGEST: model, wl.ENV_RECIPIENT_DIGEST: recipient,
           **TAIL}
    expression = cs.uid_mapping_expression(include_data=True)
    return str(cel_eval(expression, assertion_for(IMAGE, env)))


SHIFTS = [
    (f"{DATA}::{MODEL}", RECIPIENT, ""),
    (DATA, f"{MODEL}::{RECIPIENT}", ""),
    (f"{DATA}:", f":{MODEL}", RECIPIENT),
    (DATA[:-1], DATA[-1] + "::" + MODEL, RECIPIENT),
    ("", f"{DATA}::{MODEL}", RECIPIENT),
    (f"{DATA}::{MODEL}::{RECIPIENT}", "", ""),
]


@pytest.mark.parametrize(("data", "model", "recipient"), SHIFTS)
def test_field_shifting_override_rejected(data: str, model: str, recipient: str) -> None:
    """An operator who moves a separator between overrides never reaches the approved uid (see
    the module docstring's argument), and both the enclave and the CEL clause refuse it."""
    assert _mapped(data, model, recipient) != identity().uid()
    env = {wl.ENV_DATA_DIGEST: data, wl.ENV_MODEL_DIGEST: model, wl.ENV_RECIPIENT_DIGEST: recipient,
           **TAIL}
    assert not cel_eval(cs.env_shape_condition(include_data=True), assertion_for(IMAGE, env))
    with pytest.raises(PolicyViolationError):
        wl.WorkloadIdentity.from_env_overrides(IMAGE, env)


pieces = st.sampled_from([DATA, MODEL, RECIPIENT, ":", "::", "-", "sha256:", "d" * 8, ""])


@settings(deadline=None)
@given(st.lists(pieces, max_size=6), st.lists(pieces, max_size=6), st.lists(pieces, max_size=6))
def test_only_genuine_overrides_map_to_the_approved_uid(
    a: list[str], b: list[str], c: list[str]
) -> None:
    data, model, recipient = "".join(a), "".join(b), "".join(c)
    expected = (data, model, recipient) == (DATA, MODEL, RECIPIENT)
    # what the CEL concat yields
    mapped = IMAGE + "::" + data + "::" + model + "::" + recipient + f"::{BENCH}::{PIN}"
    assert (mapped == identity().uid()) == expected


def test_shape_condition_accepts_real_digests() -> None:
    assertion = assertion_for(IMAGE, identity().env_overrides())
    assert cel_eval(cs.env_shape_condition(include_data=True), assertion)
    assert cel_eval(cs.env_shape_condition(include_data=False), assertion)


def test_from_claims_reads_env_overrides() -> None:
    claims = cs.AttestationClaims.model_validate(
        {
            "iss": "i",
            "aud": "a",
            "sub": "s",
            "iat": 1,
            "nbf": 1,
            "exp": 2,
            "secboot": True,
            "hwmodel": "GCP_AMD_SEV",
            "swname": "CONFIDENTIAL_SPACE",
            "swversion": ["251001"],
            "dbgstat": "disabled-since-boot",
            "submods": {
                "container": {
                    "image_reference": "r",
                    "image_digest": IMAGE,
                    "env_override": identity().env_overrides(),
                }
            },
        }
    )
    assert cs.workload_identity(claims) == identity()


def test_missing_data_override_optional_only_when_asked() -> None:
    env = identity(None).env_overrides()
    assert wl.ENV_DATA_DIGEST not in env
    with pytest.raises(PolicyViolationError) as info:
        wl.WorkloadIdentity.from_env_overrides(IMAGE, env)
    assert info.value.received == "absent"
    assert wl.WorkloadIdentity.from_env_overrides(IMAGE, env, require_data=False) == identity(None)


@pytest.mark.parametrize("name", [wl.ENV_MODEL_DIGEST, wl.ENV_RECIPIENT_DIGEST])
def test_malformed_override_rejected(name: str) -> None:
    env = identity().env_overrides()
    env[name] = "sha256:" + "G" * 64
    with pytest.raises(PolicyViolationError) as info:
        wl.WorkloadIdentity.from_env_overrides(IMAGE, env)
    assert info.value.claim == f"submods.container.env_override.{name}"
    assert "G" * 10 not in str(info.value)
    with pytest.raises(PolicyViolationError):
        wl.WorkloadIdentity.from_env_overrides(IMAGE, None)


def test_invalid_digests_refused_on_construction() -> None:
    with pytest.raises(ValueError):
        wl.WorkloadIdentity("latest", DATA, MODEL, RECIPIENT, BENCH, PIN)  # type: ignore[arg-type]
    for uid in ("", f"{IMAGE}::{DATA}::{MODEL}", f"{IMAGE}::x::{MODEL}::{RECIPIENT}::7::a/1",
                f"{IMAGE}::{DATA}::{MODEL}::{RECIPIENT}", f"{IMAGE}::{DATA}::{MODEL}::{RECIPIENT}"
                f"::7::{PIN}::extra"):
        with pytest.raises(ValueError):
            wl.WorkloadIdentity.from_uid(uid)


def test_principal_set_member() -> None:
    member = cs.principal_set("123456", "hospital-pool", identity().uid())
    assert member == (
        "principalSet://iam.googleapis.com/projects/123456/locations/global/"
        f"workloadIdentityPools/hospital-pool/attribute.workload_uid/{identity().uid()}"
    )
    with pytest.raises(ValueError):
        cs.principal_set("abc", "hospital-pool", identity().uid())
    with pytest.raises(ValueError):
        cs.principal_set("1", "Pool/../x", identity().uid())
    with pytest.raises(ValueError):
        cs.principal_set("1", "pool", "not-a-uid")
