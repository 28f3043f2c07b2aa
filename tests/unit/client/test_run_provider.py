"""The client's side of the execution provider (issue 18): the runner takes it from the
enclave's last line into the local run record and the registry's run report, where the
progress matrix shows it; a name outside the known set never leaves this machine."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs.batch import RetryPolicy, Runner, plan_runs
from sealbench.client.runs.launchers import EnclaveRunFailed, LaunchResult, OutputFn
from sealbench.client.runs.records import RunRecord, RunStore, report_of
from sealbench.client.views.render import breakdown as _breakdown
from sealbench.contract.events import CasesCounted, ModelLoaded, RunDone, StepStarted
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.spec import RunSpec
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate
from tests.unit.client.test_runner import _spec

IMAGE = sha256_digest(b"evaluation image")
CUDA_LINE = RunDone(timings={"infer": 1.5, "load": 0.5},
                    provider="CUDAExecutionProvider").to_line()
#: What the enclave logged before its event lines, and still logs for people: no longer read.
PROSE_LINE = ('done: step timings in seconds {"infer": 1.5, "load": 0.5}; '
              "execution provider CUDAExecutionProvider")


class _Workload:
    def __init__(self, lines: tuple[str, ...], failure: Exception | None,
                 on_output: OutputFn | None) -> None:
        self._lines, self._failure, self._on_output = lines, failure, on_output

    @property
    def pid(self) -> int | None:
        return None

    def kill(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> LaunchResult:
        for line in self._lines:
            if self._on_output is not None:
                self._on_output(line)
        if self._failure is not None:
            raise self._failure
        return LaunchResult(IMAGE, 0.1, 1024)


class _Launcher:
    """Each model's workload prints ``lines[model]`` and ends as ``failures`` says."""

    def __init__(self, lines: dict[int, tuple[str, ...]],
                 failures: dict[int, Exception] | None = None) -> None:
        self._lines, self._failures = lines, failures or {}

    @property
    def image_digest(self) -> str:
        return IMAGE

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> _Workload:
        model = int(spec.model.asset_id)
        return _Workload(self._lines.get(model, ()), self._failures.get(model), on_output)

    def launch(self, spec: RunSpec, *, on_output: OutputFn | None = None,
               timeout: float | None = None) -> LaunchResult:
        return self.start(spec, on_output=on_output).wait(timeout)


def _run(launcher: _Launcher, store: RunStore, models: tuple[int, ...], *, benchmark: int = 1,
         dataset: int = 10, client: RegistryClient | None = None) -> list[RunRecord]:
    runner = Runner(launcher, store, _spec, tee="mock", client=client,  # type: ignore[arg-type]
                    retry=RetryPolicy(attempts=1), rand=lambda: 0.0)
    plan = plan_runs(store, benchmark_id=benchmark, pairs=[(dataset, m) for m in models],
                     image_digest=IMAGE, metrics_version=BenchmarkPin.parse("brats-2023-gli/1"))
    return list(runner.run(plan).records)


def test_provider_lands_in_the_record_the_report_and_the_summary_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    [record] = _run(_Launcher({1: (
        StepStarted(index=5, total=7, name="segment and score the cases").to_line(),
        CasesCounted(total=2).to_line(), CUDA_LINE)}), store, (1,))
    assert record.status == "succeeded"
    assert record.execution_provider == "CUDAExecutionProvider"
    assert store.get(record.run_id).execution_provider == "CUDAExecutionProvider"  # on disk
    assert record.step_seconds == {"infer": 1.5, "load": 0.5, "launch": record.step_seconds
                                   ["launch"]}
    assert report_of(record).execution_provider == "CUDAExecutionProvider"
    assert _breakdown(record).endswith("; on CUDAExecutionProvider)")


def test_a_failed_run_keeps_the_provider_it_ran_on(tmp_path: Path) -> None:
    # said as soon as the model is loaded: the run's last lines may never be read
    loaded = ModelLoaded(provider="CUDAExecutionProvider").to_line()
    launcher = _Launcher({1: (loaded,)}, {1: EnclaveRunFailed(1, "enclave error", None)})
    [record] = _run(launcher, RunStore(tmp_path), (1,))
    assert (record.status, record.execution_provider) == ("failed", "CUDAExecutionProvider")


def test_prose_lines_are_not_read(tmp_path: Path) -> None:
    lines = (PROSE_LINE, "the model runs on ONNX Runtime's CUDAExecutionProvider",
             "step 5/7: case 1/2 done")
    [record] = _run(_Launcher({1: lines}), RunStore(tmp_path), (1,))
    assert record.status == "succeeded" and record.execution_provider is None
    assert record.step_seconds is not None and set(record.step_seconds) == {"launch"}


def test_an_unknown_provider_is_not_recorded_nor_reported(tmp_path: Path) -> None:
    line = RunDone(timings={"infer": 1.5}, provider="PatientNameExecutionProvider").to_line()
    [record] = _run(_Launcher({1: (line,)}), RunStore(tmp_path), (1,))
    assert record.execution_provider is None and record.step_seconds is not None
    assert "PatientName" not in report_of(record).model_dump_json()


def test_a_record_from_before_the_field_reads_and_reports_none() -> None:
    record = RunRecord(run_id="run-old", benchmark_id=1, dataset_id=10, model_id=1, tee="mock",
                       image_digest=IMAGE, result_uri="file:///x", status="succeeded",
                       started_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert RunRecord.model_validate_json(record.model_dump_json(exclude={
        "execution_provider"})).execution_provider is None
    assert report_of(record).execution_provider is None
    assert "provider" not in _breakdown(record)


def test_registry_progress_shows_the_provider_each_run_reported(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate],
    tmp_path: Path,
) -> None:
    b = api["authority"].create_benchmark(benchmark_body()).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(DatasetCreate(
        name="d", digest=sha256_digest(b"data"), case_count=1)).id
    api["hospital"].request_association("dataset", b, d)
    api["authority"].decide_association("dataset", b, d, approve=True)
    models = []
    for i in range(2):
        m = api["modelco"].register_model(
            ModelCreate(name=f"m{i}", version="1", digest=sha256_digest(b"w%d" % i))).id
        api["modelco"].request_association("model", b, m)
        api["authority"].decide_association("model", b, m, approve=True)
        models.append(m)
    cpu_line = CUDA_LINE.replace("CUDAExecutionProvider", "CPUExecutionProvider")
    launcher = _Launcher({models[0]: (CUDA_LINE,), models[1]: (cpu_line,)})
    _run(launcher, RunStore(tmp_path), tuple(models), benchmark=b, dataset=d,
         client=api["hospital"])
    board: Any = api["authority"].benchmark_progress(b)
    assert {c.model_id: c.execution_provider for c in board.cells} == {
        models[0]: "CUDAExecutionProvider", models[1]: "CPUExecutionProvider"}
    assert {r.execution_provider for r in api["hospital"].list_runs(b)} == {
        "CUDAExecutionProvider", "CPUExecutionProvider"}
