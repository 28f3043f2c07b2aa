"""``sealbench demo --cases 5 --size small`` in a fresh environment (empty HOME, no sealbench
variables): it must finish, refuse the debug-image attack, and print a leaderboard whose every
cell equals what the registry stored (read back from the registry's database after the demo),
then publish and evaluate the WDBC benchmark next to BraTS.
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

_VALUE = r"([0-9.]+|-)"
_ROW = re.compile(rf"^\W*(\d+|-)\W+(\S+) (\S+) \(#(\d+)\)\W+{_VALUE}\W+{_VALUE}\W+{_VALUE}\W*$")


def _stored_cells(database: Path, benchmark_id: int = 1) -> dict[tuple[int, int], float | None]:
    """Mean Dice over WT, TC, ET of the latest result per (model, dataset) of the BraTS
    benchmark (the demo's first), read from each stored release by the plug-in (None where the
    release's noise allows no reading: at 5 cases, always)."""
    from sealbench.benchmarks.interface import MetricRef
    from sealbench.benchmarks.registry import load

    with sqlite3.connect(database) as db:
        (pin,) = db.execute("SELECT metrics_version FROM benchmarks WHERE id = ?",
                            (benchmark_id,)).fetchone()
    plugin = load(pin)
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT model_id, dataset_id, summary FROM results WHERE id IN "
            "(SELECT max(id) FROM results WHERE benchmark_id = ? GROUP BY model_id, dataset_id)",
            (benchmark_id,),
        ).fetchall()
    cells = {}
    for model_id, dataset_id, summary in rows:
        parsed = plugin.parse_summary(json.loads(summary)["aggregates"])
        figures = {f.ref: f.value for f in plugin.figures(parsed)}
        cells[(model_id, dataset_id)] = figures[MetricRef("dice")]
    return cells


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
    assert "audit chain intact" in out
    board = out[out.index("leaderboard of benchmark") : out.index("8. an attack")]
    printed = {}
    datasets_header = [int(n) for n in re.findall(r"\(#(\d+)\)", board.splitlines()[2])]
    for line in board.splitlines():
        match = _ROW.match(line)
        if match:
            model_id = int(match.group(4))
            values = [None if match.group(i) == "-" else float(match.group(i)) for i in (5, 6)]
            for dataset_id, value in zip(datasets_header, values, strict=True):
                printed[(model_id, dataset_id)] = value
    with sqlite3.connect(workdir / "registry" / "registry.sqlite3") as db:
        (reference,) = db.execute("SELECT reference_model_id FROM benchmarks").fetchone()
    assert reference is not None  # the benchmark names its (shipped) reference model
    stored = _stored_cells(workdir / "registry" / "registry.sqlite3")
    assert len(stored) == 4  # two hospitals x two models, all verified
    assert printed.keys() == stored.keys()
    for key, value in stored.items():
        assert printed[key] == (None if value is None else pytest.approx(value, abs=5e-5))
    # the weaker model ranks below the reference model on both hospitals
    assert "rank" in board
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
    # the end says how to remove the work folder, and that command does
    ending = out[out.index("where everything is") :]
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
    from sealbench.client._cli_doc import guide_commands

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
