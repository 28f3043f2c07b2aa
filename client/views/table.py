"""The console the client prints results on, and its tables: boxed when they read at the
console's width, else stacked blocks, one per row; ids, run ids and digests never cut. Shared by
the CLI's commands and ``sealbench demo``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from rich.console import Console
from rich.table import Table

__all__ = ["out", "table"]


def out() -> Console:
    """The console for results (stdout). Created per call so test runners can swap streams."""
    return Console(highlight=False, soft_wrap=True, markup=False)


#: Columns whose values are looked up or copied (ids, run ids, digests, names, pins): they never
#: wrap (a name cut mid-word cannot be copied), so the other columns fold instead, or the table
#: is stacked.
_WHOLE_COLUMNS = frozenset({
    "id", "run", "run id", "digest", "image digest", "benchmark", "dataset", "model", "asset",
    "owner", "initiated by", "last actor", "prepared for", "name", "metrics", "pin",
})


#: The narrowest a folding column may become before a table is stacked instead: below this a
#: word is cut into pieces too small to read (a 9-column table at 80 columns once gave each
#: column one character).
_MIN_FOLDED = 12


def _fits(console_width: int, columns: Sequence[str], cells: list[list[str]]) -> bool:
    """Whether a boxed table of ``cells`` reads at ``console_width``: whole columns at their
    widest value, folding ones at their widest or :data:`_MIN_FOLDED`, whichever is less."""
    need = 3 * len(columns) + 1  # borders and one space of padding each side
    for index, column in enumerate(columns):
        widest = max([len(column), *(len(row[index]) for row in cells)])
        need += widest if column in _WHOLE_COLUMNS else min(widest, _MIN_FOLDED)
    return need <= console_width


def _stacked(console: Console, title: str | None, columns: Sequence[str],
             cells: list[list[str]]) -> None:
    """What a table too wide for the console becomes: per row, its first field on a line of its
    own, then its other non-empty fields as ``column: value`` joined by `` · `` and wrapped at
    the console's width (a field too long for a line puts its value alone on the next line,
    never cut)."""
    if title:
        console.print(title, style="bold")
    room = console.width - 2
    for row in cells:
        console.print(f"{columns[0]}: {row[0]}")
        line = ""
        for column, value in zip(columns[1:], row[1:], strict=True):
            if not value:
                continue
            field = f"{column}: {value}"
            if line and len(line) + 3 + len(field) <= room:
                line += " · " + field
                continue
            if line:
                console.print(f"  {line}")
            line = field
            if len(field) > room:  # the value alone on the next line, whole
                console.print(f"  {column}:")
                console.print(f"    {value}")
                line = ""
        if line:
            console.print(f"  {line}")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]], *,
          right: frozenset[str] = frozenset(), console: Console | None = None) -> None:
    """Print ``rows`` as a table under ``title`` (``right``: columns aligned right, figures)
    on ``console`` (default :func:`out`); when it cannot read at the console's width (see
    :func:`_fits`), as stacked blocks, one per row. Ids, run ids and digests are never cut."""
    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    console = console or out()
    if cells and not _fits(console.width, columns, cells):
        _stacked(console, title, columns, cells)
        return
    t = Table(title=title, title_justify="left", header_style="bold")
    for index, column in enumerate(columns):
        justify: Literal["left", "right"] = "right" if column in right else "left"
        if column in _WHOLE_COLUMNS:
            widest = max((len(row[index]) for row in cells), default=0)
            t.add_column(column, no_wrap=True, min_width=max(widest, len(column)),
                         justify=justify)
        else:
            t.add_column(column, overflow="fold", justify=justify)
    for row in cells:
        t.add_row(*row)
    console.print(t)
