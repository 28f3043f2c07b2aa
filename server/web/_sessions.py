"""Dashboard sign-in sessions, kept in the registry's database so that every server process (and
every replica on one PostgreSQL) knows them, and the CSRF tokens bound to them.

Why a server-side session and not the token in a cookie: the browser only ever holds a random
256-bit session id (HTTP-only, ``SameSite=Strict``, ``Secure`` on HTTPS, ``__Host-`` prefixed
there), so a stolen cookie cannot be replayed against the API (which only takes
``Authorization: Bearer``), nothing long-lived lands in the browser's cookie jar, and sign-out
really ends the session.

What the database holds (``web_sessions``): the SHA-256 of the session id (never the id, so a
copy of the database opens no session), the user, the API token the user signed in with (NULL
for an OIDC JWT), and the creation, last-use and expiry times. The credential itself is never
stored. Each lookup joins the user and the token, so revoking that token or disabling the user
ends the session on every process at once. A JWT session ends when the JWT expires.

Lifetimes: a session ends after ``idle_s`` without use and ``max_s`` after sign-in at most. The
last-use time is written at most once per ``touch_s`` (a read per page, a write per minute), so
the idle timeout is exact to within ``touch_s``. Signing in deletes expired sessions and keeps
at most ``max_per_user`` sessions per user (the oldest go first).

CSRF: a signed-in form carries HMAC-SHA256(session id, ``"sealbench/csrf/v1"``), compared in
constant time: derived from the secret only the browser and the request hold, so nothing more is
stored. Before sign-in a double-submit token whose cookie is HTTP-only and ``SameSite=Strict``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from sealbench.server.auth import Identity, Principal
from sealbench.server.db import Database
from sealbench.server.models import ApiToken, User
from sealbench.server.models import WebSession as SessionRow

__all__ = [
    "MAX_SESSIONS_PER_USER",
    "SESSION_IDLE_S",
    "SESSION_MAX_S",
    "SESSION_TOUCH_S",
    "SessionStore",
    "Upkeep",
    "WebSession",
    "csrf_for",
    "new_csrf_token",
    "session_key",
    "tokens_match",
]

SESSION_IDLE_S = 3600.0
SESSION_MAX_S = 8 * 3600.0
SESSION_TOUCH_S = 60.0
MAX_SESSIONS_PER_USER = 50
_CSRF_LABEL = b"sealbench/csrf/v1"

#: The write a looked-up session calls for: none, record its use, or delete it (dead).
Upkeep = Literal["touch", "delete"] | None


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser: who it is and the CSRF token its forms must carry."""

    principal: Principal
    csrf: str = field(repr=False)
    token_id: int | None
    created: datetime
    last_seen: datetime
    expires: datetime


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def tokens_match(expected: str | None, received: str | None) -> bool:
    """Constant-time comparison; a missing or empty token never matches."""
    if not expected or not received:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), received.encode("utf-8"))


