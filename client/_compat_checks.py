"""The checks of the compatibility test (:mod:`sealbench.client.compat`), each a pure step over
bytes and a prepared folder: the benchmark's rules, the model's digest and contract, the data
contract, inference, metrics and time per case. Failures are returned as checks, never raised."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from sealbench.crypto.errors import CryptoError
from sealbench.crypto.manifest import MAX_MANIFEST_BYTES, Manifest
from sealbench.server.schemas import BenchmarkPublic

if TYPE_CHECKING:  # numpy, nibabel and onnxruntime load only when a test runs
    from sealbench.benchmarks.brats import BratsContract, Case, CaseResult, PublicSummary
    from sealbench.enclave.rules import BenchmarkRules

__all__ = [
    "DEFAULT_MAX_SECONDS_PER_CASE",
    "Check",
    "CompatReport",
    "ModelUnderTest",
    "SegmenterFactory",
    "run_checks",
]

#: Seconds one case may take (inference and scoring) at the benchmark's full grid.
DEFAULT_MAX_SECONDS_PER_CASE: Final = 120.0
_MAX_DATASET_JSON: Final = 1 << 20

Status = Literal["pass", "fail", "skip"]
SegmenterFactory = Callable[[bytes, "BratsContract"], Any]
"""Builds the segmenter of a model (default: :class:`OnnxSegmenter`, as the enclave does)."""


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
            "summary": None if self.summary is None else self.summary.model_dump(mode="json"),
        }


# -- the checks -------------------------------------------------------------------------------


def _benchmark_check(benchmark: BenchmarkPublic) -> tuple[Check, BenchmarkRules | None]:
    from pydantic import ValidationError

    from sealbench.benchmarks.brats import BratsContract, MetricsSpec
    from sealbench.enclave.errors import SpecError
    from sealbench.enclave.rules import METRICS_VERSIONS, rules_for

    try:
        rules = rules_for(benchmark.metrics_version)
    except SpecError:
        return Check("benchmark", "fail",
                     f"metrics version {benchmark.metrics_version!r} is not one this sealbench "
                     f"scores ({', '.join(sorted(METRICS_VERSIONS))}); upgrade sealbench"), None
    differs: list[str] = []
    try:
        registered = BratsContract.model_validate(benchmark.data_contract)
        if registered.with_shape(rules.contract.shape) != rules.contract:
            differs.append("data contract")
    except ValidationError:
        differs.append("data contract (unreadable)")
    try:
        if MetricsSpec.model_validate(benchmark.metrics_spec) != rules.metrics:
            differs.append("metrics spec")
    except ValidationError:
        differs.append("metrics spec (unreadable)")
    if differs:
        return Check("benchmark", "fail",
                     f"the registered {' and '.join(differs)} differ from what metrics version "
                     f"{rules.metrics_version} enforces; the enclave scores by the metrics "
                     "version, so tell the benchmark's authority"), rules
    return Check("benchmark", "pass",
                 f"metrics version {rules.metrics_version}: the registered contract and metrics "
                 "are the ones the enclave enforces"), rules


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


def _model_check(model: ModelUnderTest, contract: BratsContract) -> Check:
    from sealbench.benchmarks.brats import ModelContractError, check_model_contract

    try:
        report = check_model_contract(model.data, contract)
    except ModelContractError as exc:
        return Check("model contract", "fail", str(exc))
    return Check("model contract", "pass",
                 f"opset {report.opset}; input {report.input_name!r} [N,{report.input_channels},"
                 f"D,H,W] -> output {report.output_name!r} [N,{report.output_classes},D,H,W]; "
                 "dynamic spatial axes")


@dataclass(frozen=True)
class _Data:
    contract: BratsContract
    cases: tuple[Case, ...]
    digest: str


def _read_prepared(prepared: Path, rules: BenchmarkRules) -> tuple[Check, _Data | None]:
    """Verify the prepared folder against its manifest, check ``dataset.json`` as the enclave
    does, and load every case (labels required)."""
    from sealbench.benchmarks.brats import CaseError, case_files_from_manifest_paths
    from sealbench.benchmarks.brats import load_case_from_bytes as load
    from sealbench.benchmarks.brats.cases import DATASET_FILE
    from sealbench.benchmarks.brats.prepare import DATA_DIR, MANIFEST_FILE
    from sealbench.enclave.errors import AssetRejected

    def read(rel: str, manifest: Manifest) -> bytes:
        entry = manifest.entry(rel)
        with (prepared / DATA_DIR / rel).open("rb") as handle:
            data = handle.read(entry.size + 1)
        manifest.verify(rel, data)
        return data

    try:
        with (prepared / MANIFEST_FILE).open("rb") as handle:
            manifest = Manifest.from_bytes(handle.read(MAX_MANIFEST_BYTES + 1))
        contract = rules.contract_for_dataset(read(DATASET_FILE, manifest)[:_MAX_DATASET_JSON])
        grouped = case_files_from_manifest_paths((e.path for e in manifest.entries), contract)
    except OSError as exc:
        return Check("data contract", "fail",
                     f"{prepared} is not a prepared dataset ({exc.strerror}: {exc.filename}); "
                     "prepare it with 'sealbench dataset prepare'"), None
    except (CryptoError, AssetRejected, CaseError) as exc:
        return Check("data contract", "fail", str(exc)), None
    cases: list[Case] = []
    problems: list[str] = []
    for case_id, parts in grouped.items():
        try:
            files = {path: read(path, manifest) for path in parts.values()}
            cases.append(load(files, contract, require_seg=True))
        except (OSError, CryptoError, CaseError) as exc:
            problems.append(f"{case_id}: {exc}")
    data = _Data(contract, tuple(cases), manifest.digest)
    grid = "x".join(map(str, contract.shape))
    if not grouped:
        return Check("data contract", "fail", "the dataset holds no cases"), None
    if problems:
        return Check("data contract", "fail",
                     f"{len(problems)} of {len(grouped)} cases do not load: "
                     + "; ".join(problems[:3])), data if cases else None
    return Check("data contract", "pass",
                 f"{len(cases)} cases on {grid}, labels included; manifest {data.digest[:19]}… "
                 "verified"), data


def _seconds_check(seconds: list[float], tested: BratsContract, full: BratsContract,
                   limit: float) -> Check:
    mean = sum(seconds) / len(seconds)
    grid = "x".join(map(str, tested.shape))
    scale = full.n_voxels / tested.n_voxels
    estimate = mean * max(scale, 1.0)
    at_full = "" if scale <= 1.0 else (
        f" (about {estimate:.1f} s at the benchmark's {'x'.join(map(str, full.shape))} grid, "
        "scaled by voxel count)")
    text = f"{mean:.2f} s per case on {grid}{at_full}; limit {limit:g} s"
    return Check("time per case", "pass" if estimate <= limit else "fail", text)


def _means(summary: PublicSummary) -> str:
    dice = ", ".join(f"{r} {stats['dice'].mean:.3f}" for r, stats in summary.regions.items())
    return f"mean Dice {dice} over {summary.n_cases} cases"


def run_checks(
    benchmark: BenchmarkPublic,
    model: ModelUnderTest,
    prepared: Path,
    *,
    data_label: str,
    max_seconds_per_case: float = DEFAULT_MAX_SECONDS_PER_CASE,
    segmenter_factory: SegmenterFactory | None = None,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[int, int], None] | None = None,
) -> CompatReport:
    """Every check of ``model`` on the prepared dataset ``prepared`` under ``benchmark``'s rules
    (see the module docstring). Raises nothing for a failing model or dataset: failures are
    checks."""
    from sealbench.benchmarks.brats import (
        BenchmarkError,
        CaseFailure,
        OnnxSegmenter,
        aggregate,
        score_or_fail,
    )

    def report(*checks: Check | None, summary: PublicSummary | None = None) -> CompatReport:
        return CompatReport(benchmark.id, model.label, data_label,
                            tuple(c for c in checks if c is not None), summary)

    def skipped(*names: str) -> tuple[Check, ...]:
        return tuple(Check(n, "skip", "not run: an earlier check failed") for n in names)

    bench, rules = _benchmark_check(benchmark)
    digest = _digest_check(model)
    if rules is None:
        return report(bench, digest, *skipped("model contract", "data contract", "inference",
                                              "metrics", "time per case"))
    model_check = _model_check(model, rules.contract)
    data_check, data = _read_prepared(prepared, rules)
    if model_check.status == "fail" or data is None:
        return report(bench, digest, model_check, data_check,
                      *skipped("inference", "metrics", "time per case"))
    factory = segmenter_factory or OnnxSegmenter
    try:
        segmenter = factory(model.data, data.contract)
    except BenchmarkError as exc:
        return report(bench, digest, model_check, data_check,
                      Check("inference", "fail", f"the model does not load for inference: {exc}"),
                      *skipped("metrics", "time per case"))
    results: list[CaseResult] = []
    inference_failures: list[str] = []
    seconds: list[float] = []
    for done, case in enumerate(data.cases, start=1):
        assert case.seg is not None  # loaded with require_seg=True
        start = clock()
        try:
            prediction = segmenter.segment(case)
        except BenchmarkError as exc:
            inference_failures.append(f"{case.case_id}: {exc}")
            results.append(CaseFailure(case_id=case.case_id, reason=f"inference failed: {exc}"))
        else:
            results.append(score_or_fail(case.case_id, prediction, case.seg, rules.metrics,
                                         data.contract.spacing_mm))
        seconds.append(clock() - start)
        if progress is not None:
            progress(done, len(data.cases))
    n = len(data.cases)
    inference = (
        Check("inference", "fail", f"{len(inference_failures)} of {n} cases failed: "
              + "; ".join(inference_failures[:3]))
        if inference_failures
        else Check("inference", "pass", f"{n} of {n} cases segmented")
    )
    summary = aggregate(results, rules.metrics)
    scoring_failures = [
        f"{r.case_id}: {r.reason}" for r in results
        if isinstance(r, CaseFailure) and not r.reason.startswith("inference failed")
    ]
    if scoring_failures:
        metrics = Check("metrics", "fail", f"{len(scoring_failures)} of {n} predictions could "
                        "not be scored: " + "; ".join(scoring_failures[:3]))
    elif inference_failures:
        metrics = Check("metrics", "fail",
                        f"{summary.n_failed} of {n} cases entered the summary as failures; "
                        f"{_means(summary)}")
    else:
        smaller = data.contract.n_voxels < rules.contract.n_voxels
        note = "; a smaller grid than the benchmark's: not a quality figure" if smaller else ""
        metrics = Check("metrics", "pass", f"{_means(summary)} (the enclave's scoring{note})")
    timing = _seconds_check(seconds, data.contract, rules.contract, max_seconds_per_case)
    return report(bench, digest, model_check, data_check, inference, metrics, timing,
                  summary=summary)
