"""``docs/cli.md`` from the CLI itself: every command's ``--help``, in the order the CLI lists
them, under the page's hand-written introduction (everything before the first ``## sealbench``
heading). ``python -m sealbench.client._cli_doc docs/cli.md`` rewrites the file; a test fails
when the file differs from what this renders, so the reference cannot go stale."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from sealbench.client.cli import app

__all__ = ["GuideCommand", "command_paths", "guide_commands", "render"]

_WIDTH = 80
_FIRST = "## sealbench\n"


def command_paths(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path below ``group`` (a group before its commands), in the order the
    CLI lists them. (Typer vendors its own click, so groups are recognised by their shape.)"""
    ctx = group.context_class(group, info_name="sealbench")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = (*prefix, name)
        yield path
        if hasattr(command, "list_commands"):
            yield from command_paths(command, path)


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(
        app, [*path, "--help"], prog_name="sealbench", terminal_width=_WIDTH, env={"COLUMNS": "80"}
    )
    if result.exit_code != 0:
        raise RuntimeError(f"sealbench {' '.join(path)} --help failed: {result.output}")
    return result.output.rstrip() + "\n"


def render(introduction: str) -> str:
    """The whole page: ``introduction`` then one section per command."""
    root = typer.main.get_command(app)
    sections = [f"## sealbench\n\n```\n{_help(())}```\n"]
    for path in command_paths(root):
        sections.append(f"## sealbench {' '.join(path)}\n\n```\n{_help(path)}```\n")
    return introduction + "\n".join(sections)


def introduction_of(page: str) -> str:
    """The hand-written part of ``page``: everything before the first command section."""
    index = page.find(_FIRST)
    return page if index < 0 else page[:index]


@dataclass(frozen=True)
class GuideCommand:
    """A ``$ sealbench ...`` line of a guide: its arguments, the exit code its shown output
    implies (``(exit code N)``, else 0) and that output."""

    guide: str
    argv: tuple[str, ...]
    exit_code: int
    output: str


def guide_commands(path: Path) -> list[GuideCommand]:
    """Every command a guide shows in its code blocks (``\\`` continuations joined, trailing
    ``# comments`` dropped)."""
    commands: list[GuideCommand] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.startswith("$ sealbench"):
            continue
        text = line[2:]
        while text.endswith("\\") and index < len(lines):
            text = text[:-1] + " " + lines[index].strip()
            index += 1
        output: list[str] = []
        while index < len(lines) and not lines[index].startswith(("$ ", "```")):
            output.append(lines[index])
            index += 1
        shown = "\n".join(output)
        code = re.search(r"\(exit code (\d+)\)", shown)
        words = shlex.split(text, comments=True)
        for cut, word in enumerate(words):  # a shell redirection or pipe ends the command
            if word in (">", ">>", "|", "<"):
                words = words[:cut]
                break
        argv = tuple(words)[1:]
        commands.append(GuideCommand(path.name, argv, int(code.group(1)) if code else 0, shown))
    return commands


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path("docs/cli.md")
    path.write_text(render(introduction_of(path.read_text())))
    print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
