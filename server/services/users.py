"""Users and their API tokens (created by the operator's ``sealbench-server user add``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from sealbench.server.audit import append_event
from sealbench.server.auth import hash_api_token, new_api_token
from sealbench.server.errors import ConflictError, InvalidRequestError
from sealbench.server.models import ApiToken, User
from sealbench.server.services._common import commit, flush, get_or_404

__all__ = ["create_user", "get_user", "issue_token"]


def create_user(session: Session, *, email: str, is_admin: bool, now: datetime) -> tuple[User, str]:
    """Create a user and its first API token; returns the token (shown once, stored hashed)."""
    email = email.strip().lower()
    if "@" not in email or len(email) > 320:
        raise InvalidRequestError(f"expected an email address, received {email[:40]!r}")
    if session.scalars(select(User.id).where(User.email == email)).first() is not None:
        raise ConflictError(f"a user with email {email} already exists")
    user = User(email=email, is_admin=is_admin, created_at=now)
    session.add(user)
    flush(session, f"user {email}")
    append_event(
        session,
        actor_id=None,
        action="user.create",
        entity_type="user",
        entity_id=user.id,
        payload={"email": email, "is_admin": is_admin},
        now=now,
    )
    token = _add_token(session, user, now)
    commit(session, f"user {email}")
    return user, token


def issue_token(session: Session, *, user_id: int, now: datetime) -> str:
    """A further API token for an existing user."""
    user = get_or_404(session, User, user_id, "user")
    token = _add_token(session, user, now)
    commit(session, "API token")
    return token


def _add_token(session: Session, user: User, now: datetime) -> str:
    token = new_api_token()
    row = ApiToken(user_id=user.id, token_sha256=hash_api_token(token), created_at=now)
    session.add(row)
    flush(session, "API token")
    append_event(
        session,
        actor_id=None,
        action="token.issue",
        entity_type="user",
        entity_id=user.id,
        payload={"token_id": row.id},
        now=now,
    )
    return token


def get_user(session: Session, user_id: int) -> User:
    return get_or_404(session, User, user_id, "user")
