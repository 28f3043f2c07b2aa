"""``sealbench benchmark score``: predictions on disk scored against truth on disk with a pin's
metrics, outside any enclave (a challenge's validation phase). Thin: options in, the library's
scorer (:mod:`sealbench.client.assets.score`) under a progress bar, the scores out."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from sealbench.benchmarks.interface import StoredScores
from sealbench.client.assets.score import file_scorer, write_scores
from sealbench.client.cli.common import err_console, plural, progress_bar
from sealbench.client.errors import ConfigError

__all__ = ["benchmark_score"]


def _csv_options(given: list[str]) -> dict[str, float]:
    """``NAME=NUMBER`` pairs as a mapping; ConfigError for anything else or a repeated name."""
    options: dict[str, float] = {}
    for item in given:
        name, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not name or math.isnan(number) or name in options:
            raise ConfigError(f"--csv-option {item!r} is not NAME=NUMBER (each name once)",
                              hint="e.g. --csv-option vol_threshold=20")
        options[name] = number
    return options


def benchmark_score(
    pin: Annotated[str, typer.Option(help="the plug-in pin whose metrics to use, e.g. "
                                     "brats-2025-gli/1, brats-2025-met/1, brats-2023-gli/1")],
    truth: Annotated[Path, typer.Option(help="folder of ground-truth label files (*.nii.gz)")],
    predictions: Annotated[Path, typer.Option(help="folder of predicted label files, each "
                                              "named to end with its case's id "
                                              "(e.g. ...00001-000.nii.gz)")],
    output_format: Annotated[str, typer.Option("--format", help="json (the official "
                                               "evaluator's summary) or csv (the official "
                                               "parser's table)")] = "json",
    output: Annotated[Path | None, typer.Option(help="file to write (written only once every "
                                                "case is scored); default: standard output")
                      ] = None,
    keep_going: Annotated[bool, typer.Option(help="record a case that cannot be scored as an "
                                             "error row (as the official evaluator does) "
                                             "instead of stopping")] = False,
    csv_mode: Annotated[str | None, typer.Option(
        help="with --format csv, the table's layout: 'seg' (default; the official parser's "
             "'seg') or, for the 2025 pins, 'mets' (its metastases mode: lesions split into "
             "large and small by volume)")] = None,
    csv_option: Annotated[list[str] | None, typer.Option(
        help="NAME=NUMBER, an option of --csv-mode (repeatable); mets takes vol_threshold "
             "(default 20) and overlap_threshold (default 0.1), as the official parser's "
             "--vol_threshold and --overlap_threshold")] = None,
) -> StoredScores:
    """Score predictions on disk against truth on disk with a pin's metrics, outside any
    enclave (a challenge's validation phase). Files are paired by case id as the official
    BraTS evaluator pairs them; a truth case without a prediction is listed in 'missings'."""
    if output_format not in ("json", "csv"):
        raise ConfigError(f"--format must be json or csv, received {output_format!r}")
    if output_format != "csv" and (csv_mode is not None or csv_option):
        raise ConfigError("--csv-mode and --csv-option apply to --format csv")
    options = _csv_options(csv_option or [])
    scorer = file_scorer(pin)
    with progress_bar(transient=True) as bar:
        task = bar.add_task(f"scoring with {scorer.ref}", total=None)

        def advance(_name: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        scores = scorer.score(truth, predictions, keep_going=keep_going, on_case=advance)
    if output_format == "json":
        data = scores.to_json() + b"\n"
    else:
        try:
            data = scores.to_csv(csv_mode, options)
        except ValueError as exc:
            raise ConfigError(str(exc), hint="see 'sealbench benchmark score --help'") from exc
    console = err_console()
    if scores.missings:
        console.print(f"{plural(len(scores.missings), 'truth case')} without a prediction "
                      f"(listed in missings): {', '.join(scores.missings)}")
    if scores.extras:
        console.print(f"{plural(len(scores.extras), 'prediction')} matching no truth case "
                      f"(ignored): {', '.join(scores.extras)}")
    if output is None:
        typer.echo(data.decode(), nl=False)
    else:
        write_scores(output, data)
        console.print(f"{plural(scores.n_scored, 'case')} scored; {output_format} in {output}")
    return scores
