"""Dashboard sign-in sessions, held in the server's memory, and CSRF tokens.

Why a server-side session and not the token in a cookie: the browser only ever holds a random
256-bit session id (HTTP-only, ``SameSite=Strict``, ``Secure`` on HTTPS, ``__Host-`` prefixed
there). The API token (or OIDC JWT) the user pasted stays in this process's memory, so a stolen
cookie cannot be replayed against the API (which only takes ``Authorization: Bearer``), nothing
long-lived lands in the browser's cookie jar, sign-out really ends the session, and a restart
ends them all. Each request re-authenticates the stored credential through the API's own
:class:`~sealbench.server.auth.Authenticator`, so a revoked token or an expired JWT stops
working here exactly as it does on the API. Sessions live ``SESSION_IDLE_S`` without use and
``SESSION_MAX_S`` at most. The store is keyed by the SHA-256 of the id; credentials are never
logged and never written anywhere.

Limitation: sessions are per process. With ``sealbench-server serve --workers N`` (N > 1) a
browser may reach a worker that does not know its session and is asked to sign in again.

CSRF: every form carries a token compared in constant time with one the server holds: the
session's own token once signed in, and before that (sign-in) a double-submit token whose
cookie is HTTP-only and ``SameSite=Strict``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

__all__ = [
    "SESSION_IDLE_S",
    "SESSION_MAX_S",
    "SessionStore",
    "WebSession",
    "new_csrf_token",
    "tokens_match",
]

SESSION_IDLE_S = 3600.0
SESSION_MAX_S = 8 * 3600.0
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser. ``credential`` is the bearer credential (never shown, never logged)."""

    credential: str = field(repr=False)
    csrf: str = field(repr=False)
    created: float
    last_seen: float


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def tokens_match(expected: str | None, received: str | None) -> bool:
    """Constant-time comparison; a missing or empty token never matches."""
    if not expected or not received:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), received.encode("utf-8"))


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


class SessionStore:
    """Sessions in memory, bounded (the oldest are dropped first), thread-safe."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        idle_s: float = SESSION_IDLE_S,
        max_s: float = SESSION_MAX_S,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._clock = clock
        self._idle_s = idle_s
        self._max_s = max_s
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, WebSession] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, credential: str) -> tuple[str, WebSession]:
        """A new session for ``credential``; returns its id (for the cookie) and the session."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        session = WebSession(credential, new_csrf_token(), now, now)
        with self._lock:
            while len(self._sessions) >= self._max_sessions:
                self._sessions.popitem(last=False)
            self._sessions[_key(session_id)] = session
        return session_id, session

    def get(self, session_id: str | None) -> WebSession | None:
        """The live session named by ``session_id`` (its idle timer restarts), else None."""
        if not session_id:
            return None
        key = _key(session_id)
        now = self._clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if now - session.last_seen >= self._idle_s or now - session.created >= self._max_s:
                del self._sessions[key]
                return None
            session = replace(session, last_seen=now)
            self._sessions[key] = session
            return session

    def drop(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._sessions.pop(_key(session_id), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
