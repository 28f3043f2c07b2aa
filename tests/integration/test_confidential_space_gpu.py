"""Confidential GPUs (issue 18): the Compute request ``--accelerator nvidia-h100-80gb`` builds,
and the key-release rule for GPU preview images. GPU images attest ``support_attributes:
["EXPERIMENTAL"]``, which the STABLE rule refuses; a benchmark's explicit opt-in accepts them
only with ``submods.nvidia_gpu.cc_mode == 'ON'``, both in the CEL condition Google (and the mock
STS, with the same cel-python) evaluates and in the policy that verifies result tokens.

The mock's Compute stand-in attests a GPU VM the same way (checked below against the same
policy; the whole run against it is ``test_gpu_run_standin.py``). No GPU machine was available:
nothing here ran on an H100."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from google.cloud import compute_v1

from sealbench.contract.inputs import ConditionContext
from sealbench.crypto.errors import PolicyViolationError
from sealbench.gcp import confidential_space as cs
from sealbench.gcp.launcher import (
    ConfidentialSpaceError,
    VmSettings,
    instance_resource,
)
from tests.unit.enclave.test_operator_inputs import IMAGE, _claims, _released
from tests.unit.gcp.test_confidential_space import (
    POLICY,
    jwks,
    production_payload,
    sign,
    signing_key,
    verify,
)

__all__ = ["jwks", "signing_key"]  # the fixtures, re-used

REF = "europe-docker.pkg.dev/p/r/eval@sha256:" + "a" * 64


def _settings(**changes: Any) -> VmSettings:
    base: dict[str, Any] = {"project": "hospital", "zone": "us-central1-a",
                            "service_account": "runner@hospital.iam.gserviceaccount.com",
                            "image_reference": REF, "tee": "TDX",
                            "accelerator": "nvidia-h100-80gb"}
    return VmSettings(**{**base, **changes})


def _rest(instance: compute_v1.Instance) -> dict[str, Any]:
    """The JSON body the REST client sends to Compute's instances.insert."""
    import json

    body: dict[str, Any] = json.loads(compute_v1.Instance.to_json(instance))
    return body


def test_gpu_request_is_a_confidential_h100_vm_on_the_preview_image() -> None:
    body = _rest(instance_resource(_settings(), "sealbench-eval-1", {"tee-env-X": "1"}))
    assert body["machineType"] == "zones/us-central1-a/machineTypes/a3-highgpu-1g"
    assert body["guestAccelerators"] == [{
        "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-h100-80gb",
        "acceleratorCount": 1}]
    assert body["confidentialInstanceConfig"] == {"confidentialInstanceType": "TDX"}
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    disk = body["disks"][0]["initializeParams"]["sourceImage"]
    assert disk == ("projects/confidential-space-images/global/images/family/"
                    "confidential-space-preview-cgpu")
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["tee-install-gpu-driver"] == "true" and items["tee-image-reference"] == REF
    debug = _rest(instance_resource(_settings(debug=True), "sealbench-eval-1", {}))
    assert debug["disks"][0]["initializeParams"]["sourceImage"].endswith(
        "/confidential-space-debug-preview-cgpu")


def test_cpu_request_unchanged_without_accelerator() -> None:
    body = _rest(instance_resource(_settings(accelerator=None), "sealbench-eval-1", {}))
    assert not body.get("guestAccelerators") and not body["scheduling"].get("provisioningModel")
    assert body["machineType"].endswith("/c3-standard-4")
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith("/confidential-space")
    items = {i["key"] for i in body["metadata"]["items"]}
    assert "tee-install-gpu-driver" not in items


@pytest.mark.parametrize(("changes", "message"), [
    ({"tee": "SEV"}, "run on TDX machines"),
    ({"accelerator": "nvidia-a100"}, "unknown accelerator"),
    ({"machine_type": "c3-standard-4"}, "needs machine type a3-highgpu-1g"),
])
def test_impossible_gpu_settings_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfidentialSpaceError, match=message):
        _settings(**changes)


def test_the_run_spec_cannot_switch_the_gpu_driver_metadata() -> None:
    with pytest.raises(ValueError, match="tee-install-gpu-driver"):
        instance_resource(_settings(), "n", {"tee-install-gpu-driver": "false"})


# -- key release ------------------------------------------------------------------------------


def _gpu_claims(cc_mode: str | None, support: list[str] | None = None) -> dict[str, Any]:
    claims = copy.deepcopy(_claims(None))
    claims["submods"]["confidential_space"]["support_attributes"] = support or ["EXPERIMENTAL"]
    if cc_mode is not None:
        claims["submods"]["nvidia_gpu"] = {"cc_mode": cc_mode}
    return claims


def _ctx(opt_in: bool, image: str = IMAGE) -> ConditionContext:
    return ConditionContext(frozenset({IMAGE}), True,
                            experimental_gpu_images=frozenset({image} if opt_in else ()),
                            experimental_benchmark_ids=frozenset({"7"} if opt_in else ()))


def test_stable_rule_refuses_a_gpu_image_without_the_opt_in() -> None:
    assert _released(_claims(None), _ctx(False))
    assert not _released(_gpu_claims("ON"), _ctx(False))


