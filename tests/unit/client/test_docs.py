"""The reference and the guides cannot go stale: ``docs/cli.md`` is exactly what the CLI's own
``--help`` renders, and every command a role guide shows parses with the current CLI (command
path, option names and types, required options). The read-only guide commands are also run
against a live demo registry (``tests/e2e/test_demo.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from sealbench.client._cli_doc import GuideCommand, guide_commands, introduction_of, render
from sealbench.client.cli import app

DOCS = Path(__file__).resolve().parents[3] / "docs"
GUIDES = sorted(DOCS.glob("guide-*.md"))
COMMANDS = [c for guide in GUIDES for c in guide_commands(guide)]


def test_cli_reference_is_generated_from_the_help() -> None:
    page = (DOCS / "cli.md").read_text()
    assert page == render(introduction_of(page)), (
        "docs/cli.md is stale: run 'python -m sealbench.client._cli_doc docs/cli.md'"
    )


def test_the_guides_show_commands_of_every_role() -> None:
    assert len(GUIDES) == 3 and len(COMMANDS) >= 40


def _parse(argv: tuple[str, ...]) -> None:
    """Resolve the command path and parse its options as the CLI would (no execution)."""
    command: Any = typer.main.get_command(app)
    ctx = command.make_context("sealbench", [], resilient_parsing=True)
    args = list(argv)
    while hasattr(command, "list_commands"):
        assert args, "a group without a command"
        name = args.pop(0)
        sub = command.get_command(ctx, name)
        assert sub is not None, f"no command {name!r}"
        command = sub
        ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
    command.make_context(ctx.info_name, args, parent=ctx.parent)  # raises on a bad option


@pytest.mark.parametrize(
    "command", COMMANDS, ids=[f"{c.guide}:{' '.join(c.argv)[:60]}" for c in COMMANDS]
)
def test_every_guide_command_parses(command: GuideCommand) -> None:
    _parse(command.argv)


def test_a_stale_option_in_a_guide_would_be_caught() -> None:
    with pytest.raises(Exception, match=r"No such option"):
        _parse(("benchmark", "create", "--no-such-option", "x"))
