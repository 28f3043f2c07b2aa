"""Predictions on disk scored against truth on disk with a benchmark pin's metrics, outside any
enclave (a challenge's validation phase, ``sealbench benchmark score``). The scoring is the
plug-in's (:class:`~sealbench.benchmarks.interface.ScoresFiles`, found through the plug-in
registry); this module resolves the pin, turns the plug-in's refusals into
:class:`~sealbench.client.errors.ConfigError` and writes the output atomically."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sealbench.benchmarks.interface import (
    BenchmarkError,
    BenchmarkPin,
    PluginNotFoundError,
    ScoresFiles,
    StoredScores,
)
from sealbench.client.errors import ConfigError
from sealbench.client.plugins import installed
from sealbench.crypto.files import write_private

__all__ = ["FileScorer", "file_scorer", "write_scores"]


@dataclass(frozen=True)
class FileScorer:
    """An installed plug-in that scores files on disk, with the pin it was loaded by."""

    ref: BenchmarkPin
    plugin: ScoresFiles

    def score(self, truth: Path, predictions: Path, *, keep_going: bool = False,
              on_case: Callable[[str, int, int], None] | None = None) -> StoredScores:
        """``predictions`` scored against ``truth`` (``on_case(name, done, total)`` after each
        case); ConfigError for a case that cannot be scored, unless ``keep_going``."""
        try:
            return self.plugin.score_files(truth, predictions, keep_going=keep_going,
                                           on_case=on_case)
        except BenchmarkError as exc:
            raise ConfigError(str(exc), hint="fix or remove that file and run again, or pass "
                              "--keep-going to record it as an error row as the official "
                              "evaluator does") from exc


def file_scorer(pin: str) -> FileScorer:
    """The plug-in pinned by ``pin``; ConfigError for a pin that is not installed or whose
    plug-in has no file scorer."""
    try:
        plugin = installed(BenchmarkPin.parse(pin))
    except (PluginNotFoundError, ValueError) as exc:
        raise ConfigError(str(exc), hint="'sealbench benchmark score' takes an installed pin, "
                          "e.g. brats-2025-gli/1 or brats-2023-gli/1") from exc
    if not isinstance(plugin, ScoresFiles):
        raise ConfigError(f"benchmark plug-in {plugin.ref} does not score files on disk",
                          hint="use a pin whose plug-in has a file scorer (brats-2023-gli/1, "
                          "brats-2025-gli/1, brats-2025-met/1 and their grid variants)")
    return FileScorer(plugin.ref, plugin)


def write_scores(path: Path, data: bytes) -> None:
    """``data`` written to ``path`` (its folder created) atomically, with mode 0600: a reader
    never sees a half-written file, and a failure leaves none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, data)
