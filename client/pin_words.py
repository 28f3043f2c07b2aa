"""A benchmark pin in plain words, for the participants who read it (a hospital's ``benchmark
show``, ``test``): the pin's name stays the identifier, its variants are said
(``brats-2023-gli/1-64x64x48-exact``: "small grid 64x64x48; exact figures, no privacy
noise"). Pure: the words come from the pin's version alone."""

from __future__ import annotations

import re
from typing import Final

from sealbench.benchmarks.interface import EXACT_SUFFIX, POOLED_ONLY_SUFFIX
from sealbench.contract.pin import BenchmarkPin

__all__ = ["pin_in_words", "pin_with_words"]

_GRID: Final = re.compile(r"-(\d+)x(\d+)x(\d+)(?=$|-)")


def pin_in_words(pin: BenchmarkPin | str) -> str:
    """What the pin's variants mean: its grid when not the plug-in's full one, and how its
    figures are published (with privacy noise, exact, or only pooled inside the TEE)."""
    version = (pin if isinstance(pin, BenchmarkPin) else BenchmarkPin.parse(pin)).version
    words = []
    grid = _GRID.search(version)
    if grid:
        words.append(f"small grid {'x'.join(grid.groups())}")
    if version.endswith(EXACT_SUFFIX):
        words.append("exact figures, no privacy noise")
    elif version.endswith(POOLED_ONLY_SUFFIX):
        words.append("no per-site figures: only pooled inside the TEE, with privacy noise")
    else:
        words.append("figures with privacy noise")
    return "; ".join(words)


def pin_with_words(pin: BenchmarkPin | str) -> str:
    """The pin followed by its words in parentheses."""
    return f"{pin} ({pin_in_words(pin)})"
