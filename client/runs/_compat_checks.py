"""The checks of the compatibility test (:mod:`sealbench.client.runs.compat`), each a pure step over
bytes and a prepared folder: the benchmark's rules, the model's digest and contract, the data
contract, inference, metrics and time per case. Failures are returned as checks, never raised."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from sealbench.benchmarks.release import LocalExact
from sealbench.client.pin_words import pin_with_words
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.manifest import MAX_MANIFEST_BYTES, Manifest
from sealbench.server.schemas import BenchmarkPublic

if TYPE_CHECKING:  # numpy, nibabel and onnxruntime load only when a test runs
    from sealbench.benchmarks.interface import (
        Benchmark,
        CaseResult,
        DatasetLayout,
        PublicSummary,
        Runner,
    )

__all__ = [
    "DEFAULT_MAX_SECONDS_PER_CASE",
    "Check",
    "CompatReport",
    "ModelUnderTest",
    "RunnerFactory",
    "plugin_of",
    "run_checks",
]

#: Seconds one case may take (inference and scoring) under the benchmark's registered contract.
DEFAULT_MAX_SECONDS_PER_CASE: Final = 120.0
_MAX_DATASET_JSON: Final = 1 << 20

Status = Literal["pass", "fail", "skip"]
RunnerFactory = Callable[["Benchmark", bytes], "Runner"]
"""Builds the runner of a model (default: the plug-in's ``load_model``, as the enclave does)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


@dataclass(frozen=True)
class ModelUnderTest:
    """The model's bytes, what to call it, and the digest the registry records for it (when
    the test knows which registry model it is)."""

    label: str
    data: bytes = field(repr=False)
    registry_id: int | None = None
    registered_digest: str | None = None


@dataclass(frozen=True)
class CompatReport:
    benchmark_id: int
    model: str
    data: str
    checks: tuple[Check, ...]
    summary: PublicSummary | None

    @property
    def passed(self) -> bool:
        return all(c.status == "pass" for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark_id": self.benchmark_id,
            "model": self.model,
            "data": self.data,
            "passed": self.passed,
            "checks": [
                {"name": c.name, "status": c.status, "detail": c.detail} for c in self.checks
            ],
            "summary": None if self.summary is None else self.summary.to_json(),
        }


# -- the checks -------------------------------------------------------------------------------


def plugin_of(benchmark: BenchmarkPublic) -> Benchmark | None:
    """The installed plug-in ``benchmark`` pins, bound to its registered data contract (None
    when it is not installed or refuses the contract)."""
    from sealbench.benchmarks.interface import BenchmarkError, bind_data_contract
    from sealbench.contract.errors import SpecError
    from sealbench.enclave.rules import benchmark_for

    try:
        return bind_data_contract(benchmark_for(benchmark.metrics_version),
                                  benchmark.data_contract)
    except (SpecError, BenchmarkError):
        return None


def _benchmark_check(benchmark: BenchmarkPublic) -> tuple[Check, Benchmark | None]:
    from sealbench.benchmarks.interface import BenchmarkError, bind_data_contract
    from sealbench.client.plugins import installed_pins
    from sealbench.contract.errors import SpecError
    from sealbench.enclave.rules import benchmark_for

    try:
        plugin = benchmark_for(benchmark.metrics_version)
    except SpecError as exc:
        installed = ", ".join(map(str, installed_pins())) or "none"
        return Check("benchmark", "fail",
                     f"{exc}; installed here: {installed}; upgrade sealbench or install the "
                     "benchmark's plug-in"), None
    differs: list[str] = []
    try:
        bound = bind_data_contract(plugin, benchmark.data_contract)
    except BenchmarkError as exc:
        differs.append(f"data contract ({exc})")
        bound = plugin
    if dict(benchmark.metrics_spec) != bound.metrics_spec():
        differs.append("metrics spec")
    if differs:
        return Check("benchmark", "fail",
                     f"the registered {' and '.join(differs)} differ from what plug-in "
                     f"{plugin.ref} enforces; the enclave scores by the plug-in, so tell the "
                     "benchmark's authority"), bound
    return Check("benchmark", "pass",
                 f"plug-in {pin_with_words(plugin.ref)}: the registered contract and metrics "
                 "are the ones the enclave enforces"), bound


def _digest_check(model: ModelUnderTest) -> Check | None:
    if model.registered_digest is None:
        return None
    actual = "sha256:" + hashlib.sha256(model.data).hexdigest()
    if actual != model.registered_digest:
        return Check("model digest", "fail",
                     f"the file has {actual}, registry model {model.registry_id} records "
                     f"{model.registered_digest}: this is not the registered model")
    return Check("model digest", "pass",
                 f"equals registry model {model.registry_id} ({actual[:19]}…)")


def _shape(dims: tuple[int | str | None, ...]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _model_check(model: ModelUnderTest, benchmark: Benchmark) -> Check:
    from sealbench.benchmarks.interface import ModelContractError

    try:
        report = benchmark.check_model(model.data)
    except ModelContractError as exc:
        return Check("model contract", "fail", str(exc))
    io = "; ".join(
        f"{role} {t.name!r} {_shape(t.shape)}"
        for role, tensors in (("input", report.inputs), ("output", report.outputs))
        for t in tensors)
    return Check("model contract", "pass", f"opset {report.opset}; {io}")


@dataclass(frozen=True)
class _Data:
    layout: DatasetLayout
    cases: tuple[Any, ...]
    digest: str


def _read_prepared(prepared: Path, benchmark: Benchmark) -> tuple[Check, _Data | None]:
    """Verify the prepared folder against its manifest, check ``dataset.json`` as the enclave
    does, and load every case (labels required)."""
    from sealbench.benchmarks.interface import BenchmarkError, CaseError

    where = benchmark.layout

    def read(rel: str, manifest: Manifest) -> bytes:
        entry = manifest.entry(rel)
        with (prepared / where.data_dir / rel).open("rb") as handle:
            data = handle.read(entry.size + 1)
        manifest.verify(rel, data)
        return data

    try:
        with (prepared / where.manifest_file).open("rb") as handle:
            manifest = Manifest.from_bytes(handle.read(MAX_MANIFEST_BYTES + 1))
        dataset_json = read(where.dataset_file, manifest)
        if len(dataset_json) > _MAX_DATASET_JSON:
            raise CaseError(f"{where.dataset_file} is larger than 1 MiB")
        layout = benchmark.open_dataset(dataset_json)
        grouped = layout.group(e.path for e in manifest.entries)
    except OSError as exc:
        return Check("data contract", "fail",
                     f"{prepared} is not a prepared dataset ({exc.strerror}: {exc.filename}); "
                     "prepare it with 'sealbench dataset prepare'"), None
    except (CryptoError, BenchmarkError) as exc:
        return Check("data contract", "fail", str(exc)), None
    cases: list[Any] = []
    problems: list[str] = []
    for case_id, paths in grouped.items():
        try:
            files = {path: read(path, manifest) for path in paths}
            cases.append(layout.load(files))
        except (OSError, CryptoError, CaseError) as exc:
            problems.append(f"{case_id}: {exc}")
    data = _Data(layout, tuple(cases), manifest.digest)
    if not grouped:
        return Check("data contract", "fail", "the dataset holds no cases"), None
    if problems:
        return Check("data contract", "fail",
                     f"{len(problems)} of {len(grouped)} cases do not load: "
                     + "; ".join(problems[:3])), data if cases else None
    return Check("data contract", "pass",
                 f"{len(cases)} cases, labels included; manifest {data.digest[:19]}… "
                 "verified"), data


def _seconds_check(seconds: list[float], cost_scale: float, limit: float) -> Check:
    mean = sum(seconds) / len(seconds)
    estimate = mean * max(cost_scale, 1.0)
    at_full = "" if cost_scale <= 1.0 else (
        f" (about {estimate:.1f} s under the benchmark's registered contract, "
        f"scaled by {cost_scale:.0f}x)")
    text = f"{mean:.2f} s per case{at_full}; limit {limit:g} s"
    return Check("time per case", "pass" if estimate <= limit else "fail", text)


def _headline(benchmark: Benchmark, summary: PublicSummary) -> str:
    shown = benchmark.presentation
    figures = {f.ref: f.value for f in benchmark.figures(summary)}
    cells = ", ".join(
        f"{shown.label(ref)} {'-' if figures.get(ref) is None else f'{figures[ref]:.3f}'}"
        for ref in shown.columns or (shown.headline,))
    return f"{cells} over {summary.n_cases} cases"


def _reason(result: CaseResult) -> str:
    reason = result.to_json().get("reason")
    return reason if isinstance(reason, str) else "failed"


def run_checks(
    benchmark: BenchmarkPublic,
    model: ModelUnderTest,
    prepared: Path,
    *,
    data_label: str,
    max_seconds_per_case: float = DEFAULT_MAX_SECONDS_PER_CASE,
    cost_scale: float = 1.0,
    variant: Benchmark | None = None,
    runner_factory: RunnerFactory | None = None,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[int, int], None] | None = None,
) -> CompatReport:
    """Every check of ``model`` on the prepared dataset ``prepared`` under ``benchmark``'s
    plug-in (see the module docstring). ``cost_scale``: how many times more a case costs under
    the registered contract than under the one the data was prepared for (demo variants).
    ``variant``: the benchmark's plug-in bound to the demo variant the data was prepared under
    (another grid, another pin): the model, data, inference and metrics checks run under it.
    Raises nothing for a failing model or dataset: failures are checks."""
    from sealbench.benchmarks.interface import BenchmarkError

    def report(*checks: Check | None, summary: PublicSummary | None = None) -> CompatReport:
        return CompatReport(benchmark.id, model.label, data_label,
                            tuple(c for c in checks if c is not None), summary)

    def skipped(*names: str) -> tuple[Check, ...]:
        return tuple(Check(n, "skip", "not run: an earlier check failed") for n in names)

    bench, plugin = _benchmark_check(benchmark)
    if plugin is not None and variant is not None:
        plugin = variant
    digest = _digest_check(model)
    if plugin is None:
        return report(bench, digest, *skipped("model contract", "data contract", "inference",
                                              "metrics", "time per case"))
    model_check = _model_check(model, plugin)
    data_check, data = _read_prepared(prepared, plugin)
    if model_check.status == "fail" or data is None:
        return report(bench, digest, model_check, data_check,
                      *skipped("inference", "metrics", "time per case"))
    try:
        runner = (runner_factory or _load)(plugin, model.data)
    except BenchmarkError as exc:
        return report(bench, digest, model_check, data_check,
                      Check("inference", "fail", f"the model does not load for inference: {exc}"),
                      *skipped("metrics", "time per case"))
    results: list[CaseResult] = []
    inference_failures: list[str] = []
    seconds: list[float] = []
    for done, case in enumerate(data.cases, start=1):
        start = clock()
        try:
            prediction = runner.predict(case)
        except BenchmarkError as exc:
            inference_failures.append(f"{case.case_id}: {exc}")
            results.append(plugin.failure(case.case_id, f"inference failed: {exc}"))
        else:
            results.append(plugin.score(case, prediction))
        seconds.append(clock() - start)
        if progress is not None:
            progress(done, len(data.cases))
    n = len(data.cases)
    inference = (
        Check("inference", "fail", f"{len(inference_failures)} of {n} cases failed: "
              + "; ".join(inference_failures[:3]))
        if inference_failures
        else Check("inference", "pass", f"{n} of {n} cases predicted")
    )
    # demo data on this machine, never published: the exact figures, no release noise
    summary = plugin.summarise(results, LocalExact())
    scoring_failures = [
        f"{r.case_id}: {_reason(r)}" for r in results
        if r.failed and not _reason(r).startswith("inference failed")
    ]
    if scoring_failures:
        metrics = Check("metrics", "fail", f"{len(scoring_failures)} of {n} predictions could "
                        "not be scored: " + "; ".join(scoring_failures[:3]))
    elif inference_failures:
        metrics = Check("metrics", "fail",
                        f"{sum(r.failed for r in results)} of {n} cases entered the summary as "
                        "failures; "
                        f"{_headline(plugin, summary)}")
    else:
        note = ("; a smaller variant than the benchmark's: not a quality figure"
                if cost_scale > 1.0 else "")
        metrics = Check("metrics", "pass",
                        f"{_headline(plugin, summary)} (the enclave's scoring{note})")
    timing = _seconds_check(seconds, cost_scale, max_seconds_per_case)
    return report(bench, digest, model_check, data_check, inference, metrics, timing,
                  summary=summary)


def _load(benchmark: Benchmark, weights: bytes) -> Runner:
    return benchmark.load_model(weights)
