"""The reference and the guides cannot go stale: ``docs/cli.md`` is exactly what the CLI's own
``--help`` renders, and every command a role guide shows parses with the current CLI (command
path, option names and types, required options). The output a guide shows is compared with a
real demo's, what varies between runs aside (``tests/e2e/test_guide_outputs.py``); here, that
comparison itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from sealbench.client.cli import app
from sealbench.client.cli.doc import (
    ELISION,
    GUIDE_WORKDIR,
    GuideCommand,
    clean,
    compare_guide,
    guide_commands,
    introduction_of,
    mismatch,
    regenerate_guide,
    render,
)

DOCS = Path(__file__).resolve().parents[3] / "docs"
GUIDES = sorted(DOCS.glob("guide-*.md"))
COMMANDS = [c for guide in GUIDES for c in guide_commands(guide)]


def test_cli_reference_is_generated_from_the_help() -> None:
    page = (DOCS / "cli.md").read_text()
    assert page == render(introduction_of(page)), (
        "docs/cli.md is stale: run 'python -m sealbench.client.cli.doc docs/cli.md'"
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


# -- the outputs the guides show: compared with a real demo's (tests/e2e/test_guide_outputs.py) --

_TABLE_SHOWN = """\
run run-20261202T105215-cf1dfaaf: benchmark 1, dataset 1, model 1; 2 cases, 0 failed
attestation: signed by http://127.0.0.1:44495, image sha256:4f0dbd17b385…, binds this summary
┏━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━┓
┃ case                ┃ outcome ┃ Dice WT ┃
┡━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━┩
│ BraTS-GLI-00001-000 │ scored  │ 0.3851  │
└─────────────────────┴─────────┴─────────┘"""

_TABLE_REAL = """\
WARNING  INSECURE platform insecure-mock attests this token
run run-20261204T221434-f49369a3: benchmark 1, dataset 1, model 1; 2 cases, 0 failed
attestation: signed by http://127.0.0.1:39001, image sha256:0f65ba870e78…, binds this summary
  opening ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 1/1 0:00:00
