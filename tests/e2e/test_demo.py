"""``sealbench demo --cases 1 --size small`` in a fresh environment (empty HOME, no sealbench
variables): it must finish, refuse the debug-image attack, and print a leaderboard whose every
cell equals what the registry stored (read back from the registry's database after the demo)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

_ROW = re.compile(r"^\W*(\d+)\W+(\S+) (\S+) \(#(\d+)\)\W+([0-9.]+)\W+([0-9.]+)\W+([0-9.]+)\W*$")


def _stored_cells(database: Path) -> dict[tuple[int, int], float]:
    """Mean Dice over WT, TC, ET of the latest result per (model, dataset), from the database."""
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT model_id, dataset_id, summary FROM results WHERE id IN "
            "(SELECT max(id) FROM results GROUP BY model_id, dataset_id)"
        ).fetchall()
    cells = {}
    for model_id, dataset_id, summary in rows:
        regions = json.loads(summary)["aggregates"]["regions"]
        cells[(model_id, dataset_id)] = (
            sum(regions[r]["dice"]["mean"] for r in ("WT", "TC", "ET")) / 3
        )
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
    workdir = tmp_path / "demo"
    proc = subprocess.run(
        [str(script), "demo", "--cases", "1", "--size", "small", "--workdir", str(workdir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "refused, as it must be" in out and "key release denied" in out
    assert "audit chain intact" in out
    board = out[out.index("leaderboard of benchmark") : out.index("8. an attack")]
    printed = {}
    datasets_header = [int(n) for n in re.findall(r"\(#(\d+)\)", board.splitlines()[2])]
    for line in board.splitlines():
        match = _ROW.match(line)
        if match:
            model_id = int(match.group(4))
            values = [float(match.group(i)) for i in (5, 6)]
            for dataset_id, value in zip(datasets_header, values, strict=True):
                printed[(model_id, dataset_id)] = value
    stored = _stored_cells(workdir / "registry" / "registry.sqlite3")
    assert len(stored) == 4  # two hospitals x two models, all verified
    assert printed.keys() == stored.keys()
    for key, value in stored.items():
        assert printed[key] == pytest.approx(value, abs=5e-5)
    # the weaker model ranks below the reference model on both hospitals
    assert "rank" in board
