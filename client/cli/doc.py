"""``docs/cli.md`` from the CLI itself: every command's ``--help``, in the order the CLI lists
them, under the page's hand-written introduction (everything before the first ``## sealbench``
heading). ``python -m sealbench.client.cli.doc docs/cli.md`` rewrites the file; a test fails
when the file differs from what this renders, so the reference cannot go stale.

The role guides' commands (``guide_commands``) and the outputs they show, compared with a real
demo's (``compare_guide``); ``python -m sealbench.client.cli.doc --guides WORKDIR
docs/guide-*.md`` rewrites the shown outputs that no longer match from the demo serving from
WORKDIR (``sealbench demo --size small --cases 5 --serve --workdir WORKDIR``, run at
``COLUMNS=100``); with ``--all`` it rewrites every checked output, so that the ids and digests
of one guide come from one run."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from sealbench.client.cli import app

__all__ = [
    "ELISION", "GUIDE_COLUMNS", "GUIDE_WORKDIR", "READS", "GuideCommand", "ShownOutput", "clean",
    "command_path", "command_paths", "compare_guide", "demo_log_outputs", "guide_commands",
    "mismatch", "normalise", "regenerate_guide", "render", "run_read",
]

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
    implies (``(exit code N)``, else 0) and that output; ``unchecked`` is the reason given by
    a ``<!-- output not checked: REASON -->`` line just above its code block, if any."""

    guide: str
    argv: tuple[str, ...]
    exit_code: int
    output: str
    #: The shown output's lines in the guide (``lines[start:end]``).
    span: tuple[int, int] = (0, 0)
    unchecked: str = ""


_UNCHECKED = re.compile(r"<!-- output not checked: (.*?) -->")


def guide_commands(path: Path) -> list[GuideCommand]:
    """Every command a guide shows in its code blocks (``\\`` continuations joined, trailing
    ``# comments`` dropped)."""
    commands: list[GuideCommand] = []
    lines = path.read_text().splitlines()
    index = 0
    unchecked = ""
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith("```") and index > 1:
            marker = _UNCHECKED.fullmatch(lines[index - 2].strip())
            unchecked = marker.group(1) if marker else ""
        if not line.startswith("$ sealbench"):
            continue
        text = line[2:]
        while text.endswith("\\") and index < len(lines):
            text = text[:-1] + " " + lines[index].strip()
            index += 1
        output: list[str] = []
        start = index
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
        commands.append(GuideCommand(path.name, argv, int(code.group(1)) if code else 0, shown,
                                     (start, index), unchecked))
    return commands


# -- the output the guides show, checked against (and regenerated from) a real demo ---------------
#
# A guide shows a command's output under its ``$ sealbench ...`` line. That output comes from a
# real run: the demo's log (``demo.log`` in its work folder: every command it ran, each after its
# ``$ sealbench ...`` line) for the commands the demo plays, and, for the reads, the command run
# against the serving demo (``sealbench demo --serve``) at ``GUIDE_COLUMNS`` columns. Both sides
# are compared after ``normalise`` (what differs between two runs: ids, digests, ports, dates,
# durations, figures with a decimal point, table widths, the log records and progress bars on
# stderr); a shown line ``…`` stands for any number of real lines.

#: The width every shown output is rendered at (``COLUMNS``), in the check and the regeneration.
GUIDE_COLUMNS = 100
#: The work folder the guides name; a real run's own folder is shown as this one.
GUIDE_WORKDIR = "/tmp/sealbench-demo"  # noqa: S108 - a name shown in the docs, never written
#: A shown line that stands for any number of real lines.
ELISION = "…"
#: Commands that only read: run against the serving demo to get their real output.
READS = frozenset({
    ("profile", "ls"), ("whoami",), ("benchmark", "ls"), ("benchmark", "show"),
    ("benchmark", "results"), ("benchmark", "leaderboard"), ("benchmark", "definition"),
    ("benchmark", "progress"), ("association", "ls"), ("dataset", "show"),
    ("dataset", "budget"), ("model", "show"), ("keys", "show"), ("result", "ls"),
    ("audit", "verify"), ("inbox",), ("next",), ("test",),
})

