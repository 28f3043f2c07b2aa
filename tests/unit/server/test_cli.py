"""``sealbench-server``: init, user add (token printed once, stored hashed), audit verify, and
refusals with exit code 1 and a message instead of a traceback."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import text

from sealbench.server.cli import main
from sealbench.server.db import open_database


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "data"
    monkeypatch.setenv("SEALBENCH_SERVER_DATA_DIR", str(path))
    monkeypatch.delenv("SEALBENCH_SERVER_DATABASE_URL", raising=False)
    monkeypatch.delenv("SEALBENCH_SERVER_MODE", raising=False)
    return path


def test_init_user_add_and_audit_verify(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init"]) == 0
    assert (data_dir / "registry.sqlite3").is_file()
    assert main(["init"]) == 0  # idempotent
    capsys.readouterr()
    assert main(["user", "add", "--email", "Root@Example.test", "--admin"]) == 0
    out = capsys.readouterr()
    token = out.out.strip().splitlines()[-1]
    assert token.startswith("sbt_") and "shown once" in out.err
    assert "root@example.test" in out.out and "(admin)" in out.out
    db = open_database(f"sqlite:///{data_dir / 'registry.sqlite3'}")
    with db.engine.connect() as conn:
        stored = conn.execute(text("SELECT token_sha256 FROM api_tokens")).scalar_one()
    db.dispose()
    assert stored == hashlib.sha256(token.encode()).hexdigest()
    assert main(["audit", "verify"]) == 0
    assert "2 events" in capsys.readouterr().out


def test_duplicate_user_refused_without_traceback(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    assert main(["user", "add", "--email", "a@x.test"]) == 0
    capsys.readouterr()
    assert main(["user", "add", "--email", "a@x.test"]) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and "Traceback" not in err


def test_commands_refuse_uninitialised_registry(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["serve"], ["user", "add", "--email", "a@x.test"], ["audit", "verify"]):
        assert main(argv) == 1
        assert "sealbench-server init" in capsys.readouterr().err
    assert not data_dir.exists()


def test_production_mode_refuses_sqlite(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEALBENCH_SERVER_MODE", "production")
    assert main(["init"]) == 1
    assert "insecure settings" in capsys.readouterr().err
    assert not data_dir.exists()