def test_opt_in_releases_to_a_gpu_image_only_in_cc_mode_on() -> None:
    assert _released(_gpu_claims("ON"), _ctx(True))
    assert _released(_claims(None), _ctx(True))  # CPU runs of the benchmark still work
    for mode in ("OFF", "DEVTOOLS", "on"):
        assert not _released(_gpu_claims(mode), _ctx(True)), mode
    assert not _released(_gpu_claims(None), _ctx(True))  # no GPU claim at all
    # the opt-in is per image: a benchmark with another image opting in opens nothing here
    assert not _released(_gpu_claims("ON"), _ctx(True, image="sha256:" + "9" * 64))
    # a debug image (no support attributes, dbgstat enabled) stays refused
    debug = _gpu_claims("ON")
    debug["dbgstat"] = "enabled"
    assert not _released(debug, _ctx(True))


def _gpu_payload(cc_mode: str | None) -> dict[str, Any]:
    payload = production_payload()
    payload["submods"]["confidential_space"]["support_attributes"] = ["EXPERIMENTAL"]
    if cc_mode is not None:
        payload["submods"]["nvidia_gpu"] = {"cc_mode": cc_mode}
    return payload


def test_result_token_policy_follows_the_same_rule(signing_key: Any, jwks: Any) -> None:
    opted = cs.AttestationPolicy(
        allowed_image_digests=POLICY.allowed_image_digests,
        expected_env_overrides=POLICY.expected_env_overrides,
        expected_nonce=POLICY.expected_nonce, accept_experimental_gpu=True)
    on = verify(sign(signing_key, _gpu_payload("ON")), jwks)
    with pytest.raises(PolicyViolationError, match="support_attributes"):
        POLICY.check(on)
    opted.check(on)
    opted.check(verify(sign(signing_key, production_payload()), jwks))
    for mode in ("OFF", "DEVTOOLS", None):
        claims = verify(sign(signing_key, _gpu_payload(mode)), jwks)
        with pytest.raises(PolicyViolationError, match=r"nvidia_gpu\.cc_mode"):
            opted.check(claims)


def test_launcher_selection_passes_the_accelerator() -> None:
    """What ``run --tee confidential-space --accelerator nvidia-h100-80gb`` builds (the CLI picks
    TDX for a GPU run; SEV is refused with a hint)."""
    from sealbench.client.backends import (
        LaunchSettingsError,
        confidential_space_launcher,
    )

    common: dict[str, Any] = {
        "project": "hospital", "zone": "us-central1-a",
        "service_account": "runner@hospital.iam.gserviceaccount.com", "image_reference": REF,
        "debug": False, "keep_vm": False, "credentials": None,
        "api_endpoint": "http://127.0.0.1:9", "accelerator": "nvidia-h100-80gb"}
    launcher = confidential_space_launcher(tee="TDX", **common)
    settings = launcher.settings  # type: ignore[attr-defined]
    assert settings.accelerator == "nvidia-h100-80gb" and settings.tee == "TDX"
    with pytest.raises(LaunchSettingsError, match="TDX"):
        confidential_space_launcher(tee="SEV", **common)


def test_platform_verify_takes_the_opt_in_from_the_requirements(
    signing_key: Any, jwks: Any
) -> None:
    """The registry's result verification path (WorkloadRequirements, which carries the
    benchmark's accept_experimental) reaches the same rule."""
    from sealbench.platforms.platform import WorkloadRequirements
    from tests.unit.gcp.test_confidential_space import NOW

    base = {"allowed_image_digests": POLICY.allowed_image_digests,
            "expected_env_overrides": POLICY.expected_env_overrides,
            "expected_nonce": POLICY.expected_nonce}
    platform = cs.ConfidentialSpacePlatform()
    token = sign(signing_key, _gpu_payload("ON"))
    common: dict[str, Any] = {"issuer": cs.CONFIDENTIAL_SPACE_ISSUER,
                              "audience": production_payload()["aud"], "now": NOW}
    with pytest.raises(PolicyViolationError, match="support_attributes"):
        platform.verify(token, jwks, requirements=WorkloadRequirements(**base), **common)
    opted = WorkloadRequirements(**base, accept_experimental_gpu=True)
    assert platform.verify(token, jwks, requirements=opted, **common).image_digest in (
        POLICY.allowed_image_digests)
    with pytest.raises(PolicyViolationError, match="cc_mode"):
        platform.verify(sign(signing_key, _gpu_payload("OFF")), jwks, requirements=opted,
                        **common)


def test_segmenter_prefers_cuda_when_onnx_runtime_lists_it() -> None:
    """The provider choice from ONNX Runtime's list: onnxruntime-gpu (the GPU image) lists CUDA
    first-class; the CPU image does not. On this machine (CPU build) the session runs on CPU."""
    import onnxruntime as ort

    from sealbench.benchmarks.brats.inference import choose_providers

    gpu_list = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers(gpu_list) == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert choose_providers(list(ort.get_available_providers())) == ["CPUExecutionProvider"]


def test_stand_in_gpu_claims_meet_exactly_the_opt_in_rule() -> None:
    """The claims the mock's Compute stand-in mints for a confidential-GPU VM (what the preview
    image attests) pass the production policy only with the opt-in, as a real GPU token does."""
    from sealbench.mocktee.verifier import WorkloadLaunch, build_claims

    digest = "sha256:" + "a" * 64
    launch = WorkloadLaunch(digest, REF, hwmodel="GCP_INTEL_TDX", gpu_cc_mode="ON")
    claims = cs.claims_from_payload(
        build_claims(launch, issuer="i", audience="a", nonces=(), now=1))
    assert claims.submods.nvidia_gpu is not None and claims.submods.nvidia_gpu.cc_mode == "ON"
    with pytest.raises(PolicyViolationError, match="support_attributes"):
        cs.AttestationPolicy(frozenset({digest})).check(claims)
    cs.AttestationPolicy(frozenset({digest}), accept_experimental_gpu=True).check(claims)
