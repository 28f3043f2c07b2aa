"""How the CLI shows what the registry and the plug-ins say, shared by the commands and by
``sealbench demo`` (which prints what the commands print): the pooled leaderboard's table
(``sealbench benchmark leaderboard``), a plug-in's compact result columns (``benchmark
results``) and a hospital's private per-case rows (``result open``). Rendering only: every value
comes from the registry or the plug-in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console

from sealbench.benchmarks.release import LocalExact
from sealbench.client.cli.common import table
from sealbench.client.registry.workflows import summary_of
from sealbench.server.schemas.leaderboard import PooledLeaderboard, PooledValuePublic

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, CaseResult, MetricRef

__all__ = [
    "BIAS_NOTE",
    "MOCK_BADGE",
    "case_cells",
    "case_columns",
    "column_titles",
    "print_table",
    "result_cells",
]

MOCK_BADGE = "mock TEE, not a confidential run"
BIAS_NOTE = ("* ±: the largest error the plug-in's method of computing the value can make beside "
             "noise and sampling (e.g. an AUROC read from score bins)")


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pooled(value: PooledValuePublic) -> str:
    if value.pooled is None or value.bias is None:
        return _fmt(value.pooled)
    return f"{value.pooled:.4f} ±{value.bias:.4f}*"


def _interval(value: PooledValuePublic) -> str:
    if value.ci95_low is None or value.ci95_high is None:
        return "-"
    return f"{value.ci95_low:.4f} to {value.ci95_high:.4f}"


def print_table(console: Console, board: PooledLeaderboard) -> None:
    label = next((m.label for m in board.metrics if m.key == board.metric), board.metric)
    rows = []
    for s in board.standings:
        v = s.values[0]
        rank = "-" if s.rank is None else f"{s.rank}{'=' if s.tied else ''}"
        span = "-" if v.site_min is None else f"{_fmt(v.site_min)} to {_fmt(v.site_max)}"
        model = f"{s.model_name} {s.model_version} (#{s.model_id})"
        rows.append((rank, model + (" ‡" if s.mock_tee else ""), _pooled(v), _interval(v),
                     v.n_sites, v.n_cases, span, "-" if v.i2 is None else f"{v.i2:.0%}"))
    table(f"leaderboard of benchmark {board.benchmark_id} ({board.plugin}): {label} pooled "
          f"over sites ({board.direction} is better)",
          ("rank", "model", "pooled", "95% CI", "sites", "cases", "site range", "I²"), rows,
          right=frozenset({"rank", "pooled", "95% CI", "sites", "cases", "site range", "I²"}),
          console=console)
    if any(s.values[0].pooled is not None and s.values[0].bias is not None
           for s in board.standings):
        console.print(BIAS_NOTE)
    if any(s.mock_tee for s in board.standings):
        console.print(f"‡ {MOCK_BADGE}: verified against a mock attestation issuer")
    console.print(f"Ranks: {board.rank_rule} ('=' marks a tie). Figures pooled from "
                  f"{board.scope}.")
    if board.withheld:
        console.print(f"{len(board.withheld)} result(s) withheld: "
                      + "; ".join(f"model {w.model_id} on dataset {w.dataset_id}: {w.reason}"
                                  for w in board.withheld))


# -- a plug-in's columns -------------------------------------------------------------------------


def column_titles(plugin: Benchmark) -> tuple[str, ...]:
    """Titles of the plug-in's compact columns (``Dice WT``, ``AUROC``)."""
    shown = plugin.presentation
    return tuple(shown.label(ref) for ref in shown.columns)


def _text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def result_cells(plugin: Benchmark, summary: Mapping[str, Any]) -> tuple[str, ...]:
    """The compact columns' values of a registry result's summary."""
    parsed = summary_of(plugin, summary)
    figures = {} if parsed is None else {f.ref: f.value for f in plugin.figures(parsed)}
    return tuple(_text(figures.get(ref)) for ref in plugin.presentation.columns)


def case_columns(plugin: Benchmark) -> tuple[MetricRef, ...]:
    """The compact columns a per-case table shows: those of per-case metrics (a dataset-level
    metric has no per-case value)."""
    shown = plugin.presentation
    return tuple(ref for ref in shown.columns if not shown.metric(ref.metric).dataset_level)


def case_cells(plugin: Benchmark, case: CaseResult) -> tuple[str, ...]:
    """One private per-case row: the case id, ``scored`` or ``failed: <reason>``, then its
    values of :func:`case_columns` (from the summary of that case alone; blank if failed)."""
    columns = case_columns(plugin)
    if case.failed:
        reason = case.to_json().get("reason")
        return (case.case_id, f"failed: {reason or 'no reason given'}", *("",) * len(columns))
    # the hospital's own case on its own machine: exact, no release noise
    figures = {f.ref: f.value for f in plugin.figures(plugin.summarise([case], LocalExact()))}
    return (case.case_id, "scored", *(_text(figures.get(ref)) for ref in columns))
