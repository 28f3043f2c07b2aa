"""What the pooled leaderboard reads of each result, computed by the benchmark plug-in when the
result is accepted and stored beside it (``result_statistics``, written in the transaction that
stores the result), so that the board's first request after a start reads numbers instead of
parsing every summary.

A row holds, as the plug-in computed them:

* the result's own figures (:meth:`~sealbench.benchmarks.interface.Benchmark.figures` of its
  summary: value, interval, spread and bias per metric key), its case count, the privacy loss of
  its release (ε, δ), whether its token came from a mock issuer, and why it is withheld (the
  enclave withheld its summary, or the plug-in cannot read it), if it is;
* the **pool** of its model at that moment: :meth:`~sealbench.benchmarks.interface.Benchmark.
  pool` over the latest result of the model on each site of the benchmark (this one included)
  that the board pools (readable, not under the small-cell minimum), with the ids pooled.
  ``pool`` takes the plug-in's own summary objects, which only ``parse_summary`` makes, so no
  compact form of the releases can stand in for them without widening the plug-in interface; the
  pooled figures are stored instead. The board uses a stored pool only when its ids are exactly
  the results it pools (the whole board: the authority's, a published one, a model owner's
  view of their model); a subset (a hospital's own sites, a site filter) or a pool overtaken by
  a concurrent accept is pooled from the summaries of just those results.

A row names the plug-in pin that computed it and a :data:`FORMAT` version: a row of another pin
or format is ignored (computed again in process). Migration 0012 backfilled the results stored
before it; a result without a row (one a plug-in not installed at migration time could not read,
or one inserted by hand) is computed from its summary when the board first reads it and cached
in process, never written by a read.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sealbench.benchmarks import interface as api
from sealbench.platforms.platform import attests_hardware
from sealbench.server.models import Result, ResultStatistics

__all__ = [
    "FORMAT",
    "Statistics",
    "StoredPool",
    "decode",
    "encode",
    "metric_key",
    "poolable",
    "pooled_figures",
    "read",
    "record",
    "statistics_of",
]

_log = logging.getLogger("sealbench.server")

#: The version of the stored form (figures as ``[value, low, high, spread, bias]``).
FORMAT: Final = 1


def metric_key(ref: api.MetricRef) -> str:
    """``dice`` or ``dice:WT``: how the API, the CLI and the page name a metric."""
    return ref.metric if ref.group is None else f"{ref.metric}:{ref.group}"


@functools.lru_cache(maxsize=1024)
def _ref(key: str) -> api.MetricRef:
    metric, sep, group = key.partition(":")
    return api.MetricRef(metric, group if sep else None)


@dataclass(frozen=True)
class StoredPool:
    """The plug-in's pooled figures of exactly the results ``results``."""

    results: frozenset[int]
    figures: Mapping[str, api.Figure]


@dataclass(frozen=True)
class Statistics:
    """One result as the board reads it. ``reason`` set: withheld or unreadable (never pooled
    or shown); ``figures`` by metric key, the values the site published."""

    n_cases: int
    figures: Mapping[str, api.Figure]
    reason: str | None = None
    mock_tee: bool = True
    epsilon: float | None = None
    delta: float | None = None
    pool: StoredPool | None = None


def read(plugin: api.Benchmark, doc: Any, issuer: str
         ) -> tuple[Statistics, api.PublicSummary | None]:
    """A stored summary (bare, or inside a run summary's ``aggregates``) read by the plug-in:
    its statistics and the parsed summary (None when withheld or unreadable); ``issuer`` is the
    result token's (only the verifier of a platform that is not a mock attests a confidential
    run)."""
    mock = not attests_hardware(issuer)
    held = doc.get("withheld") if isinstance(doc, dict) else None
    if isinstance(held, dict):
        if held.get("rule") == "pooled":
            return Statistics(0, {}, "no per-site release: the benchmark publishes its pooled "
                              "release only (pooled in the TEE over every current site)",
                              mock), None
        why = ("a histogram bin under the plug-in's minimum" if held.get("rule") == "bins"
               else f"fewer than {plugin.small_cell_minimum} cases")
        return Statistics(0, {}, f"withheld by the enclave: {why} (small-cell rule)", mock), None
    inner = doc.get("aggregates", doc) if isinstance(doc, dict) else doc
    try:
        summary = plugin.parse_summary(inner)
        # the site's value is the figure it published: its own release's, not a re-pooling
        published = plugin.figures(summary)
    except (api.BenchmarkError, ValueError, TypeError) as exc:
        return Statistics(0, {}, f"summary not readable by {plugin.ref}: {exc}", mock), None
    released = api.release_of(summary)
    return Statistics(
        summary.n_cases, {metric_key(f.ref): f for f in published}, None, mock,
        None if released is None else released.epsilon,
        None if released is None else released.delta), summary


