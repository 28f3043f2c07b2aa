"""Every table reads at 80 and at 120 columns: a table that cannot give each folding column a
readable width is printed as stacked blocks instead (one per row), ids, run ids and digests are
never cut, no line is wider than the terminal, and execution providers are shortened (``CPU``).
Checked on ``result ls`` (five runs) and on the columns of ``benchmark progress`` and the
leaderboard."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sealbench.client.cli import app
from sealbench.client.cli.common import table
from sealbench.client.registry.profiles import ProfileStore
from sealbench.client.runs.records import RunRecord, RunStore

IMAGE = "sha256:" + "ab" * 32
WIDTHS = (80, 120)


def _lines(text: str, width: int) -> list[str]:
    lines = text.splitlines()
    assert lines and max(len(line) for line in lines) <= width, text
    return lines


@pytest.mark.parametrize("width", WIDTHS)
def test_result_ls_reads_at_common_widths(width: int, cli_home: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["profile", "add", "h", "--server", "http://127.0.0.1:9",
                               "--token", ""]).exit_code == 0
    store = RunStore(ProfileStore.from_environment(os.environ).resolve("h").data_dir / "runs")
    ids = [f"run-20261204T10{i:02d}00-{i:08x}" for i in range(5)]
    for i, run_id in enumerate(ids):
        store.save(RunRecord(
            run_id=run_id, benchmark_id=12, dataset_id=340 + i, model_id=7, tee="mock",
            image_digest=IMAGE, result_uri=f"file:///results/{run_id}", status="succeeded",
            started_at=datetime(2026, 12, 4, 10, i, tzinfo=UTC), wall_seconds=123.4 + i,
            execution_provider="CPUExecutionProvider" if i % 2 else "CUDAExecutionProvider",
            result_id=1000 + i))
    monkeypatch.setenv("COLUMNS", str(width))
    listed = runner.invoke(app, ["result", "ls", "--profile", "h"])
    assert listed.exit_code == 0, listed.output
    lines = _lines(listed.stdout, width)
    for run_id in ids:
        assert any(run_id in line for line in lines)  # whole, on one line
    assert "ExecutionProvider" not in listed.stdout
    assert listed.stdout.count("CPU") == 2 and listed.stdout.count("CUDA") == 3
    assert "result 1004" in listed.stdout and "succeeded" in listed.stdout
    assert len(lines) <= 4 * len(ids) + 6  # not one character per column
    if width == 120:
        assert "┃ run" in listed.stdout  # a table where it fits


_PROGRESS = ("model", "dataset", "status", "reason", "source", "provider", "run", "result",
             "updated")


@pytest.mark.parametrize("width", WIDTHS)
def test_wide_progress_rows_stack_rather_than_fold_to_nothing(
        width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    rows = [(f"{m} segresnet-large-v2", f"{d} hospital-charite-berlin", "failed",
             "key_release_denied", "hospital (attested)", "CUDA",
             f"run-20261204T1000{m}{d}-0badc0de", "", "2026-12-04 10:00")
            for m, d in ((1, 10), (2, 11))]
    table("progress of benchmark 3", _PROGRESS, rows)
    printed = capsys.readouterr().out
    lines = _lines(printed, width)
    for row in rows:
        for value in row:
            if value:
                assert any(value in line for line in lines), (value, printed)
    # a short table still prints as a table at 80 columns
    table("models", ("id", "name", "version"), [(1, "tiny", "1")])
    assert "┃ id" in capsys.readouterr().out


def test_stacked_rows_pack_fields_and_keep_long_values_whole(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    table("models", ("id", "name", "version", "owner", "digest", "note"),
          [(1, "m" * 30, "1", "3 (you)", IMAGE, "x" * 40)])
    lines = _lines(capsys.readouterr().out, 80)
    assert lines[1] == "id: 1"
    assert f"  name: {'m' * 30} · version: 1 · owner: 3 (you)" in lines
    at = lines.index("  digest:")
    assert lines[at + 1] == f"    {IMAGE}"  # 71 characters, whole, on a line of its own
