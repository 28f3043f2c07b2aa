"""A result document read or built with the plug-in its pin names: the benchmark-specific half of
:mod:`sealbench.contract.result`.

The contract holds the wire formats (the summary's ``aggregates`` and each per-case entry are
opaque JSON objects there); what they mean is the plug-in's, so validating them, and building the
public summary the enclave publishes, live here, one floor up from the contract.
"""

from __future__ import annotations

from collections.abc import Sequence

from sealbench.benchmarks.interface import (
    Benchmark,
    BenchmarkPin,
    CaseResult,
    PublicSummary,
    SmallCellError,
    SummaryError,
    check_small_cells,
    publishes_site_release,
)
from sealbench.benchmarks.release import NoiseSource
from sealbench.contract.result import (
    PerCaseResults,
    ResultFormatError,
    ResultSummary,
    WithheldSummary,
)

__all__ = ["case_results", "public_summary", "summary_aggregates"]


def _check_plugin(metrics_version: BenchmarkPin, benchmark: Benchmark) -> None:
    if benchmark.ref != metrics_version:
        raise ResultFormatError(
            f"the document is of benchmark plug-in {str(metrics_version)!r}, not {benchmark.ref}")


def summary_aggregates(summary: ResultSummary, benchmark: Benchmark) -> PublicSummary:
    """The summary's aggregates validated by ``benchmark`` (the plug-in its ``metrics_version``
    pins); :class:`ResultFormatError` otherwise (a withheld summary has none)."""
    _check_plugin(summary.metrics_version, benchmark)
    if summary.withheld is not None:
        raise ResultFormatError("the summary was withheld (small-cell rule): no aggregates")
    try:
        return benchmark.parse_summary(summary.aggregates)
    except SummaryError as exc:
        raise ResultFormatError(f"invalid summary: {exc}") from exc


def case_results(per_case: PerCaseResults, benchmark: Benchmark) -> tuple[CaseResult, ...]:
    """The sealed per-case results validated by ``benchmark``; :class:`ResultFormatError`
    otherwise."""
    _check_plugin(per_case.metrics_version, benchmark)
    try:
        return tuple(benchmark.parse_case_result(case) for case in per_case.cases)
    except SummaryError as exc:
        raise ResultFormatError(f"invalid per-case result: {exc}") from exc


def public_summary(
    benchmark: Benchmark, results: Sequence[CaseResult], noise: NoiseSource
) -> tuple[dict[str, object], WithheldSummary | None]:
    """The aggregates to publish (the plug-in's release, noise drawn from ``noise``), or none
    and why they are withheld (the small-cell rule in :mod:`sealbench.enclave.publish`). The
    data owner's ``result open`` recomputes this without noise and checks the published release
    against it."""
    minimum = benchmark.small_cell_minimum
    if not publishes_site_release(benchmark):
        # a -pool pin (issue 41): the pooled release is the one public figure; no noise is
        # drawn here, so no per-site release exists to be charged or leaked
        return {}, WithheldSummary(rule="pooled", n_cases=len(results), minimum=minimum)
    summary = benchmark.summarise(results, noise)
    try:
        check_small_cells(benchmark, summary)
    except SmallCellError:
        return {}, WithheldSummary(rule="cases", n_cases=summary.n_cases, minimum=minimum)
    doc = summary.to_json()
    try:
        benchmark.parse_summary(doc)
    except SummaryError:
        return {}, WithheldSummary(rule="bins", n_cases=summary.n_cases, minimum=minimum)
    return doc, None
