"""``sealbench-server``: init (with the transparency log's key), user add (token printed once,
stored hashed), audit verify, key show and rotate, and refusals with exit code 1 and a message
instead of a traceback."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from sealbench.crypto.note import KeyEndorsement, SignerKey, write_signer_key
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


def test_user_add_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["user", "add", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "print its API token once" in text and "sealbench profile add" in text
    assert "--email EMAIL the account's email" in text
    assert "--admin make the account a registry admin" in text


def test_init_generates_a_private_log_key_and_prints_only_its_public_half(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEALBENCH_SERVER_LOG_ORIGIN", "registry.test/log")
    assert main(["init"]) == 0
    key_file = data_dir / "log-signer.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = key_file.read_text().strip()
    signer = SignerKey.from_string(secret)
    out = capsys.readouterr().out
    assert signer.verifier().to_string() in out and secret not in out
    assert "transparency log registry.test/log" in out
    assert main(["init"]) == 0  # keeps the key
    assert key_file.read_text().strip() == secret
    assert main(["key", "show"]) == 0
    assert f"{signer.verifier().to_string()}  (current)" in capsys.readouterr().out


def test_key_rotate_endorses_the_new_key_and_keeps_the_old_one_published(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    old = SignerKey.from_string((data_dir / "log-signer.key").read_text())
    capsys.readouterr()
    assert main(["key", "rotate"]) == 0
    assert "restart every server process" in capsys.readouterr().err
    new = SignerKey.from_string((data_dir / "log-signer.key").read_text())
    assert new.name == old.name and new.verifier() != old.verifier()
    assert stat.S_IMODE((data_dir / "log-signer.key").stat().st_mode) == 0o600
    assert not (data_dir / "log-signer.key.new").exists()
    db = open_database(f"sqlite:///{data_dir / 'registry.sqlite3'}")
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT verifier, retired_at, endorsement FROM log_keys ORDER BY id")
        ).all()
        action = conn.execute(text("SELECT action FROM audit_events ORDER BY seq DESC")).first()
    db.dispose()
    assert [r.verifier for r in rows] == [old.verifier().to_string(), new.verifier().to_string()]
    assert rows[0].retired_at is not None and rows[1].retired_at is None
    assert KeyEndorsement.open(rows[1].endorsement.encode(), old.verifier()).new_key == (
        new.verifier()
    )
    assert action is not None and action[0] == "log.key.rotate"
    assert main(["audit", "verify"]) == 0
    assert "audit chain intact: 1 events" in capsys.readouterr().out


def test_swapped_log_key_refused(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A lost or replaced key file must not silently start signing a new log."""
    assert main(["init"]) == 0
    key_file = data_dir / "log-signer.key"
    key_file.unlink()
    write_signer_key(key_file, SignerKey.generate("impostor.test/log"))
    capsys.readouterr()
    assert main(["init"]) == 1
    assert "is not this registry's current log key" in capsys.readouterr().err


def test_loose_log_key_permissions_refused(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    (data_dir / "log-signer.key").chmod(0o644)
    capsys.readouterr()
    assert main(["serve"]) == 1
    assert "chmod 600" in capsys.readouterr().err
