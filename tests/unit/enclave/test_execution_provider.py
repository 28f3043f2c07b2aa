"""Which ONNX Runtime execution provider ran the model travels from the plug-in's runner to the
enclave's report and its last log line, which the client parses: only a known provider name
ever does (a plug-in's free text is dropped, not forwarded)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.client.runs.single import execution_provider, step_timings
from sealbench.enclave.run import timings_line
from sealbench.server.schemas.runs import EXECUTION_PROVIDERS


def test_interface_and_wire_know_the_same_providers() -> None:
    assert {p.value for p in api.ExecutionProvider} == EXECUTION_PROVIDERS


def test_brats_run_reports_and_logs_the_provider_with_its_timings(
    world: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sealbench"):
        report = world.run()
    assert report.execution_provider is api.ExecutionProvider.CPU  # no GPU here
    [last] = [r.getMessage() for r in caplog.records if "step timings" in r.getMessage()]
    assert last.endswith("; execution provider CPUExecutionProvider")
    # what the client reads back from that line
    assert execution_provider(last) == "CPUExecutionProvider"
    assert step_timings(last) == {k: round(v, 2) for k, v in report.timings.items()}


def test_a_runner_that_names_an_unknown_provider_reports_none(
    world: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Boasting:
        def __init__(self, benchmark: Any, model: bytes) -> None:
            self._inner = benchmark.load_model(model)

        def predict(self, case: Any) -> Any:
            return self._inner.predict(case)

        @property
        def execution_provider(self) -> str:
            return "CUDAExecutionProvider; patient BraTS-GLI-00001"

    with caplog.at_level(logging.INFO, logger="sealbench"):
        report = world.run(make_runner=Boasting)
    assert report.execution_provider is None
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "patient" not in text and "execution provider" not in text


def test_a_runner_that_does_not_say_reports_none(world: Any) -> None:
    class Silent:
        def __init__(self, benchmark: Any, model: bytes) -> None:
            self._inner = benchmark.load_model(model)

        def predict(self, case: Any) -> Any:
            return self._inner.predict(case)

    assert world.run(make_runner=Silent).execution_provider is None


def test_wdbc_runner_reports_the_cpu() -> None:
    plugin = PluginRegistry().get("wdbc")
    runner = plugin.load_model(plugin.model_bytes(plugin.shipped_models[0].name))
    assert api.execution_provider_of(runner) is api.ExecutionProvider.CPU


def test_timings_line_without_provider_is_the_old_line() -> None:
    assert timings_line({"infer": 1.0}, None) == 'done: step timings in seconds {"infer": 1.0}'
    line = timings_line({"infer": 1.0}, api.ExecutionProvider.CUDA)
    assert execution_provider(line) == "CUDAExecutionProvider"


@pytest.mark.parametrize("line", [
    'done: step timings in seconds {"infer": 1.0}; execution provider EvilExecutionProvider',
    'done: step timings in seconds {"infer": 1.0}; execution provider CUDAExecutionProvider x',
    "step 3/7: execution provider CUDAExecutionProvider",
    'done: step timings in seconds {"infer": 1.0}',
])
def test_client_takes_only_a_known_provider_from_the_timings_line(line: str) -> None:
    assert execution_provider(line) is None
