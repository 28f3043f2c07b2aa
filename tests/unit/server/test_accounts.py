"""Revocation reaches every process within its stated bound: two apps on one database (two
workers or replicas, each with its own token cache) refuse a revoked token or a disabled user
once ``revocation_check_seconds`` has passed, however long their cache would keep it; each
operator action is an audit event; the operator commands (``user list / disable``,
``token list / revoke``, ``migrate``) print what they did and refuse bad input with exit
code 1. Runs on SQLite and PostgreSQL (the CLI tests on SQLite)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from sealbench.server.app import create_app
from sealbench.server.audit import verify_stored_chain
from sealbench.server.auth import Authenticator
from sealbench.server.cli import main
from sealbench.server.db import Database, open_database
from sealbench.server.errors import ConflictError, NotFoundError
from sealbench.server.jwks import JwksCache, UrllibJwksFetcher
from sealbench.server.migrate import alembic_config
from sealbench.server.models import AuditEvent
from sealbench.server.services.accounts import (
    disable_user,
    list_tokens,
    list_users,
    revoke_token,
)
from sealbench.server.settings import ServerSettings

API = "/api/v1"
CHECK_S = 1.0


@dataclass
class Monotonic:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def mono() -> Monotonic:
    return Monotonic()


@pytest.fixture
def two_apps(
    settings: ServerSettings, clock: Any, jwks_fetcher: Any, mono: Monotonic
) -> Iterator[list[TestClient]]:
    """Two apps on one database, each caching tokens for 30 s, checking revocations every 1 s."""
    s = settings.model_copy(
        update={"token_cache_seconds": 30.0, "revocation_check_seconds": CHECK_S}
    )
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                TestClient(create_app(s, clock=clock, jwks_fetcher=jwks_fetcher, monotonic=mono))
            )
            for _ in range(2)
        ]


def _status(app: TestClient, token: str) -> int:
    return int(app.get(f"{API}/users/me", headers={"Authorization": f"Bearer {token}"}).status_code)


def test_revoked_token_refused_by_every_process_within_the_check_interval(
    two_apps: list[TestClient], make_user: Any, database_url: str, clock: Any, mono: Monotonic
) -> None:
    user = make_user("hospital@x.test")
    bystander = make_user("other@x.test")
    assert [_status(app, user.token) for app in two_apps] == [200, 200]  # now cached by both
    assert [_status(app, bystander.token) for app in two_apps] == [200, 200]
    db = open_database(database_url)
    with db.writer() as session:
        [token] = list_tokens(session, email=user.email)
        revoked = revoke_token(session, token_id=token.id, now=clock())
    mono.now += CHECK_S  # the stated bound, far inside the 30 s cache lifetime
    assert [_status(app, user.token) for app in two_apps] == [401, 401]
    assert [_status(app, bystander.token) for app in two_apps] == [200, 200]
    with db.reader() as session:
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "token.revoke")).one()
        verify_stored_chain(session)
    db.dispose()
    assert revoked.revoked_at == clock() and json.loads(event.payload) == {"token_id": token.id}
    assert event.entity_id == str(user.user_id)


def test_disabled_user_refused_by_every_process_within_the_check_interval(
    two_apps: list[TestClient], make_user: Any, database_url: str, clock: Any, mono: Monotonic
) -> None:
    user = make_user("hospital@x.test")
    assert [_status(app, user.token) for app in two_apps] == [200, 200]
    db = open_database(database_url)
    with db.writer() as session:
        disable_user(session, email="Hospital@X.test", now=clock())
    with db.reader() as session:
        [summary] = [u for u in list_users(session) if u.email == user.email]
        actions = session.scalars(select(AuditEvent.action)).all()
    db.dispose()
    mono.now += CHECK_S
    assert [_status(app, user.token) for app in two_apps] == [401, 401]
    assert summary.disabled_at == clock() and "user.disable" in actions


def test_cache_lives_on_between_checks_when_nothing_was_revoked(
    two_apps: list[TestClient], make_user: Any, database_url: str, mono: Monotonic
) -> None:
    """The check drops the cache only when the generation moved: otherwise a cached token
    needs no token lookup for the cache's whole lifetime (here: its row is gone, unseen)."""
    user = make_user("hospital@x.test")
    app = two_apps[0]
    assert _status(app, user.token) == 200
    db = open_database(database_url)
    with db.engine.begin() as conn:  # behind the registry's back: no generation bump
        conn.execute(text("UPDATE api_tokens SET token_sha256 = 'gone'"))
    db.dispose()
    mono.now += 10 * CHECK_S
    assert _status(app, user.token) == 200  # still cached: the generation did not move
    mono.now += 30
    assert _status(app, user.token) == 401  # the cache entry expired


