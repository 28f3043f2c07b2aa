"""What a participant must learn, counted in its guide (issue 45 part 3): each role guide opens
with "In short: N words, M commands", a glossary of N entries and a path of M numbered
commands; the hospital's is at most 15 words and 8 commands. The counts are read from the
guides, so a guide that grows a word or a step without saying so fails here; every step of a
path is a command the guide shows with its output below (and the guide-output test checks those
against a real demo). A hospital reads epsilon, never rho; ``--help`` names no issue number a
user cannot look up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sealbench.client.cli.doc import command_path, guide_commands, render

DOCS = Path(__file__).resolve().parents[3] / "docs"
_HEADING = re.compile(r"^## In short: (\d+) words, (\d+) commands$", re.MULTILINE)


def _in_short(guide: Path) -> tuple[int, int, list[str], list[tuple[str, ...]]]:
    """The counts a guide states, its glossary's terms and its path's command paths."""
    text = guide.read_text()
    heading = _HEADING.search(text)
    assert heading, f"{guide.name} has no '## In short: N words, M commands'"
    section = text[heading.end():text.index("\n## ", heading.end())]
    words_part, _, path_part = section.partition("**The path**")
    assert "**The words**" in words_part, guide.name
    terms = re.findall(r"^- \*\*(.+?)\*\*:", words_part, re.MULTILINE)
    steps = [command_path(tuple(step.split()))
             for step in re.findall(r"^\d+\. `sealbench ([a-z -]+)`", path_part, re.MULTILINE)]
    return int(heading.group(1)), int(heading.group(2)), terms, steps


@pytest.mark.parametrize("role", ["hospital", "authority", "model-owner"])
def test_each_guide_counts_its_words_and_commands(role: str) -> None:
    guide = DOCS / f"guide-{role}.md"
    words, commands, terms, steps = _in_short(guide)
    assert len(terms) == words and len(set(terms)) == words, terms
    assert len(steps) == commands, steps
    shown = {command_path(c.argv) for c in guide_commands(guide)}
    missing = [" ".join(step) for step in steps if step not in shown]
    assert not missing, f"{guide.name}: path steps the guide never shows: {missing}"


def test_the_hospital_meets_at_most_15_words_and_8_commands() -> None:
    words, commands, _, steps = _in_short(DOCS / "guide-hospital.md")
    assert words <= 15 and commands <= 8
    # folded into 'profile add': the result key is no step of its own
    assert ("keys", "init") not in steps and steps[0] == ("profile", "add")
    assert steps[-1] == ("result", "submit")


def test_the_hospital_guide_says_epsilon_never_rho() -> None:
    text = (DOCS / "guide-hospital.md").read_text()
    assert not re.search(r"\brho\b|\u03c1", text)  # rho, the word or the Greek letter


def test_help_names_no_issue_number_and_no_task_of_one_plugin() -> None:
    helps = render("")
    assert not re.search(r"\bissues? #?\d|#\d{2}\b", helps), re.findall(r".*issue.*", helps)
    assert "segmentation models" not in helps