def poolable(plugin: api.Benchmark, stats: Statistics) -> bool:
    """Whether the board pools a result: readable and not under the small-cell minimum."""
    return stats.reason is None and stats.n_cases >= plugin.small_cell_minimum


def pooled_figures(plugin: api.Benchmark, summaries: Sequence[api.PublicSummary]
                   ) -> dict[str, api.Figure]:
    """The plug-in's pooled figures of ``summaries`` by metric key."""
    return {metric_key(f.ref): f for f in plugin.pool(summaries).figures}


# -- the stored form ---------------------------------------------------------------------------


def _figures_doc(figures: Mapping[str, api.Figure]) -> dict[str, Any]:
    return {k: [f.value, f.low, f.high, f.spread, f.bias] for k, f in figures.items()}


def _figures_of(doc: Mapping[str, Any]) -> dict[str, api.Figure]:
    return {k: api.Figure(_ref(k), *v) for k, v in doc.items()}


def encode(result_id: int, plugin: api.Benchmark, stats: Statistics) -> ResultStatistics:
    """The row storing ``stats`` of result ``result_id``."""
    pool = None if stats.pool is None else {
        "results": sorted(stats.pool.results), "figures": _figures_doc(stats.pool.figures)}
    return ResultStatistics(
        result_id=result_id, plugin=str(plugin.ref), format=FORMAT, n_cases=stats.n_cases,
        reason=stats.reason, mock_tee=stats.mock_tee, epsilon=stats.epsilon, delta=stats.delta,
        figures=_figures_doc(stats.figures), pool=pool)


def decode(plugin: api.Benchmark, row: ResultStatistics | Any) -> Statistics | None:
    """The statistics a stored row holds, or None for a row of another pin or format (or one
    that does not decode), which the caller computes again."""
    if row.plugin != str(plugin.ref) or row.format != FORMAT:
        return None
    try:
        pool = None if row.pool is None else StoredPool(
            frozenset(int(i) for i in row.pool["results"]), _figures_of(row.pool["figures"]))
        return Statistics(row.n_cases, _figures_of(row.figures), row.reason, row.mock_tee,
                          row.epsilon, row.delta, pool)
    except (KeyError, TypeError, ValueError):
        return None


# -- at accept ---------------------------------------------------------------------------------


def _pool_of(plugin: api.Benchmark, read_rows: Iterable[tuple[int, Statistics,
                                                               api.PublicSummary | None]]
             ) -> StoredPool | None:
    pooled = [(rid, summary) for rid, stats, summary in read_rows
              if summary is not None and poolable(plugin, stats)]
    if not pooled:
        return None
    try:
        figures = pooled_figures(plugin, [s for _, s in pooled])
    except (api.BenchmarkError, ValueError, TypeError):
        return None  # the board tries again (and says why) when it pools these results
    return StoredPool(frozenset(rid for rid, _ in pooled), figures)


def statistics_of(session: Session, plugin: api.Benchmark, result: Result) -> Statistics:
    """``result``'s statistics with its model's pool over the latest result on each site of
    the benchmark (``result`` flushed, so it is the latest on its own site)."""
    stats, summary = read(plugin, result.summary, result.token_issuer)
    latest = (select(func.max(Result.id))
              .where(Result.benchmark_id == result.benchmark_id,
                     Result.model_id == result.model_id)
              .group_by(Result.dataset_id))
    others = session.execute(
        select(Result.id, Result.token_issuer, Result.summary)
        .where(Result.id.in_(latest), Result.id != result.id)).all()
    rows = [(result.id, stats, summary),
            *((rid, *read(plugin, doc, issuer)) for rid, issuer, doc in others)]
    return Statistics(stats.n_cases, stats.figures, stats.reason, stats.mock_tee,
                      stats.epsilon, stats.delta, _pool_of(plugin, rows))


def record(session: Session, plugin: api.Benchmark, result: Result) -> Statistics | None:
    """Store ``result``'s statistics in the caller's transaction (the one storing the result,
    after it is flushed). They are derived from the stored summary and safe to lose, so a
    plug-in that fails to compute them (a bug in it, not a bad summary: that is a ``reason``)
    never refuses a verified result: nothing is stored, and the board reads the result from its
    summary and says what is wrong."""
    try:
        stats = statistics_of(session, plugin, result)
    except Exception:  # noqa: BLE001 - a plug-in's bug must not refuse a verified result
        _log.warning("plug-in %s did not compute the statistics of result %s; the board reads "
                     "it from its summary", plugin.ref, result.id, exc_info=True)
        return None
    session.add(encode(result.id, plugin, stats))
    return stats
