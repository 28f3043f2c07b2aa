"""``sealbench demo --cases 5 --size small`` in a fresh environment (empty HOME, no sealbench
variables): it must finish, refuse the debug-image attack, publish and evaluate the WDBC
benchmark next to BraTS, and end with a short summary whose leaderboards are exactly what
``sealbench benchmark leaderboard`` prints against its registry (served again by ``sealbench
demo --explore``), every command's output kept in the log file it names.
Its work folder is a new one in the demo folder of that HOME's cache, the demo ends naming the
commands that remove it, and ``sealbench demo --clean`` does. What ``--serve`` does (the dashboard
up, the guides' reads answered, Ctrl-C) is tested on the served demo of test_guide_outputs.py."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
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
        debits = db.execute("SELECT count(*) FROM privacy_debits WHERE benchmark_id = 1 "
                            "AND pool_authorization_id IS NOT NULL").fetchone()
        authorized = db.execute("SELECT count(*) FROM pool_authorizations "
                                "WHERE benchmark_id = 1").fetchone()
        exact = db.execute("SELECT DISTINCT exact FROM privacy_debits "
                           "WHERE benchmark_id = 1").fetchall()
        wdbc_pooled = db.execute("SELECT n_sites, n_cases FROM pooled_releases "
                                 "WHERE benchmark_id = 2").fetchall()
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
    # next to BraTS, the WDBC benchmark (real cases, three disjoint sites) was published,
    # evaluated for both models on every site, and its leaderboard ranks by AUROC
    second = out[out.index("9. a second benchmark") :]
    assert "wdbc/1" in second[:200] and "AUROC" in second
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        rows = db.execute(
            "SELECT summary FROM results WHERE benchmark_id = 2").fetchall()
    summaries = [json.loads(summary) for (summary,) in rows]
    assert len(summaries) == 6
    # pooling in the TEE, the sites publish no release of their own (issue 41): each result
    # waits for the pooled release, which is the one public figure per model
    assert {s["withheld"]["n_cases"] for s in summaries} == {100, 120, 178}
    assert all(s["withheld"]["rule"] == "pooled" for s in summaries)
    # the end says how to explore and how to remove the work folder, and that command does
    ending = out[out.index("─ summary ─") :]
    # both boards show a number for every model (issue 41): nothing withheld, WDBC private at
    # epsilon 1 pooled in the TEE, BraTS exact; one line each of what privacy cost and bought
    assert "withheld (" not in ending and "0.0000 to 1.0000" not in ending
    assert ending.count("privacy cost: ") == 2 and ending.count("bought: 2 of 2 models shown") == 2
    assert "bought: 2 of 2 models shown at ε 1 pooled in the TEE over 398 cases" in ending
    assert "bought: 2 of 2 models shown exact pooled in the TEE over 10 cases" in ending
    assert "privacy cost: none counted" in ending and "hospital-a ε " in ending
    assert "exact: published without privacy noise" in ending
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
