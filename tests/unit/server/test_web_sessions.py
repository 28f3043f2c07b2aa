"""Dashboard sessions live in the database, shared by every server process: two apps on one
database (two workers, or two replicas) honour each other's sign-ins and sign-outs; a session
expires when idle and at its maximum age on any process; the database holds neither the session
id nor the credential; revoking the token or disabling the user ends the session at once; a
user cannot pile up sessions without bound. Each runs on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.services.accounts import disable_user, list_tokens, revoke_token
from sealbench.server.settings import ServerSettings
from sealbench.server.web._sessions import SessionStore, csrf_for

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
COOKIE = "sealbench_session"


@pytest.fixture
def two_apps(settings: ServerSettings, clock: Any, jwks_fetcher: Any) -> Iterator[list[TestClient]]:
    """Two independent registry apps (two processes' worth of memory) on one database."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                TestClient(create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher))
            )
            for _ in range(2)
        ]


def _sign_in(web: TestClient, token: str) -> str:
    web.cookies.clear()
    form = web.get("/ui/sign-in")
    csrf = unescape(_CSRF.search(form.text).group(1))  # type: ignore[union-attr]
    r = web.post(
        "/ui/sign-in", data={"csrf": csrf, "token": token, "next": "/ui/"}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    return str(r.cookies[COOKIE])


def _signed_in(web: TestClient, session_id: str) -> bool:
    web.cookies.clear()
    web.cookies.set(COOKIE, session_id)
    r = web.get("/ui/", follow_redirects=False)
    assert r.status_code in (200, 303), r.status_code
    return bool(r.status_code == 200)


def test_session_from_one_process_works_on_another_and_sign_out_ends_it_everywhere(
    two_apps: list[TestClient], make_user: Any
) -> None:
    a, b = two_apps
    user = make_user("hospital@x.test")
    sid = _sign_in(a, user.token)
    assert _signed_in(b, sid) and _signed_in(a, sid)
    # the form CSRF token rendered by one process is accepted by the other
    page = b.get("/ui/")
    csrf = unescape(_CSRF.search(page.text).group(1))  # type: ignore[union-attr]
    assert csrf == csrf_for(sid)
    a.cookies.clear()
    a.cookies.set(COOKIE, sid)
    r = a.post("/ui/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303
    assert not _signed_in(b, sid) and not _signed_in(a, sid)


def test_forged_csrf_token_refused_by_the_other_process(
    two_apps: list[TestClient], make_user: Any
) -> None:
    a, b = two_apps
    sid = _sign_in(a, make_user("hospital@x.test").token)
    other = _sign_in(a, make_user("other@x.test").token)
    b.cookies.clear()
    b.cookies.set(COOKIE, sid)
    r = b.post("/ui/sign-out", data={"csrf": csrf_for(other)}, follow_redirects=False)
    assert r.status_code == 403 and _signed_in(b, sid)


def test_database_holds_neither_the_session_id_nor_the_credential(
    two_apps: list[TestClient], make_user: Any, database_url: str
) -> None:
    user = make_user("hospital@x.test")
    sid = _sign_in(two_apps[0], user.token)
    db = open_database(database_url)
    with db.engine.connect() as conn:
        dump = " ".join(
            str(v) for row in conn.execute(text("SELECT * FROM web_sessions")) for v in row
        )
    db.dispose()
    assert dump and sid not in dump and user.token not in dump and user.token[4:] not in dump
    assert csrf_for(sid) not in dump


def test_idle_session_expires_on_every_process(
    two_apps: list[TestClient], make_user: Any, clock: Any
) -> None:
    a, b = two_apps
    sid = _sign_in(a, make_user("hospital@x.test").token)
    for web in (b, a, b):
        clock.advance(3000)  # less than the idle limit (3600 s) since the last use
        assert _signed_in(web, sid)
    clock.advance(3600)
    assert not _signed_in(a, sid) and not _signed_in(b, sid)


def test_session_cannot_outlive_its_maximum_age_even_when_used(
    two_apps: list[TestClient], make_user: Any, clock: Any
) -> None:
    a, b = two_apps
    sid = _sign_in(a, make_user("hospital@x.test").token)
    signed_in_at = clock.now
    while clock.now + timedelta(seconds=3000) < signed_in_at + timedelta(hours=8):
        clock.advance(3000)
        assert _signed_in(b, sid)
    clock.advance(3000)  # used every 50 minutes, but now past 8 hours
    assert not _signed_in(a, sid)


def test_revoked_token_ends_its_sessions_on_every_process_at_once(
    two_apps: list[TestClient], make_user: Any, database_url: str, clock: Any
) -> None:
    a, b = two_apps
    user = make_user("hospital@x.test")
    bystander = make_user("other@x.test")
    sid, kept = _sign_in(a, user.token), _sign_in(a, bystander.token)
    db = open_database(database_url)
    with db.writer() as session:
        [token] = list_tokens(session, email=user.email)
        revoke_token(session, token_id=token.id, now=clock())
    db.dispose()
    assert not _signed_in(b, sid) and not _signed_in(a, sid)
    assert _signed_in(b, kept)


def test_disabled_user_signed_out_and_cannot_sign_in_again(
    two_apps: list[TestClient], make_user: Any, database_url: str, clock: Any
) -> None:
    a, b = two_apps
    user = make_user("hospital@x.test")
    sid = _sign_in(a, user.token)
    db = open_database(database_url)
    with db.writer() as session:
        disable_user(session, email=user.email, now=clock())
    db.dispose()
    assert not _signed_in(b, sid)
    form = b.get("/ui/sign-in")
    csrf = unescape(_CSRF.search(form.text).group(1))  # type: ignore[union-attr]
    r = b.post("/ui/sign-in", data={"csrf": csrf, "token": user.token}, follow_redirects=False)
    assert r.status_code == 401 and COOKIE not in r.cookies


def test_one_user_cannot_pile_up_sessions(
    client: TestClient, make_user: Any, database_url: str, clock: Any
) -> None:
    user = make_user("hospital@x.test")
    registry = client.app.state.registry  # type: ignore[attr-defined]
    identity = registry.authenticator.identify(f"Bearer {user.token}")
    store = SessionStore(max_per_user=3)
    ids = []
    for _ in range(5):
        clock.advance(1)
        ids.append(store.create(registry.db, identity, clock())[0])
    live = [sid for sid in ids if store.get(registry.db, sid, clock()) is not None]
    assert live == ids[-3:] and store.count(registry.db) == 3


def test_guessed_or_oversized_session_ids_find_nothing(client: TestClient, make_user: Any) -> None:
    user = make_user("hospital@x.test")
    registry = client.app.state.registry  # type: ignore[attr-defined]
    store = SessionStore()
    sid, _ = store.create(
        registry.db, registry.authenticator.identify(f"Bearer {user.token}"), registry.clock()
    )
    now = registry.clock()
    for guess in ("", None, sid[:-1], sid + "x", "x" * 10_000):
        assert store.get(registry.db, guess, now) is None
    assert store.get(registry.db, sid, now) is not None
