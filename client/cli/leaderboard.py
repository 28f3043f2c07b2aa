"""``sealbench benchmark leaderboard``: the pooled leaderboard (issue 15) as a table, JSON or CSV.

The registry pools every model over the sites the caller may read (case-weighted, 95%
intervals, between-site spread, rank groups); this module only renders its answer. The CSV has
one row per (model, metric) with ``model, model_id, metric, rank, tied, n_sites, n_cases,
pooled, ci95_low, ci95_high, site_min, site_max, i2, mock_tee, epsilon, bias`` and one column per
site. The table marks a pooled value whose plug-in method has an error beside noise and sampling
(``bias``: an AUROC from score bins) as ``0.9640 ±0.0020*``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session, table
from sealbench.server.schemas.leaderboard import PooledLeaderboard, PooledValuePublic, to_csv

__all__ = ["OutputFormat", "benchmark_leaderboard", "print_table", "to_csv"]

MOCK_BADGE = "mock TEE, not a confidential run"
BIAS_NOTE = ("* ±: the largest error the plug-in's method of computing the value can make beside "
             "noise and sampling (e.g. an AUROC read from score bins)")


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


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


def benchmark_leaderboard(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    metric: Annotated[
        str | None, typer.Option(help="rank by this metric ('dice', 'dice:WT', 'auroc', ...; "
                                 "default: the benchmark's headline); unknown names list the "
                                 "valid ones")
    ] = None,
    site: Annotated[
        list[int] | None, typer.Option(help="only this dataset id (repeatable)")
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="table, json or csv (csv: every metric "
                                   "unless --metric)")
    ] = OutputFormat.TABLE,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Every model pooled over the sites you may read: case-weighted figure, 95% interval,
    sites and cases, between-site range and I²; models whose intervals overlap share a rank."""
    chosen = OutputFormat.JSON if json_out else fmt
    with session(profile) as s:
        board = s.client.pooled_leaderboard(
            benchmark_id, metric=metric, sites=tuple(site or ()),
            all_metrics=chosen is OutputFormat.CSV and metric is None)
    if chosen is OutputFormat.JSON:
        emit_json(board)
    elif chosen is OutputFormat.CSV:
        typer.echo(to_csv(board), nl=False)
    else:
        print_table(out(), board)
