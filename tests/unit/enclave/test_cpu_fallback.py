"""A GPU run that fell back to the CPU fails unless the run allowed it (issue 29): the evidence
attests a GPU (``submods.nvidia_gpu``), yet ONNX Runtime runs the model on its CPU provider (the
image did not find the driver). ``SEALBENCH_CPU_FALLBACK=true`` (``sealbench run
--allow-cpu-fallback``) only decides whether that fails the run."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sealbench.benchmarks.interface import ExecutionProvider
from sealbench.contract.errors import CpuFallbackRefused
from sealbench.contract.result import FAILURE_OBJECT
from sealbench.contract.spec import RunSpec
from sealbench.enclave.run import run_enclave


def _gpu_run(world: Any, spec: RunSpec) -> Any:
    attester = world.attester(spec)
    attester.launch = dataclasses.replace(attester.launch, gpu_cc_mode="ON")
    return run_enclave(spec.to_environ(), attester, access=lambda _run: world.access)


def test_a_gpu_run_on_the_cpu_fails_naming_the_providers(world: Any) -> None:
    with pytest.raises(CpuFallbackRefused) as info:
        _gpu_run(world, world.spec)  # this machine has no GPU: the CPU provider runs
    message = str(info.value)
    assert message.startswith("asked for a GPU, ONNX Runtime is running on the CPU: providers "
                              "available ")
    assert "CPUExecutionProvider" in message and "--allow-cpu-fallback" in message
    assert info.value.exit_code == 1
    record = json.loads((world.results() / FAILURE_OBJECT).read_bytes())
    assert record["error"] == "CpuFallbackRefused"


def test_the_run_may_allow_the_fallback(world: Any, caplog: pytest.LogCaptureFixture) -> None:
    report = _gpu_run(world, world.with_spec(allow_cpu_fallback="true"))
    assert report.execution_provider is ExecutionProvider.CPU  # still reported as such
    assert "allowed by the run" in caplog.text


def test_false_is_no_allowance(world: Any) -> None:
    with pytest.raises(CpuFallbackRefused):
        _gpu_run(world, world.with_spec(allow_cpu_fallback="false"))


def test_a_cpu_vm_is_not_concerned(world: Any) -> None:
    assert world.run().execution_provider is ExecutionProvider.CPU
