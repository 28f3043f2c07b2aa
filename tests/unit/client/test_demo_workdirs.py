"""Demo work folders: each demo gets a private folder under the demo folder, and
``sealbench demo --clean`` removes those folders and nothing else (not other files, not what a
symbolic link points to, not a running demo's folder). Every test uses a temporary demo folder
(``SEALBENCH_DEMO_DIR`` or a ``root`` argument), never the user's cache."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sealbench.client.cli import app
from sealbench.client.demo import workdirs as demo_workdirs
from sealbench.client.demo.flow import removal_lines
from sealbench.client.demo.workdirs import MARKER, claim, clean, demo_root, new_workdir

NOW = datetime(2025, 3, 4, 5, 6, 7)


def _finished_demo(root: Path, size: int = 300_000) -> Path:
    """A demo folder as a finished demo leaves it (claimed, released, with files)."""
    path = new_workdir(root, NOW)
    with claim(path):
        (path / "registry").mkdir()
        (path / "registry" / "registry.sqlite3").write_bytes(os.urandom(size))
    return path


def test_root_is_the_override_else_the_user_cache() -> None:
    assert demo_root({"SEALBENCH_DEMO_DIR": "/somewhere/demos"}) == Path("/somewhere/demos")
    default = demo_root({})
    assert default.name == "demo" and default.parent.name == "sealbench"


def test_new_workdir_is_private_and_named_after_the_time(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    first, second = new_workdir(root, NOW), new_workdir(root, NOW)
    assert first != second and first.parent == root == second.parent
    assert re.fullmatch(r"20250304-050607-[0-9a-f]{6}", first.name)
    assert stat.S_IMODE(first.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert list(first.iterdir()) == []


def test_claim_leaves_exactly_the_marker(tmp_path: Path) -> None:
    path = new_workdir(tmp_path, NOW)
    with claim(path):
        assert [p.name for p in path.iterdir()] == [MARKER]
    assert [p.name for p in path.iterdir()] == [MARKER]


def test_clean_removes_demo_folders_and_reports_the_space(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    demos = [_finished_demo(root), _finished_demo(root)]
    report = clean(root)
    assert [r.path for r in report.removed] == sorted(demos)
    assert all(r.size_bytes >= 300_000 for r in report.removed)
    assert report.freed_bytes == sum(r.size_bytes for r in report.removed)
    assert not any(p.exists() for p in demos) and list(root.iterdir()) == []


def test_clean_touches_nothing_that_is_not_a_demo_folder(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    demo = _finished_demo(root)
    unmarked = root / "20250101-000000-abcdef"  # a demo's name without its marker
    unmarked.mkdir()
    (unmarked / "keep.txt").write_text("mine")
    misnamed = root / "my-notes"  # a marker but not a demo's name
    misnamed.mkdir()
    (misnamed / MARKER).write_text("")
    stray_file = root / "README.txt"
    stray_file.write_text("mine")
    elsewhere = _finished_demo(tmp_path / "elsewhere")  # a real demo folder outside the root
    link = root / "20250101-000000-123456"
    link.symlink_to(elsewhere, target_is_directory=True)
    marker_link = root / "20250101-000000-654321"
    marker_link.mkdir()
    (marker_link / MARKER).symlink_to(elsewhere / MARKER)

    report = clean(root)

    assert [r.path for r in report.removed] == [demo]
    assert set(report.other) == {unmarked, misnamed, stray_file, link, marker_link}
    assert (unmarked / "keep.txt").read_text() == "mine"
    assert (misnamed / MARKER).exists() and stray_file.exists()
    assert link.is_symlink() and (elsewhere / "registry" / "registry.sqlite3").exists()
    assert (marker_link / MARKER).is_symlink()


def test_clean_leaves_a_running_demos_folder(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    finished = _finished_demo(root)
    running = new_workdir(root, NOW)
    with claim(running):
        report = clean(root)
        assert report.in_use == (running,)
        assert running.is_dir() and (running / MARKER).is_file()
    assert [r.path for r in report.removed] == [finished]
    assert [r.path for r in clean(root).removed] == [running]  # once it has ended


def test_clean_through_a_linked_root(tmp_path: Path) -> None:
    """A cache directory moved elsewhere and linked back is still cleaned."""
    real = tmp_path / "disk" / "demos"
    demo = _finished_demo(real)
    (tmp_path / "cache").symlink_to(tmp_path / "disk", target_is_directory=True)
    linked = {"SEALBENCH_DEMO_DIR": str(tmp_path / "cache" / "demos")}
    assert " demo --clean " in removal_lines(demo, linked)[-1]
    report = clean(tmp_path / "cache" / "demos")
    assert [r.path for r in report.removed] == [demo] and not demo.exists()


def test_clean_of_a_missing_root_removes_nothing(tmp_path: Path) -> None:
    report = clean(tmp_path / "never-made")
    assert report.removed == () and report.freed_bytes == 0
    assert not (tmp_path / "never-made").exists()


def test_human_size() -> None:
    assert demo_workdirs.human_size(512) == "512 B"
    assert demo_workdirs.human_size(244 * 2**20) == "244 MiB"
    assert demo_workdirs.human_size(3 * 2**30 // 2) == "1.5 GiB"


# -- the command -------------------------------------------------------------------------------


def test_demo_clean_command_removes_the_demo_folders_and_says_what_it_freed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "demos"
    demos = [_finished_demo(root), _finished_demo(root)]
    (root / "notes.txt").write_text("mine")
    result = CliRunner().invoke(
        app, ["demo", "--clean"], env={"SEALBENCH_DEMO_DIR": str(root), "COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    for path in demos:
        assert f"removed {path} (" in result.stdout and not path.exists()
    assert "freed " in result.stdout and "(2 demo folders removed from" in result.stdout
    assert "left 1 other entry" in result.stdout and (root / "notes.txt").exists()


def test_demo_clean_refuses_to_run_a_demo_as_well(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["demo", "--clean", "--workdir", str(tmp_path / "w")],
        env={"SEALBENCH_DEMO_DIR": str(tmp_path / "demos")},
    )
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "w").exists()


def test_removal_lines_name_the_clean_command_for_a_demo_folder(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    demo = _finished_demo(root)
    lines = removal_lines(demo, {"SEALBENCH_DEMO_DIR": str(root)})
    assert lines[0] == f"rm -rf {demo}"
    assert lines[1].startswith(f"SEALBENCH_DEMO_DIR={root} ")
    assert lines[1].endswith(f" demo --clean  # every demo folder in {root}")


def test_removal_lines_of_a_chosen_workdir_are_rm_only(tmp_path: Path) -> None:
    chosen = tmp_path / "my demo"
    chosen.mkdir()
    assert removal_lines(chosen, {"SEALBENCH_DEMO_DIR": str(tmp_path / "demos")}) == (
        f"rm -rf '{chosen}'",
    )


@pytest.mark.parametrize("bad", ["--cases", "--size"])
def test_demo_refusing_its_options_creates_no_work_folder(bad: str, tmp_path: Path) -> None:
    root = tmp_path / "demos"
    value = "0" if bad == "--cases" else "huge"
    result = CliRunner().invoke(
        app, ["demo", bad, value], env={"SEALBENCH_DEMO_DIR": str(root)}
    )
    assert result.exit_code == 3, result.output
    assert not root.exists()


def test_failed_demo_keeps_its_folder_and_says_how_to_remove_it(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    env = {"SEALBENCH_DEMO_DIR": str(root), "HOME": str(tmp_path), "COLUMNS": "300",
           "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           # no Docker engine there: the demo fails at step 0, after its folder is made
           "DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}"}
    argv = [sys.executable, "-m", "sealbench.client.cli", "demo", "--tee", "docker",
            "--cases", "1", "--size", "small"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Docker engine" in proc.stderr
    [workdir] = root.iterdir()
    assert "the demo's files stay for inspection" in proc.stderr
    assert f"rm -rf {workdir}" in proc.stderr
    assert " demo --clean  # every demo folder" in proc.stderr
    assert [r.path for r in clean(root).removed] == [workdir]  # its lock ended with it