_SINGLE = frozenset({("whoami",), ("login",), ("run",), ("inbox",), ("next",), ("test",)})
_PROGRESS = re.compile(r"━.*\d+/(?:\d+|\?) \d+:\d\d:\d\d\s*$")
#: A run id and a digest: what differs between two honest runs of the same command line too
#: (the mock's image digests derive from the enclave code).
_RUN_ID = (re.compile(r"\brun-\d{8}(?:T\d{6})?-[0-9a-f]{8}\b"), "run-<id>")
_DIGEST = (re.compile(r"\bsha256:[0-9a-f]{6,64}…?"), "sha256:<digest>")
_VARYING = (
    _RUN_ID,
    _DIGEST,
    (re.compile(r"\beyJ[\w.-]*…?"), "<token>"),
    (re.compile(r"\(\d+ characters\b"), "(<n> characters"),
    (re.compile(r"\b\d+ events\b"), "<n> events"),
    (re.compile(r"\bevent \d+\b"), "event <n>"),
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+"), "127.0.0.1:<port>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?"),
     "<date>"),
    (re.compile(r"\b\d+:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\b(?:root|kid) [0-9a-f]{8,}…?"), "<hex>"),
    (re.compile(r"vm/sealbench-[0-9a-f]{6}(?:\+[0-9a-f]{8})?"), "<log origin>"),
    (re.compile(r"-?\d+\.\d+(?:e[+-]?\d+)?"), "<x.y>"),
    (re.compile(r"\((?:[a-z]+ <x\.y> s(?:, )?)+"), "(<step times>"),  # the slowest steps first
    (re.compile(r"([━─═]){2,}"), r"\1"),
    (re.compile(r" {2,}"), " "),
)


def command_path(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command a guide line runs (``("benchmark", "ls")``, ``("whoami",)``)."""
    return argv[:1] if argv[:1] in _SINGLE else argv[:2]


def clean(output: str, workdir: str = GUIDE_WORKDIR) -> str:
    """A real output as a guide shows it: ``workdir`` written as ``GUIDE_WORKDIR``, without the
    log records (``WARNING ...`` and their continuation lines) and progress bars of stderr, and
    without trailing spaces."""
    lines: list[str] = []
    in_record = False
    for line in output.replace(workdir, GUIDE_WORKDIR).splitlines():
        if re.match(r"^(WARNING|INFO|DEBUG) ", line):
            in_record = True
            continue
        if in_record and line.startswith(" " * 9):
            continue
        in_record = False
        if _PROGRESS.search(line):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines).strip("\n")


def normalise(output: str) -> list[str]:
    """``output``'s lines with what differs between two real runs replaced by placeholders."""
    lines = []
    for line in clean(output).splitlines():
        if line.strip() == ELISION:
            lines.append(ELISION)
            continue
        for pattern, placeholder in _VARYING:
            line = pattern.sub(placeholder, line)
        lines.append(line.rstrip())
    return lines


def _shown(command: GuideCommand) -> str:
    return "\n".join(
        line for line in command.output.splitlines() if not re.fullmatch(r"\(exit code \d+\)", line)
    ).strip("\n")


def mismatch(shown: str, real: str) -> str | None:
    """``None`` when the shown output is the real one (both normalised; a shown ``…`` line
    matches any number of real lines), else a unified diff of the two."""
    expected, actual = normalise(shown), normalise(real)
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line == ELISION else re.escape(line) + "\n" for line in expected
    )
    text = "".join(line + "\n" for line in actual)
    if re.fullmatch(pattern, text):
        return None
    return "\n".join(difflib.unified_diff(
        expected, actual, "shown (normalised)", "real (normalised)", lineterm="", n=2))


def demo_log_outputs(log: str) -> list[tuple[tuple[str, ...], str]]:
    """Each command of a demo log (its arguments after ``sealbench``) with its output: the lines
    up to the next command or section (``== ...``)."""
    entries: list[tuple[tuple[str, ...], str]] = []
    current: tuple[str, ...] | None = None
    output: list[str] = []
    for line in [*log.splitlines(), "== end"]:
        if line.startswith(("$ sealbench ", "== ")):
            if current is not None:
                entries.append((current, "\n".join(output)))
            current = tuple(shlex.split(line[2:]))[1:] if line.startswith("$") else None
            output = []
        else:
            output.append(line)
    return entries


def _same_command(shown: tuple[str, ...], ran: tuple[str, ...], workdir: str) -> bool:
    # run ids and digests (an image's digest is derived from the code, so it moves with it)
    def key(argv: tuple[str, ...]) -> list[str]:
        keys = []
        for arg in argv:
            for pattern, placeholder in (_RUN_ID, _DIGEST):
                arg = pattern.sub(placeholder, arg)
            keys.append(arg.replace(workdir, GUIDE_WORKDIR))
        return keys
    return key(shown) == key(ran)


