"""``sealbench benchmark leaderboard``: the pooled leaderboard (issue 15) as a table, JSON or CSV.

The registry pools every model over the sites the caller may read (case-weighted, 95%
intervals, between-site spread, rank groups); this module only renders its answer (the table:
:func:`sealbench.client.views.render.print_table`, which ``sealbench demo`` prints too). The CSV has
one row per (model, metric) with ``model, model_id, metric, rank, tied, n_sites, n_cases,
pooled, ci95_low, ci95_high, site_min, site_max, i2, mock_tee, epsilon, bias`` and one column per
site. The table marks a pooled value whose plug-in method has an error beside noise and sampling
(``bias``: an AUROC from score bins) as ``0.9640 ±0.0020*``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session
from sealbench.client.views.render import print_table
from sealbench.server.schemas.leaderboard import to_csv

__all__ = ["OutputFormat", "benchmark_leaderboard", "print_table", "to_csv"]


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


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