def session_key(session_id: str) -> str:
    """The stored form of a session id: hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def csrf_for(session_id: str) -> str:
    """The CSRF token of the session ``session_id``."""
    mac = hmac.new(session_id.encode("utf-8"), _CSRF_LABEL, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class SessionStore:
    """Sessions in the ``web_sessions`` table. Every method does blocking database work: call
    it from a worker thread. ``now`` is the registry's (wall) clock, shared by all processes."""

    idle_s: float = SESSION_IDLE_S
    max_s: float = SESSION_MAX_S
    touch_s: float = SESSION_TOUCH_S
    max_per_user: int = MAX_SESSIONS_PER_USER

    def create(self, db: Database, identity: Identity, now: datetime) -> tuple[str, WebSession]:
        """A new session for a verified ``identity``; returns its id (for the cookie only)."""
        session_id = secrets.token_urlsafe(32)
        expires = now + timedelta(seconds=self.max_s)
        if identity.expires_at is not None:
            expires = min(expires, identity.expires_at)
        user_id = identity.principal.user_id
        with db.writer() as session:
            session.execute(
                delete(SessionRow).where(
                    (SessionRow.expires_at <= now)
                    | (SessionRow.last_seen_at <= now - timedelta(seconds=self.idle_s))
                )
            )
            count = session.scalar(
                select(func.count()).select_from(SessionRow).where(SessionRow.user_id == user_id)
            )
            excess = (count or 0) - self.max_per_user + 1
            if excess > 0:
                oldest = (
                    select(SessionRow.id_sha256)
                    .where(SessionRow.user_id == user_id)
                    .order_by(SessionRow.created_at, SessionRow.id_sha256)
                    .limit(excess)
                )
                doomed = list(session.scalars(oldest))
                session.execute(delete(SessionRow).where(SessionRow.id_sha256.in_(doomed)))
            session.add(
                SessionRow(
                    id_sha256=session_key(session_id),
                    user_id=user_id,
                    token_id=identity.token_id,
                    created_at=now,
                    last_seen_at=now,
                    expires_at=expires,
                )
            )
            session.commit()
        web = WebSession(
            identity.principal, csrf_for(session_id), identity.token_id, now, now, expires
        )
        return session_id, web

    def get(self, db: Database, session_id: str | None, now: datetime) -> WebSession | None:
        """The live session named by ``session_id``, else None. A session that expired, whose
        token was revoked or whose user was disabled is deleted on the way."""
        with db.reader() as session:
            found, upkeep = self.lookup(session, session_id, now)
        self.upkeep(db, session_id, now, upkeep)
        return found

    def lookup(
        self, session: Session, session_id: str | None, now: datetime
    ) -> tuple[WebSession | None, Upkeep]:
        """:meth:`get`'s read inside the caller's read transaction (a page reads its session
        with its own queries); the write it calls for goes to :meth:`upkeep` afterwards."""
        if not session_id or len(session_id) > 256:
            return None, None
        query = (
            select(
                SessionRow.user_id,
                SessionRow.token_id,
                SessionRow.created_at,
                SessionRow.last_seen_at,
                SessionRow.expires_at,
                User.email,
                User.is_admin,
                User.disabled_at,
                ApiToken.revoked_at,
            )
            .join(User, User.id == SessionRow.user_id)
            .outerjoin(ApiToken, ApiToken.id == SessionRow.token_id)
            .where(SessionRow.id_sha256 == session_key(session_id))
        )
        row = session.execute(query).first()
        if row is None:
            return None, None
        dead = (
            now >= row.expires_at
            or (now - row.last_seen_at).total_seconds() >= self.idle_s
            or row.disabled_at is not None
            or (row.token_id is not None and row.revoked_at is not None)
        )
        if dead:
            return None, "delete"
        touch = (now - row.last_seen_at).total_seconds() >= self.touch_s
        principal = Principal(user_id=row.user_id, email=row.email, is_admin=row.is_admin)
        found = WebSession(
            principal,
            csrf_for(session_id),
            row.token_id,
            row.created_at,
            now if touch else row.last_seen_at,
            row.expires_at,
        )
        return found, "touch" if touch else None

    def upkeep(self, db: Database, session_id: str | None, now: datetime, action: Upkeep) -> None:
        """Write what :meth:`lookup` found due: delete a dead session, or record its use."""
        if action is None or not session_id:
            return
        key = session_key(session_id)
        if action == "delete":
            self._delete(db, key)
            return
        with db.writer() as session:
            session.execute(
                update(SessionRow).where(SessionRow.id_sha256 == key).values(last_seen_at=now)
            )
            session.commit()

    def drop(self, db: Database, session_id: str | None) -> None:
        """End the session (sign-out, or a new sign-in from the same browser)."""
        if session_id and len(session_id) <= 256:
            self._delete(db, session_key(session_id))

    def count(self, db: Database) -> int:
        with db.reader() as session:
            return session.scalar(select(func.count()).select_from(SessionRow)) or 0

    @staticmethod
    def _delete(db: Database, key: str) -> None:
        with db.writer() as session:
            session.execute(delete(SessionRow).where(SessionRow.id_sha256 == key))
            session.commit()
