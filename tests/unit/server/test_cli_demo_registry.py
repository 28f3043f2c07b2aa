"""``sealbench-server user add`` run from a demo's shell (``SEALBENCH_CONFIG_DIR`` names the
demo's profiles, beside its registry) finds no registry in the current folder: it names the
demo's registry and the exact ``--data-dir`` to pass, never suggests ``init`` (which would
make a second, empty registry), and creates nothing; with ``--data-dir`` the account is made in
the demo's registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealbench.server.cli import main


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A demo's work folder (registry and profiles' folder) and a shell set up for it, in
    another current folder."""
    root = tmp_path / "demo-1"
    (root / "config").mkdir(parents=True)
    for name in ("SEALBENCH_SERVER_DATA_DIR", "SEALBENCH_SERVER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--data-dir", str(root / "registry"), "init"]) == 0
    monkeypatch.setenv("SEALBENCH_CONFIG_DIR", str(root / "config"))
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return root


def test_user_add_in_a_demo_shell_names_the_demos_data_dir(
        demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["user", "add", "--email", "new@demo.test"]) == 1
    err = capsys.readouterr().err
    assert f"--data-dir {demo / 'registry'}" in err
    assert "sealbench-server init" not in err
    assert not Path("sealbench-data").exists()  # nothing was created here

    assert main(["--data-dir", str(demo / "registry"), "user", "add", "--email",
                 "new@demo.test"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("sbt_")
    assert main(["--data-dir", str(demo / "registry"), "user", "list"]) == 0
    assert "new@demo.test" in capsys.readouterr().out


def test_outside_a_demo_the_refusal_offers_data_dir_and_init(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("SEALBENCH_CONFIG_DIR", "SEALBENCH_SERVER_DATA_DIR",
                 "SEALBENCH_SERVER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["user", "add", "--email", "a@x.test"]) == 1
    err = capsys.readouterr().err
    assert "--data-dir DIR" in err and "'sealbench-server init'" in err