def test_one_thread_reads_the_generation_while_the_others_use_the_cache(
    make_user: Any, database_url: str, clock: Any, mono: Monotonic
) -> None:
    """While one request reads the revocation generation, the others are answered from the
    cache instead of piling onto the database; one read per interval, however many callers."""
    user = make_user("hospital@x.test")
    db = open_database(database_url)
    reads: list[str] = []
    hold = threading.Event()
    entered, release = threading.Event(), threading.Event()

    def reader() -> Any:
        reads.append("read")
        if hold.is_set():  # the generation read after the interval: keep it in flight
            entered.set()
            assert release.wait(10)
        return db.reader()

    counting = Database(engine=db.engine, reader=reader, writer=db.writer)  # type: ignore[arg-type]
    auth = Authenticator(
        counting,
        oidc=None,
        jwks=JwksCache(UrllibJwksFetcher(), ttl=0, clock=mono),
        clock=clock,
        cache_seconds=30,
        monotonic=mono,
        revocation_check_seconds=CHECK_S,
    )
    header = f"Bearer {user.token}"
    assert auth.authenticate(header).email == user.email
    assert reads == ["read", "read"]  # the generation, then the token
    reads.clear()
    mono.now += CHECK_S
    assert auth.cached(header) is None  # due: the caller goes to authenticate()
    hold.set()
    checker = threading.Thread(target=auth.authenticate, args=(header,))
    checker.start()
    assert entered.wait(10)
    others = [auth.cached(header) for _ in range(50)] + [
        auth.authenticate(header) for _ in range(5)
    ]
    release.set()
    checker.join(10)
    db.dispose()
    assert all(p is not None and p.email == user.email for p in others)
    assert reads == ["read"]  # the held generation read, nothing else


def test_revoking_twice_or_an_unknown_token_refused(
    make_user: Any, database_url: str, clock: Any
) -> None:
    user = make_user("hospital@x.test")
    db = open_database(database_url)
    with db.writer() as session:
        [token] = list_tokens(session, email=user.email)
        revoke_token(session, token_id=token.id, now=clock())
    with db.writer() as session, pytest.raises(ConflictError, match="already revoked"):
        revoke_token(session, token_id=token.id, now=clock())
    with db.writer() as session, pytest.raises(NotFoundError):
        revoke_token(session, token_id=token.id + 1000, now=clock())
    with db.writer() as session, pytest.raises(NotFoundError):
        disable_user(session, email="nobody@x.test", now=clock())
    db.dispose()


# ------------------------------------------------------------------ the operator's commands


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "data"
    monkeypatch.setenv("SEALBENCH_SERVER_DATA_DIR", str(path))
    monkeypatch.delenv("SEALBENCH_SERVER_DATABASE_URL", raising=False)
    monkeypatch.delenv("SEALBENCH_SERVER_MODE", raising=False)
    return path


def test_operator_lists_revokes_and_disables(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate"]) == 0
    assert "migrated from revision None to" in capsys.readouterr().out
    assert main(["migrate"]) == 0
    assert "already at revision" in capsys.readouterr().out
    assert main(["user", "add", "--email", "a@x.test", "--admin"]) == 0
    assert main(["user", "add", "--email", "b@x.test"]) == 0
    tokens = capsys.readouterr().out.split()
    assert main(["token", "list", "--email", "b@x.test"]) == 0
    listing = capsys.readouterr().out
    assert "b@x.test" in listing and "a@x.test" not in listing
    assert not any(t.startswith("sbt_") and t in listing for t in tokens)
    token_id = listing.splitlines()[1].split()[0]
    assert main(["token", "revoke", "--id", token_id]) == 0
    assert f"revoked API token {token_id}" in capsys.readouterr().out
    assert main(["token", "revoke", "--id", token_id]) == 1
    assert "already revoked" in capsys.readouterr().err
    assert main(["user", "disable", "--email", "a@x.test"]) == 0
    assert "disabled user" in capsys.readouterr().out
    assert main(["user", "list"]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "disabled" in rows["a@x.test"] and rows["a@x.test"].split()[-1] == "1"
    assert "active" in rows["b@x.test"] and rows["b@x.test"].split()[-1] == "0"
    assert main(["user", "disable", "--email", "nobody@x.test"]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert main(["audit", "verify"]) == 0


def test_commands_refuse_a_database_behind_the_code(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir.mkdir()
    db = open_database(f"sqlite:///{data_dir / 'registry.sqlite3'}")
    with db.engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0003")
    db.dispose()
    assert main(["user", "list"]) == 1
    assert "run 'sealbench-server migrate'" in capsys.readouterr().err
    assert main(["migrate"]) == 0 and main(["user", "list"]) == 0


def test_leaked_token_revoked_by_value_from_stdin_never_echoed(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["migrate"]) == 0
    assert main(["user", "add", "--email", "a@x.test"]) == 0
    token = capsys.readouterr().out.split()[-1]
    monkeypatch.setattr("sys.stdin", io.StringIO(token + "\n"))
    assert main(["token", "revoke", "--stdin"]) == 0
    out = capsys.readouterr()
    assert "revoked API token 1 of user 1 <a@x.test>" in out.out and token not in out.out + out.err
    for wrong in (token, "sbt_" + "x" * 43, "not-a-token"):  # revoked, unknown, malformed
        monkeypatch.setattr("sys.stdin", io.StringIO(wrong + "\n"))
        assert main(["token", "revoke", "--stdin"]) == 1
        err = capsys.readouterr().err
        assert wrong not in err and "Traceback" not in err
    with pytest.raises(SystemExit) as usage:  # neither --id nor --stdin: a usage error
        main(["token", "revoke"])
    assert usage.value.code == 2
