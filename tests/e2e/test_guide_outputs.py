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

The same served demo is the demo's own end-to-end test (it was a second whole demo, in
``test_demo.py``; ``test_demo_finishes_and_its_summary_is_what_the_registry_holds``): it finishes,
refuses the debug-image attack, publishes and evaluates WDBC next to BraTS, and ends with a short
summary whose leaderboards are exactly what ``sealbench benchmark leaderboard`` prints against its
registry, served by the demo and, after Ctrl-C, again by ``sealbench demo --explore``; every
command's output is kept in the log file it names. Where a demo's work folder goes when none is
chosen (a new one in the demo folder of the user's cache) and ``sealbench demo --clean`` are held
by ``tests/unit/client/test_demo_workdirs.py`` (``test_root_is_the_override_else_the_user_cache``,
``test_demo_clean_command_removes_the_demo_folders_and_says_what_it_freed``,
``test_removal_lines_name_the_clean_command_for_a_demo_folder``).

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
import sqlite3
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
    """One demo served for every test below (the flow runs once): its summary and registry are
    checked, the guides are compared against it, then the last test stops it with Ctrl-C."""
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


def _leaderboard(demo: ServedDemo, benchmark_id: int) -> str:
    """What ``sealbench benchmark leaderboard ID`` prints as the demo's authority."""
    typed = subprocess.run(
        [str(demo.script), "benchmark", "leaderboard", str(benchmark_id), "--profile",
         "authority"], env={**demo.env, "SEALBENCH_CONFIG_DIR": str(demo.workdir / "config")},
        capture_output=True, text=True, timeout=120, check=False)
    assert typed.returncode == 0, typed.stderr
    assert "rank" in typed.stdout and "pooled" in typed.stdout
    return typed.stdout


def _explore(demo: ServedDemo) -> tuple[subprocess.Popen[str], str]:
    """``sealbench demo --explore WORKDIR`` started; returns it and its registry's URL."""
    proc = subprocess.Popen([str(demo.script), "demo", "--explore", str(demo.workdir)],
                            env=demo.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, "".join(lines)[-4000:]
        lines.append(line)
        found = re.match(r"^dashboard\s+(http://127\.0\.0\.1:\d+)/ui/\s*$", line)
        if found:
            return proc, found.group(1)


@pytest.mark.slow
def test_demo_finishes_and_its_summary_is_what_the_registry_holds(
    served_demo: ServedDemo,
) -> None:
    workdir = served_demo.workdir
    out = "".join(served_demo.lines)
    assert f"everything goes under {workdir}" in out
    assert "refused, as it must be" in out and "key release denied" in out
    # the terminal shows the commands and a summary; each command's output is in the log
    log = workdir / "demo.log"
    assert f"each command's output goes to {log}" in out
    detail = log.read_text()
    assert "audit chain intact" in detail and "audit chain intact" not in out
    assert "the registry will receive exactly this" in detail
    assert len(served_demo.lines) < 200, len(served_demo.lines)
    summary = out[out.index("─ summary ─") :]
    assert "4 of 4 runs succeeded on the mock TEE (2 hospitals x 2 models)" in summary
    assert "refused: the debug-image attack got no keys" in summary
    assert "audit log verified intact" in summary
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        (reference,) = db.execute("SELECT reference_model_id FROM benchmarks").fetchone()
        verified = db.execute("SELECT count(*) FROM results WHERE benchmark_id = 1").fetchone()
        pooled = db.execute("SELECT model_id, n_sites, n_cases FROM pooled_releases "
                            "WHERE benchmark_id = 1 ORDER BY model_id").fetchall()
        debits = db.execute("SELECT count(*) FROM privacy_debits WHERE benchmark_id = 1 "
                            "AND pool_authorization_id IS NOT NULL").fetchone()
        authorized = db.execute("SELECT count(*) FROM pool_authorizations "
                                "WHERE benchmark_id = 1").fetchone()
        exact = db.execute("SELECT DISTINCT exact FROM privacy_debits "
                           "WHERE benchmark_id = 1").fetchall()
        wdbc_pooled = db.execute("SELECT n_sites, n_cases FROM pooled_releases "
                                 "WHERE benchmark_id = 2").fetchall()
        rows = db.execute("SELECT summary FROM results WHERE benchmark_id = 2").fetchall()
    assert reference is not None  # the benchmark names its (shipped) reference model
    assert verified == (4,)  # two hospitals x two models, all verified
    # the authority pooled each model inside the TEE (issue 27): 2 hospitals x 5 cases each
    assert [(n, c) for _, n, c in pooled] == [(2, 10), (2, 10)], pooled
    # each hospital's dataset debited once per pool, when the registry authorized it; BraTS
    # runs on synthetic cases, published exactly by the hospitals' on-screen consent (issue 41)
    assert debits == (4,) and authorized == (2,)
    assert exact == [(1,)], exact
    assert "benchmark pool 1 --tee mock" in out
    assert "synthetic cases: no patient to protect" in out
    assert "--consent-exact-release" in out
    # WDBC pools every held-out case of its three demo sites in the TEE, once per model
    assert wdbc_pooled == [(3, 398), (3, 398)], wdbc_pooled
    assert "benchmark pool 2 --tee mock" in out
    # each leaderboard of the summary is what 'sealbench benchmark leaderboard' prints
    for benchmark_id in (1, 2):
        assert _leaderboard(served_demo, benchmark_id) in summary, summary
    # next to BraTS, the WDBC benchmark (real cases, three disjoint sites) was published,
    # evaluated for both models on every site, and its leaderboard ranks by AUROC
    second = out[out.index("9. a second benchmark") :]
    assert "wdbc/1" in second[:200] and "AUROC" in second
    summaries = [json.loads(summary) for (summary,) in rows]
    assert len(summaries) == 6
    # pooling in the TEE, the sites publish no release of their own (issue 41): each result
    # waits for the pooled release, which is the one public figure per model
    assert {s["withheld"]["n_cases"] for s in summaries} == {100, 120, 178}
    assert all(s["withheld"]["rule"] == "pooled" for s in summaries)
    # both boards show a number for every model (issue 41): nothing withheld, WDBC private at
    # epsilon 1 pooled in the TEE, BraTS exact; one line each of what privacy cost and bought
    assert "withheld (" not in summary and "0.0000 to 1.0000" not in summary
    assert summary.count("privacy cost: ") == 2
    assert summary.count("bought: 2 of 2 models shown") == 2
    assert "bought: 2 of 2 models shown at ε 1 pooled in the TEE over 398 cases" in summary
    assert "bought: 2 of 2 models shown exact pooled in the TEE over 10 cases" in summary
    assert "privacy cost: none counted" in summary and "hospital-a ε " in summary
    assert "exact: published without privacy noise" in summary
    assert f"{served_demo.script} demo --explore {workdir}" in summary


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
    (never printed), the guides' reads answer as the guides say, and Ctrl-C ends it cleanly;
    ``--explore`` then serves the stopped demo again. Last in this module: it stops the served
    demo."""
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
    # the end says how to remove the work folder (a chosen one: rm only)
    assert "this demo's files stay in its work folder" in rest and f"rm -rf {workdir}" in rest
    # 'demo --explore' serves the stopped demo again: the same boards, until Ctrl-C
    summary = text[text.index("─ summary ─") :]
    explorer, again = _explore(served_demo)
    try:
        assert httpx.get(f"{again}/health", timeout=30).status_code == 200
        for benchmark_id in (1, 2):
            assert _leaderboard(served_demo, benchmark_id) in summary
    finally:
        explorer.send_signal(signal.SIGINT)
        left, _ = explorer.communicate(timeout=120)
    assert explorer.returncode == 0, left[-4000:]
