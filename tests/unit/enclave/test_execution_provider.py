"""Which ONNX Runtime execution provider ran the model travels from the plug-in's runner to the
enclave's report, its last log line and its ``done`` event, which the client parses: only a
known provider name ever does (a plug-in's free text is dropped, not forwarded)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.client.runs.outcome import execution_provider, step_timings
from sealbench.contract.events import ModelLoaded, RunDone, parse_event
from sealbench.enclave.run import timings_line
from sealbench.server.schemas.runs import EXECUTION_PROVIDERS


def test_interface_and_wire_know_the_same_providers() -> None:
    assert {p.value for p in api.ExecutionProvider} == EXECUTION_PROVIDERS


def test_brats_run_reports_and_logs_the_provider_with_its_timings(
    world: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.INFO, logger="sealbench"):
        report = world.run()
    assert report.execution_provider is api.ExecutionProvider.CPU  # no GPU here
    [last] = [r.getMessage() for r in caplog.records if "step timings" in r.getMessage()]
    assert last.endswith("; execution provider CPUExecutionProvider")  # the prose, for people
    # what the client reads back: the events, not the prose
    assert execution_provider(last) is None and step_timings(last) == {}
    events = [parse_event(line) for line in capsys.readouterr().out.splitlines()]
    [done] = [e for e in events if isinstance(e, RunDone)]
    assert [e for e in events if isinstance(e, ModelLoaded)] == [
        ModelLoaded(provider="CPUExecutionProvider")]
    assert execution_provider(done.to_line()) == "CPUExecutionProvider"
    assert step_timings(done.to_line()) == {k: round(v, 2) for k, v in report.timings.items()}


def test_a_runner_that_names_an_unknown_provider_reports_none(
    world: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
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
    out = capsys.readouterr().out
    assert "patient" not in out and "model_loaded" not in out
    [done] = [e for e in map(parse_event, out.splitlines()) if isinstance(e, RunDone)]
    assert done.provider is None


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
    assert line.endswith("; execution provider CUDAExecutionProvider")
    # the client reads the event, never the prose
    assert execution_provider(line) is None and step_timings(line) == {}
    event = RunDone(timings={"infer": 1.0}, provider="CUDAExecutionProvider")
    assert execution_provider(event.to_line()) == "CUDAExecutionProvider"
    assert step_timings(event.to_line()) == {"infer": 1.0}
    loaded = ModelLoaded(provider="CUDAExecutionProvider").to_line()
    assert execution_provider(loaded) == "CUDAExecutionProvider" and step_timings(loaded) == {}


@pytest.mark.parametrize("line", [
    RunDone(timings={"infer": 1.0}, provider="EvilExecutionProvider").to_line(),
    ModelLoaded(provider="EvilExecutionProvider").to_line(),
    'sealbench-event: {"v":2,"event":"done","timings":{"infer":1.0},'
    '"provider":"CUDAExecutionProvider x"}',
    RunDone(timings={"infer": 1.0}).to_line(),
    'done: step timings in seconds {"infer": 1.0}; execution provider CUDAExecutionProvider',
    "the model runs on ONNX Runtime's CUDAExecutionProvider",
    "step 3/7: execution provider CUDAExecutionProvider",
])
def test_client_takes_only_a_known_provider_from_an_event(line: str) -> None:
    assert execution_provider(line) is None
