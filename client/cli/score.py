"""``sealbench benchmark score``: predictions on disk scored against truth on disk with a pin's
metrics, outside any enclave (a challenge's validation phase). The scoring is the plug-in's
(:class:`~sealbench.benchmarks.interface.ScoresFiles`, found through the plug-in registry);
this module resolves the pin, shows progress and writes the output atomically."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Annotated, Literal

import typer

from sealbench.benchmarks import registry
from sealbench.benchmarks.interface import (
    BenchmarkError,
    BenchmarkPin,
    PluginNotFoundError,
    ScoresFiles,
    StoredScores,
)
from sealbench.client.cli.common import err_console, plural, progress_bar
from sealbench.client.errors import ConfigError

__all__ = ["benchmark_score", "score_files", "write_atomically"]

Format = Literal["json", "csv"]


def score_files(pin: str, truth: Path, predictions: Path, *,
                keep_going: bool = False) -> StoredScores:
    """The plug-in pinned by ``pin`` scoring ``predictions`` against ``truth``; ConfigError for
    a pin that is not installed or has no file scorer, or a case that cannot be scored."""
    try:
        plugin = registry.load(BenchmarkPin.parse(pin))
    except (PluginNotFoundError, ValueError) as exc:
        raise ConfigError(str(exc), hint="'sealbench benchmark score' takes an installed pin, "
                          "e.g. brats-2025-gli/1 or brats-2023-gli/1") from exc
    if not isinstance(plugin, ScoresFiles):
        raise ConfigError(f"benchmark plug-in {plugin.ref} does not score files on disk",
                          hint="use a pin whose plug-in has a file scorer (brats-2023-gli/1, "
                          "brats-2025-gli/1, brats-2025-met/1 and their grid variants)")
    with progress_bar(transient=True) as bar:
        task = bar.add_task(f"scoring with {plugin.ref}", total=None)

        def advance(_name: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            return plugin.score_files(truth, predictions, keep_going=keep_going,
                                      on_case=advance)
        except BenchmarkError as exc:
            raise ConfigError(str(exc), hint="fix or remove that file and run again, or pass "
                              "--keep-going to record it as an error row as the official "
                              "evaluator does") from exc


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` written to a temporary file beside ``path`` and renamed over it: a reader
    never sees a half-written file, and a failure leaves none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    scores = score_files(pin, truth, predictions, keep_going=keep_going)
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
        write_atomically(output, data)
        console.print(f"{plural(scores.n_scored, 'case')} scored; {output_format} in {output}")
    return scores
