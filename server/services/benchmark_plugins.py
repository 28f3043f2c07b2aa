"""The registry's side of the benchmark seam: which plug-in (name and version) a benchmark
pins, and the check that a submitted summary validates against that plug-in's schema.

A result's ``summary`` is the run's ``summary.json`` (``sealbench/result-summary``): the pin
under ``metrics_version`` must be the benchmark's, and ``aggregates`` must be a summary the
installed plug-in accepts (:meth:`~sealbench.benchmarks.interface.Benchmark.parse_summary`). A
benchmark whose plug-in is not installed on the registry receives no result: nothing could say
what its summaries mean.

A **withheld** summary (the enclave's small-cell rule, :class:`sealbench.contract.result.
WithheldSummary`: no aggregates, the rule and counts) is accepted as a withheld result when it
is well formed and consistent with the plug-in's minimum; it is stored and never ranked.

Which plug-in a pin names is a :data:`PluginLookup` passed in (the installed plug-ins,
:func:`sealbench.benchmarks.registry.load`, unless the app was built with another, as tests do
with a fake plug-in).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from sealbench.benchmarks.interface import (
    Benchmark,
    BenchmarkError,
    BenchmarkPin,
    PublicSummary,
    publishes_site_release,
)
from sealbench.benchmarks.registry import load
from sealbench.contract.result import ResultSummary
from sealbench.server.errors import PluginNotInstalledError, ResultRejectedError
from sealbench.server.schemas.inbox import ReleaseTerms

if TYPE_CHECKING:
    from sealbench.benchmarks.release import ReleaseSpec

__all__ = [
    "RESULT_SUMMARY_FORMAT",
    "PluginLookup",
    "declared_release",
    "plugin_of",
    "release_terms",
    "validate_summary",
    "withheld_of",
]

#: The plug-in a pin names; :class:`BenchmarkError` when there is none.
PluginLookup: TypeAlias = Callable[[BenchmarkPin], Benchmark]

RESULT_SUMMARY_FORMAT = "sealbench/result-summary"


def plugin_of(metrics_version: BenchmarkPin, plugins: PluginLookup = load) -> Benchmark:
    """The installed plug-in ``metrics_version`` pins; 422 (``plugin_not_installed``) naming it
    when it is not installed."""
    try:
        return plugins(metrics_version)
    except BenchmarkError as exc:
        raise PluginNotInstalledError(
            f"the registry cannot validate results of this benchmark: {exc}") from None


def declared_release(
    metrics_version: BenchmarkPin, plugins: PluginLookup = load
) -> ReleaseSpec | None:
    """The release a benchmark's installed plug-in declares; None when the plug-in is not
    installed here or declares none."""
    try:
        plugin = plugins(metrics_version)
    except BenchmarkError:
        return None
    spec: ReleaseSpec | None = getattr(plugin, "release_spec", None)
    return spec


def release_terms(
    metrics_version: BenchmarkPin, plugins: PluginLookup = load
) -> ReleaseTerms | None:
    """What each run of a benchmark pinning ``metrics_version`` publishes (its plug-in's
    declared release), or None when the plug-in is not installed here."""
    spec = declared_release(metrics_version, plugins)
    if spec is None:
        return None
    if spec.exact:
        return ReleaseTerms(exact=True, epsilon=None, delta=None)
    return ReleaseTerms(exact=False, epsilon=spec.epsilon,
                        delta=None if spec.mechanism == "laplace" else spec.delta)


_COMMITMENT: Final = re.compile(r"sha256:[0-9a-f]{64}")


def validate_summary(
    metrics_version: BenchmarkPin, summary: Mapping[str, Any], plugins: PluginLookup = load
) -> PublicSummary | None:
    """The public summary inside a submitted ``summary.json``, validated by the benchmark's
    plug-in, or None for a withheld one (:func:`withheld_of`); 422 saying what is wrong (never
    echoing values)."""
    plugin = plugin_of(metrics_version, plugins)
    if summary.get("format") != RESULT_SUMMARY_FORMAT or summary.get("version") != 1:
        raise ResultRejectedError(f"summary: expected a {RESULT_SUMMARY_FORMAT} version 1 "
                                  "document (the run's summary.json)")
    if summary.get("metrics_version") != str(metrics_version):
        raise ResultRejectedError(
            f"summary: computed with another benchmark plug-in than {metrics_version}")
    commitment = summary.get("pool_statistics")
    if commitment is not None and not (
            isinstance(commitment, str) and _COMMITMENT.fullmatch(commitment)):
        # the aggregator's inputs repeat it: a malformed one would fail every pool it joins
        raise ResultRejectedError("summary: pool_statistics is not a sha256: commitment")
    if withheld_of(plugin, summary):
        return None
    aggregates = summary.get("aggregates")
    if not isinstance(aggregates, Mapping):
        raise ResultRejectedError("summary: no aggregates object")
    try:
        return plugin.parse_summary(aggregates)
    except BenchmarkError as exc:
        raise ResultRejectedError(
            f"summary: does not validate against {plugin.ref}'s schema ({exc})") from None


def withheld_of(plugin: Benchmark, summary: Mapping[str, Any]) -> bool:
    """Whether ``summary`` is a withheld run summary; 422 when it claims to be one but is not
    well formed or not what ``plugin``'s small-cell rule withholds (the counts are attested by
    the result token, so this only refuses a document no enclave of this plug-in writes).
    Under a ``-pool`` pin (issue 41) every summary is withheld by the rule ``pooled``: one
    carrying a per-site release is refused (no enclave of that pin draws one, and the
    benchmark's owners consented to none), and the rule ``pooled`` under any other pin."""
    pooled_only = not publishes_site_release(plugin)
    if summary.get("withheld") is None:
        if pooled_only:
            raise ResultRejectedError(
                f"summary: {plugin.ref} publishes no per-site release (its pooled release "
                "only), yet this summary carries one; nothing was stored or charged")
        return False
    try:
        doc = ResultSummary.model_validate(dict(summary))
    except ValueError:
        raise ResultRejectedError("summary: a malformed withheld summary") from None
    held = doc.withheld
    if held is None or doc.aggregates:
        raise ResultRejectedError("summary: a withheld summary carries no aggregates")
    if (held.rule == "pooled") != pooled_only:
        raise ResultRejectedError(
            f"summary: withheld for pooling only, but {plugin.ref} publishes per-site releases"
            if held.rule == "pooled" else
            f"summary: {plugin.ref} withholds every summary for its pooled release only "
            "(rule 'pooled'), not by the small-cell rule")
    if held.minimum != plugin.small_cell_minimum or (
            held.rule == "cases" and held.n_cases >= held.minimum):
        raise ResultRejectedError(
            f"summary: withheld, but not as {plugin.ref}'s small-cell rule withholds")
    return True