@dataclass(frozen=True)
class ShownOutput:
    """A shown output and the real ones it was compared with (``None``: none to compare:
    ``why`` says why)."""

    command: GuideCommand
    real: tuple[str, ...] | None
    why: str = ""
    #: The arguments of the demo's command whose output is ``real[0]`` (when from its log).
    ran: tuple[str, ...] = ()

    @property
    def problem(self) -> str | None:
        """``None`` when the shown output is one of the real ones, else the diff to the first."""
        if self.real is None:
            return None
        diffs = [mismatch(_shown(self.command), real) for real in self.real]
        if None in diffs:
            return None
        return f"{self.command.guide}: sealbench {' '.join(self.command.argv)}\n{diffs[0]}"


def run_read(argv: tuple[str, ...], workdir: Path) -> tuple[int, str]:
    """A read command run against the demo of ``workdir`` (its profiles), as a user at a
    terminal of ``GUIDE_COLUMNS`` columns sees it (stdout and stderr together)."""
    script = Path(sys.executable).parent / "sealbench"
    env = {**os.environ, "SEALBENCH_CONFIG_DIR": str(workdir / "config"),
           "COLUMNS": str(GUIDE_COLUMNS), "TERM": "dumb", "LANG": "C.UTF-8"}
    argv = tuple(a.replace(GUIDE_WORKDIR, str(workdir)) for a in argv)
    done = subprocess.run([str(script), *argv], env=env, stdout=subprocess.PIPE,  # noqa: S603
                          stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    return done.returncode, done.stdout


def compare_guide(path: Path, workdir: Path, log: str | None = None) -> list[ShownOutput]:
    """Every command of the guide at ``path`` with a shown output, and the real outputs it is
    compared with: a read's, run now against the serving demo of ``workdir``; any other's, from
    the demo's log (every entry with the same arguments, ids aside)."""
    entries = demo_log_outputs(log if log is not None else (workdir / "demo.log").read_text())
    compared = []
    for command in guide_commands(path):
        if not _shown(command):
            continue
        if command.unchecked:
            compared.append(ShownOutput(command, None, command.unchecked))
            continue
        if command_path(command.argv) in READS:
            code, output = run_read(command.argv, workdir)
            if code != command.exit_code:
                output += f"\n(exit code {code}, the guide shows {command.exit_code})"
            compared.append(ShownOutput(command, (clean(output, str(workdir)),)))
            continue
        same = [(argv, out) for argv, out in entries
                if _same_command(command.argv, argv, str(workdir))]
        compared.append(ShownOutput(
            command, tuple(clean(out, str(workdir)) for _, out in same) or None,
            "" if same else "neither a read nor a command the demo ran",
            same[0][0] if same else ()))
    return compared


def regenerate_guide(path: Path, workdir: Path, log: str | None = None, *,
                     everything: bool = False) -> str:
    """The guide at ``path`` with each shown output that no longer matches its real one
    replaced by the real one (with ``everything``, every checked one, so that ids and digests
    agree across the guide); an output that still matches is otherwise kept as written, and a
    replaced one keeps as many lines before and after its first ``…`` as it had."""
    lines = path.read_text().splitlines()
    stale = [item for item in compare_guide(path, workdir, log)
             if item.real is not None and (everything or item.problem is not None)]
    renamed: dict[str, str] = {}  # the guide's run ids -> the demo's, in the commands rewritten
    for item in sorted(stale, key=lambda item: item.command.span, reverse=True):
        for was, now in zip(item.command.argv, item.ran, strict=False):
            if was != now and _RUN_ID[0].fullmatch(was) and _RUN_ID[0].fullmatch(now):
                renamed[was] = now
        shown = [line.strip() for line in _shown(item.command).splitlines()]
        new = item.real[0].splitlines() if item.real else []
        if ELISION in shown:
            cut = shown.index(ELISION)
            tail = len(shown) - cut - 1
            if cut + tail < len(new):
                new = [*new[:cut], ELISION, *(new[len(new) - tail:] if tail else [])]
        code = re.search(r"\(exit code \d+\)", item.command.output)
        start, end = item.command.span
        lines[start:end] = [*new, *([code.group(0)] if code else [])]
    text = "\n".join(lines) + "\n"
    for was, now in renamed.items():
        text = text.replace(was, now)
    return text


def main(argv: list[str]) -> int:
    if argv[:1] == ["--guides"] and len(argv) >= 3:
        everything = "--all" in argv
        workdir, *guides = [a for a in argv[1:] if a != "--all"]
        for guide in guides:
            Path(guide).write_text(regenerate_guide(Path(guide), Path(workdir),
                                                    everything=everything))
            print(f"rewrote the stale outputs of {guide} from the demo in {workdir}")
        return 0
    path = Path(argv[0]) if argv else Path("docs/cli.md")
    path.write_text(render(introduction_of(path.read_text())))
    print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
