"""The Google Cloud walkthrough cannot go stale: every ``sealbench`` command that
``docs/gcp-setup.md`` shows in its shell blocks parses with the current CLI (command path,
option names and types, required options), as the role guides' commands do (``test_docs.py``),
and the walkthrough shows every step from a profile to a submitted result."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from tests.unit.client.test_docs import _parse

PAGE = Path(__file__).resolve().parents[3] / "docs" / "gcp-setup.md"


def shell_commands(page: Path) -> list[tuple[str, ...]]:
    """The argv (after ``sealbench``) of each ``sealbench`` line of the page's ``sh`` blocks
    (``\\`` continuations joined, ``# comments`` dropped, ``$VARS`` left as words)."""
    commands, block, lines = [], False, page.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if line.startswith("```"):
            block = line == "```sh"
            continue
        if not (block and line.startswith("sealbench ")):
            continue
        while line.endswith("\\") and index < len(lines):
            line = line[:-1] + " " + lines[index].strip()
            index += 1
        commands.append(tuple(shlex.split(os.path.expandvars(line), comments=True))[1:])
    return commands


COMMANDS = shell_commands(PAGE)


def test_the_walkthrough_shows_every_step_from_profile_to_verified_result() -> None:
    shown = {" ".join(argv[:2]) if not argv[1].startswith("-") else argv[0]
             for argv in COMMANDS}
    assert {"profile add", "profile show", "doctor", "benchmark create", "model seal",
            "policy sync", "dataset seal", "run", "result fetch", "result open",
            "result submit", "benchmark results"} <= shown, shown


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a)[:60] for a in COMMANDS])
def test_every_walkthrough_command_parses(argv: tuple[str, ...]) -> None:
    _parse(argv)


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(title)
    return text[start:text.index("\n## ", start)]


def test_the_grants_job_runs_the_watch_once_as_its_own_account_without_a_key_file() -> None:
    """Issue 29: grants follow approvals with nobody remembering. The recipe's job runs one
    watch pass per execution, as a service account attached to the Cloud Run job (ADC from the
    metadata server), with the registry token from Secret Manager; no key file, ever."""
    recipe = _section("### Keep your grants following the approvals")
    watches = [argv for argv in COMMANDS if argv[:2] == ("policy", "sync") and "--watch" in argv]
    assert ("policy", "sync", "--watch", "--once", "--profile", "owner") in watches
    assert any("--interval" in argv for argv in watches)
    for needed in ("gcloud run jobs create", "--service-account $SYNC",
                   "--set-secrets SEALBENCH_TOKEN=", "gcloud scheduler jobs create http",
                   "jobs/sealbench-sync:run", "--oauth-service-account-email",
                   "roles/run.invoker"):
        assert needed in recipe, needed
    for key_file in ("keys create", "GOOGLE_APPLICATION_CREDENTIALS", ".json"):
        assert key_file not in recipe, key_file