┏━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓
┃ case                ┃ outcome  ┃ Dice WT  ┃
┡━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩
│ BraTS-GLI-00001-000 │ scored   │ 12.3851  │
└─────────────────────┴──────────┴──────────┘"""


def test_a_shown_output_matches_a_real_one_that_differs_only_in_what_varies() -> None:
    # run ids, digests, ports, figures, column widths, log records and progress bars
    assert mismatch(_TABLE_SHOWN, _TABLE_REAL) is None
    # a run's slowest steps, slowest first: which ones, and their order, vary
    shown = "run a succeeded in 5.6 s (infer 1.6 s, unwrap 0.5 s; on CPU)"
    real = "run a succeeded in 6.1 s (unwrap 0.7 s, infer 2.0 s, load 0.1 s; on CPU)"
    assert mismatch(shown, real) is None


def test_a_stale_shown_output_fails_with_a_diff_naming_the_lines() -> None:
    stale = _TABLE_SHOWN.replace("outcome", "HD95 WT")
    diff = mismatch(stale, _TABLE_REAL)
    assert diff is not None
    assert "-┃ case ┃ HD95 WT ┃ Dice WT ┃" in diff and "+┃ case ┃ outcome ┃ Dice WT ┃" in diff


def test_an_elision_line_stands_for_any_number_of_real_lines() -> None:
    lines = _TABLE_SHOWN.splitlines()
    assert mismatch("\n".join([*lines[:2], ELISION]), _TABLE_REAL) is None
    assert mismatch("\n".join([lines[0], ELISION, lines[-1]]), _TABLE_REAL) is None
    assert mismatch("\n".join([*lines[:2], ELISION, *lines[2:]]), _TABLE_REAL) is None  # none
    assert mismatch("\n".join([lines[0], ELISION, "not printed"]), _TABLE_REAL) is not None


def test_clean_shows_a_real_run_in_the_guides_work_folder_without_stderr_noise() -> None:
    real = ("WARNING  INSECURE mock KMS: created\n         projects/x (kept)\n"
            "  sealing ━━━━ 7/7 0:00:00\nsealed /tmp/pytest-1/demo/a  \n")
    assert clean(real, "/tmp/pytest-1/demo") == f"sealed {GUIDE_WORKDIR}/a"


def _guide(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "guide-x.md"
    path.write_text(f"# x\n\n{body}")
    return path


def test_the_guides_are_compared_with_the_demo_log_and_rewritten_from_it(tmp_path: Path) -> None:
    log = ("\n== 1. a section\n"
           f"$ sealbench keys init --profile hospital-a\nresult key created: {tmp_path}/k.pem\n"
           "recipient digest sha256:" + "a" * 64 + "\n"
           "$ sealbench dataset seal /x --dataset 1 --profile hospital-a\n7 objects uploaded\n"
           "  sealing dataset 1 ━━━━ 7/7 0:00:00\n\n== 2. another\n")
    guide = _guide(tmp_path, (
        "```\n$ sealbench keys init --profile hospital-a\n"
        f"result key created: {GUIDE_WORKDIR}/k.pem\nrecipient digest sha256:" + "b" * 64 + "\n"
        "```\n\n```\n$ sealbench dataset seal /x --dataset 1 --profile hospital-a\n"
        "4 objects uploaded\n```\n\n<!-- output not checked: a placeholder server -->\n"
        "```\n$ sealbench dataset seal /y --dataset 1 --profile hospital-a\n9 objects\n```\n"
    ))
    compared = compare_guide(guide, tmp_path, log)
    assert [c.problem is None for c in compared] == [True, False, True]
    assert compared[2].real is None and compared[2].why == "a placeholder server"
    assert "-4 objects uploaded" in (compared[1].problem or "")
    rewritten = regenerate_guide(guide, tmp_path, log)
    assert "7 objects uploaded\n```" in rewritten and "9 objects" in rewritten
    assert "b" * 64 in rewritten  # what still matches is kept as written
    guide.write_text(rewritten)
    assert all(c.problem is None for c in compare_guide(guide, tmp_path, log))


def test_a_rewritten_output_keeps_its_elision(tmp_path: Path) -> None:
    log = "$ sealbench dataset seal /x --dataset 1\n" + "".join(f"line {i}\n" for i in range(9))
    shown = f"old\n{ELISION}\nend"
    guide = _guide(tmp_path, f"```\n$ sealbench dataset seal /x --dataset 1\n{shown}\n```\n")
    assert f"line 0\n{ELISION}\nline 8\n```" in regenerate_guide(guide, tmp_path, log)


def test_a_rewritten_command_names_the_demo_s_run_everywhere_in_the_guide(tmp_path: Path) -> None:
    old, new = "run-20261202T105215-cf1dfaaf", "run-20261204T221434-f49369a3"
    log = f"$ sealbench result open {new} --profile hospital-a\nrun {new}: 5 cases\n"
    guide = _guide(tmp_path, f"```\n$ sealbench result open {old} --profile hospital-a\n"
                             f"run {old}: 2 cases\n```\n\nthen `sealbench result submit {old}`\n")
    rewritten = regenerate_guide(guide, tmp_path, log)
    assert old not in rewritten and rewritten.count(new) == 3


def test_a_shown_command_naming_another_digest_is_matched_with_the_demo_s(tmp_path: Path) -> None:
    """The mock's image digests derive from the enclave code, so the demo a check runs names
    other digests than the guide's (on CI's checkout the code is newer than the guide)."""
    ran, shown = "sha256:" + "c" * 64, "sha256:" + "d" * 64
    log = f"$ sealbench benchmark create --aggregator-digest {ran}\nbenchmark 1 created\n"
    guide = _guide(tmp_path, f"```\n$ sealbench benchmark create --aggregator-digest {shown}\n"
                             "benchmark 1 created\n```\n")
    [compared] = compare_guide(guide, tmp_path, log)
    assert compared.real is not None and compared.problem is None
    guide.write_text(guide.read_text().replace("benchmark 1 created\n```", "benchmark 2\n```"))
    [stale] = compare_guide(guide, tmp_path, log)
    assert stale.problem is not None and "-benchmark 2" in stale.problem
