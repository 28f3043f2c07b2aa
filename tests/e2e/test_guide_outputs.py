"""The output the role guides (``docs/guide-*.md``) show is what the commands print (issue 31
item 2).

Why a comparison, and a regeneration that only serves it: each shown output is compared with a
real one from a fresh ``sealbench demo --size small --cases 5 --serve`` at 100 columns, the
width the guides are printed at: a read (``READS``) is run against the serving demo, any other
command's output is the demo's own, from its log (``demo.log``, every command's output after
its ``$ sealbench ...`` line). What differs between two honest runs (ids, digests, ports,
dates, durations, figures drawn with privacy noise, table widths, the log records and progress
bars on stderr) is normalised on both sides; a shown ``…`` line stands for any number of real
lines, so a guide stays short where the output is long (a request preview, a run list). A
block that no longer matches fails here with its diff; ``python -m sealbench.client.cli.doc
--guides WORKDIR [--all] docs/guide-*.md``, against a demo serving from WORKDIR, rewrites the
stale blocks from it (keeping their elisions), so fixing the docs is one command and the diff
of the guide is reviewed like code. A guide was not made a pure template filled at build time:
its outputs must read well on GitHub as written, with hand-chosen elisions.

A block the demo cannot produce (a second run of a command the demo runs once, a refusal the
demo catches, a withdrawal that would change the state later blocks read) carries ``<!-- output
not checked: WHY -->`` above it; every other shown output must be checked, so a new example
cannot slip in unchecked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import onnx
import pytest

from sealbench.client.cli.doc import (
    GUIDE_COLUMNS,
    GUIDE_WORKDIR,
    ShownOutput,
    compare_guide,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


@dataclass
class ServedDemo:
    """A demo serving: its process, what it printed up to serving, its folders and setting."""

    proc: subprocess.Popen[str]
    lines: list[str]
    workdir: Path
    env: dict[str, str]
    script: Path


def _serve(workdir: Path, home: Path) -> ServedDemo:
    """``sealbench demo --size small --cases 5 --serve`` in ``workdir``, once it serves."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8", "COLUMNS": str(GUIDE_COLUMNS), "TERM": "dumb"}
    script = Path(sys.executable).parent / "sealbench"
    proc = subprocess.Popen(
        [str(script), "demo", "--size", "small", "--cases", "5", "--serve", "--workdir",
         str(workdir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "".join(lines)[-4000:]
        lines.append(line)
        if line.startswith("serving the registry"):
            return ServedDemo(proc, lines, workdir, env, script)
    raise AssertionError("".join(lines)[-4000:])


@pytest.fixture(scope="module")
def served_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedDemo]:
    """One demo served for both tests below (the flow runs once): the guides are compared
    against it, then the last test stops it with Ctrl-C."""
    # a work folder named as long as the guides' one, so that tables naming it are as wide
    workdir = Path(tempfile.mkdtemp(prefix="sbguid", dir="/tmp"))
    assert len(str(workdir)) == len(GUIDE_WORKDIR)
    home = tmp_path_factory.mktemp("guides") / "home"
    home.mkdir()
    demo = None
    try:
        demo = _serve(workdir, home)
        yield demo
    finally:
        if demo is not None and demo.proc.poll() is None:
            demo.proc.send_signal(signal.SIGINT)
            try:
                demo.proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                demo.proc.kill()
                demo.proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _three_channel_model(workdir: Path) -> None:
    """The model-owner guide's misfit: the demo's reference model declaring 3 input channels."""
    model = onnx.load(workdir / "model-ref" / "brats_small_unet.onnx")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    onnx.save(model, workdir / "model-ref" / "three-channels.onnx")


@pytest.mark.slow
def test_the_guides_show_what_the_commands_print(served_demo: ServedDemo) -> None:
    workdir = served_demo.workdir
    _three_channel_model(workdir)
    compared: list[ShownOutput] = []
    for guide in sorted(DOCS.glob("guide-*.md")):
        compared.extend(compare_guide(guide, workdir))
    problems = [item.problem for item in compared if item.problem]
    assert not problems, (
        "\n\n".join(problems) + "\n\nthese outputs shown in the guides are stale: against a "
        "'sealbench demo --size small --cases 5 --serve --workdir WORKDIR' (COLUMNS=100), run "
        "'python -m sealbench.client.cli.doc --guides WORKDIR docs/guide-*.md'"
    )
    unexplained = [f"{item.command.guide}: sealbench {' '.join(item.command.argv)}"
                   for item in compared if item.real is None and not item.command.unchecked]
    assert not unexplained, ("outputs neither the demo nor a read produces, with no "
                             "'<!-- output not checked: WHY -->' above them", unexplained)
    checked = [item for item in compared if item.real is not None]
    assert len(checked) >= 35, len(checked)
    assert {re.sub(r"\.md$", "", item.command.guide) for item in checked} == {
        "guide-authority", "guide-hospital", "guide-model-owner"}


#: Guide commands that only read: run against the demo's registry, they must exit as the guide
#: shows (0, or the exit code its output names).
_READS = {
    ("profile", "ls"), ("whoami",), ("benchmark", "ls"), ("benchmark", "show"),
    ("benchmark", "results"), ("benchmark", "leaderboard"), ("association", "ls"),
    ("dataset", "show"), ("dataset", "budget"), ("model", "show"), ("keys", "show"),
    ("result", "ls"),
    ("benchmark", "definition"),
    ("audit", "verify"), ("inbox",), ("next",),
}
#: Guide commands the demo cannot play: they need another machine, a prompt or an engine.
_ELSEWHERE = {
    ("mock-tee", "up"): "runs in the foreground until Ctrl-C (the demo starts its own)",
    ("profile", "add"): "names a placeholder registry and token",
    ("login",): "prompts for a token",
    ("test",): "reads the participant's own ONNX file or prepared folder (tested in "
    "tests/unit/client/test_cli_participation.py)",
    ("association", "withdraw"): "would take a demo participant out of the benchmark (tested in "
    "tests/unit/client/test_cli_participation.py)",
    ("benchmark", "close"): "would close the demo's benchmark (tested in "
    "tests/unit/client/test_cli_participation.py)",
    ("dataset", "ingest"): "needs DICOM studies, which the demo does not have (tested in "
    "tests/integration/test_dicom_ingest_cli.py)",
}


def _path(argv: tuple[str, ...]) -> tuple[str, ...]:
    single = {("whoami",), ("login",), ("run",), ("inbox",), ("next",), ("test",)}
    return argv[:1] if argv[:1] in single else argv[:2]


def _run_the_guides_against(script: Path, env: dict[str, str], config: Path, demo: str) -> None:
    """Every command the role guides show: the reads run against the serving demo and exit as
    the guide says; every other command is one the demo itself just ran (same command path),
    except the few that need another machine (``_ELSEWHERE``)."""
    from sealbench.client.cli.doc import guide_commands

    docs = Path(__file__).resolve().parents[2] / "docs"
    commands = [c for g in sorted(docs.glob("guide-*.md")) for c in guide_commands(g)]
    played: set[tuple[str, ...]] = set()
    for line in demo.splitlines():
        if line.startswith("$ sealbench "):
            words = line.split()[2:]
            if words[:1] == ["--profile"]:
                words = words[2:]
            played.add(_path(tuple(words)))
    ran = 0
    for command in commands:
        path = _path(command.argv)
        if path in _ELSEWHERE:
            continue
        if path not in _READS:
            assert path in played, f"{command.guide}: the demo never runs {' '.join(path)}"
            continue
        done = subprocess.run(
            [str(script), *command.argv],
            env={**env, "SEALBENCH_CONFIG_DIR": str(config)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == command.exit_code, (
            command.guide, command.argv, done.stdout[-2000:], done.stderr[-2000:]
        )
        ran += 1
    assert ran >= 15


@pytest.mark.slow
def test_demo_serve_keeps_the_dashboard_up_until_interrupted(served_demo: ServedDemo) -> None:
    """``--serve``: after the demo the dashboard answers, the sign-in tokens are pointed to
    (never printed), the guides' reads answer as the guides say, and Ctrl-C ends it cleanly.
    Last in this module: it stops the served demo."""
    proc, lines, workdir = served_demo.proc, served_demo.lines, served_demo.workdir
    text = "".join(lines)
    found = re.search(r"^dashboard\s+(http://127\.0\.0\.1:\d+/ui/)\s*$", text, re.MULTILINE)
    assert found is not None, text[-4000:]
    url = found.group(1)
    served = text[found.start():]
    assert "sign-in tokens" in served and str(workdir / "config") in served
    # how to use the CLI against it is said while it serves, not after Ctrl-C
    at = next(i for i, line in enumerate(lines) if line.startswith("the CLI, from another"))
    cli_lines = lines[at : at + 4]
    assert f"export SEALBENCH_CONFIG_DIR={workdir / 'config'}" in cli_lines[1]
    assert "/bin/activate" in cli_lines[2] and "sealbench profile ls" in cli_lines[3]
    page = httpx.get(url, timeout=30, follow_redirects=True)  # to the sign-in page
    assert page.status_code == 200 and page.url.path.startswith("/ui/")
    _run_the_guides_against(served_demo.script, served_demo.env, workdir / "config", text)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, rest[-4000:]
    output = text + rest
    profiles = json.loads((workdir / "config" / "profiles.json").read_text())
    tokens = [p["token"] for p in profiles["profiles"].values()]
    assert tokens and not any(token in output for token in tokens)
    with pytest.raises(httpx.TransportError):  # the registry stopped with the demo
        httpx.get(url, timeout=5)
