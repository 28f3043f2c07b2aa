"""``sealbench demo --cases 5 --size small`` in a fresh environment (empty HOME, no sealbench
variables): it must finish, refuse the debug-image attack, publish and evaluate the WDBC
benchmark next to BraTS, and end with a short summary whose leaderboards are exactly what
``sealbench benchmark leaderboard`` prints against its registry (served again by ``sealbench
demo --explore``), every command's output kept in the log file it names.
Its work folder is a new one in the demo folder of that HOME's cache, the demo ends naming the
commands that remove it, and ``sealbench demo --clean`` does."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def _explore(script: Path, env: dict[str, str],
             workdir: Path) -> tuple[subprocess.Popen[str], str]:
    """``sealbench demo --explore WORKDIR`` started; returns it and its registry's URL."""
    proc = subprocess.Popen([str(script), "demo", "--explore", str(workdir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, "".join(lines)[-4000:]
        lines.append(line)
        found = re.match(r"^dashboard\s+(http://127\.0\.0\.1:\d+)/ui/\s*$", line)
        if found:
            return proc, found.group(1)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, rest[-4000:]
    return rest


@pytest.mark.slow
def test_demo_leaderboard_matches_the_registry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "COLUMNS": "220",
        "TERM": "dumb",
    }
    script = Path(sys.executable).parent / "sealbench"
    proc = subprocess.run(
        [str(script), "demo", "--cases", "5", "--size", "small"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    found = re.search(r"everything goes under (\S+)", out)
    assert found is not None, out[:2000]
    workdir = Path(found.group(1))
    assert workdir.parent == home / ".cache" / "sealbench" / "demo"  # the XDG cache of HOME
    assert "refused, as it must be" in out and "key release denied" in out
    # the terminal shows the commands and a summary; each command's output is in the log
    log = workdir / "demo.log"
    assert f"each command's output goes to {log}" in out
    detail = log.read_text()
    assert "audit chain intact" in detail and "audit chain intact" not in out
    assert "the registry will receive exactly this" in detail
    assert len(out.splitlines()) < 200, len(out.splitlines())
    summary = out[out.index("─ summary ─") :]
    assert "4 of 4 runs succeeded on the mock TEE (2 hospitals x 2 models)" in summary
    assert "refused: the debug-image attack got no keys" in summary
    assert "audit log verified intact" in summary
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        (reference,) = db.execute("SELECT reference_model_id FROM benchmarks").fetchone()
        verified = db.execute("SELECT count(*) FROM results WHERE benchmark_id = 1").fetchone()
    assert reference is not None  # the benchmark names its (shipped) reference model
    assert verified == (4,)  # two hospitals x two models, all verified
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        pooled = db.execute("SELECT model_id, n_sites, n_cases FROM pooled_releases "
                            "WHERE benchmark_id = 1 ORDER BY model_id").fetchall()
        debits = db.execute("SELECT count(*) FROM privacy_debits "
                            "WHERE pool_authorization_id IS NOT NULL").fetchone()
        authorized = db.execute("SELECT count(*) FROM pool_authorizations").fetchone()
    # the authority pooled each model inside the TEE (issue 27): 2 hospitals x 5 cases each
    assert [(n, c) for _, n, c in pooled] == [(2, 10), (2, 10)], pooled
    # each hospital's dataset debited once per pool, when the registry authorized it
    assert debits == (4,) and authorized == (2,)
    assert "benchmark pool 1 --tee mock" in out
    # each leaderboard of the summary is what 'sealbench benchmark leaderboard' prints
    explorer, url = _explore(script, env, workdir)
    try:
        for benchmark_id in (1, 2):
            typed = subprocess.run(
                [str(script), "benchmark", "leaderboard", str(benchmark_id), "--profile",
                 "authority"], env={**env, "SEALBENCH_CONFIG_DIR": str(workdir / "config")},
                capture_output=True, text=True, timeout=120, check=False)
            assert typed.returncode == 0, typed.stderr
            assert typed.stdout in summary, (typed.stdout, summary)
            assert "rank" in typed.stdout and "pooled" in typed.stdout
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    finally:
        _stop(explorer)
    # next to BraTS, the WDBC benchmark (real cases, two disjoint sites) was published,
    # evaluated for both models on both sites, and its leaderboard ranks by AUROC
    second = out[out.index("9. a second benchmark") :]
    assert "wdbc/1" in second[:200] and "AUROC" in second
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        rows = db.execute(
            "SELECT summary FROM results WHERE benchmark_id = 2").fetchall()
    summaries = [json.loads(summary)["aggregates"] for (summary,) in rows]
    assert len(summaries) == 4
    assert {s["n_cases"] for s in summaries} == {100}
    assert all(s["release"]["epsilon"] == 1.0 for s in summaries)  # releases, no exact AUROC
    # the end says how to explore and how to remove the work folder, and that command does
    ending = out[out.index("─ summary ─") :]
    assert f"{script} demo --explore {workdir}" in ending
    assert f"rm -rf {workdir}" in ending
    assert f"{script} demo --clean" in ending
    cleaned = subprocess.run(
        [str(script), "demo", "--clean"], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert f"removed {workdir} (" in cleaned.stdout and "freed " in cleaned.stdout
    assert not workdir.exists() and workdir.parent.is_dir()


#: Guide commands that only read: run against the demo's registry, they must exit as the guide
#: shows (0, or the exit code its output names).
_READS = {
    ("profile", "ls"), ("whoami",), ("benchmark", "ls"), ("benchmark", "show"),
    ("benchmark", "results"), ("benchmark", "leaderboard"), ("association", "ls"),
    ("dataset", "show"), ("dataset", "budget"), ("model", "show"), ("keys", "show"),
    ("result", "ls"),
    ("benchmark", "definition"),
    ("audit", "verify"), ("inbox",),
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
}


def _path(argv: tuple[str, ...]) -> tuple[str, ...]:
    single = {("whoami",), ("login",), ("run",), ("inbox",), ("test",)}
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
def test_demo_serve_keeps_the_dashboard_up_until_interrupted(tmp_path: Path) -> None:
    """``--serve``: after the demo the dashboard answers, the sign-in tokens are pointed to
    (never printed), and Ctrl-C ends it cleanly."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "COLUMNS": "220",
        "TERM": "dumb",
    }
    script = Path(sys.executable).parent / "sealbench"
    workdir = tmp_path / "demo"
    argv = [str(script), "demo", "--cases", "1", "--size", "small", "--workdir", str(workdir),
            "--serve"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 900
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            found = re.match(r"^dashboard\s+(http://127\.0\.0\.1:\d+/ui/)\s*$", line)
            url = found.group(1) if found else None
        assert url is not None, "".join(lines)[-4000:]
        tokens_line = proc.stdout.readline()
        lines.append(tokens_line)
        assert str(workdir / "config") in tokens_line
        # how to use the CLI against it is said while it serves, not after Ctrl-C
        cli_lines = [proc.stdout.readline() for _ in range(4)]
        lines.extend(cli_lines)
        assert cli_lines[0].startswith("the CLI, from another terminal")
        assert f"export SEALBENCH_CONFIG_DIR={workdir / 'config'}" in cli_lines[1]
        assert "/bin/activate" in cli_lines[2] and "sealbench profile ls" in cli_lines[3]
        page = httpx.get(url, timeout=30, follow_redirects=True)  # to the sign-in page
        assert page.status_code == 200 and page.url.path.startswith("/ui/")
        _run_the_guides_against(script, env, workdir / "config", "".join(lines))
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest[-4000:]
    output = "".join(lines) + rest
    profiles = json.loads((workdir / "config" / "profiles.json").read_text())
    tokens = [p["token"] for p in profiles["profiles"].values()]
    assert tokens and not any(token in output for token in tokens)
    with pytest.raises(httpx.TransportError):  # the registry stopped with the demo
        httpx.get(url, timeout=5)
