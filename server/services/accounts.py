"""What a registry operator does to accounts (``sealbench-server user list / disable``,
``token list / revoke``): each change is an audit event, ends the dashboard sessions it
concerns, and moves the revocation generation in the same transaction, so that every server
process drops its token cache within its check interval (see :mod:`sealbench.server.auth`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from sealbench.server.audit import append_event
from sealbench.server.auth import API_TOKEN_PREFIX, hash_api_token
from sealbench.server.errors import ConflictError, InvalidRequestError, NotFoundError
from sealbench.server.models import ApiToken, AuthGeneration, User, WebSession
from sealbench.server.services._common import commit

__all__ = [
    "AccountSummary",
    "TokenSummary",
    "disable_user",
    "find_token_id",
    "find_user",
    "list_tokens",
    "list_users",
    "revoke_token",
]


@dataclass(frozen=True)
class AccountSummary:
    id: int
    email: str
    is_admin: bool
    oidc_issuer: str | None
    created_at: datetime
    disabled_at: datetime | None
    active_tokens: int


@dataclass(frozen=True)
class TokenSummary:
    id: int
    user_id: int
    email: str
    created_at: datetime
    revoked_at: datetime | None


def find_user(session: Session, email: str) -> User:
    user = session.scalars(select(User).where(User.email == email.strip().lower())).first()
    if user is None:
        raise NotFoundError("user", repr(email.strip()[:320]))
    return user


def list_users(session: Session) -> list[AccountSummary]:
    active = (
        select(ApiToken.user_id, func.count().label("n"))
        .where(ApiToken.revoked_at.is_(None))
        .group_by(ApiToken.user_id)
        .subquery()
    )
    rows = session.execute(
        select(User, func.coalesce(active.c.n, 0))
        .outerjoin(active, active.c.user_id == User.id)
        .order_by(User.id)
    ).all()
    return [
        AccountSummary(
            u.id, u.email, u.is_admin, u.oidc_issuer, u.created_at, u.disabled_at, int(n)
        )
        for u, n in rows
    ]


def find_token_id(session: Session, token: str) -> int:
    """The id of the API token ``token`` (looked up by its SHA-256, as the server does); the
    token is never echoed in an error."""
    if not token.startswith(API_TOKEN_PREFIX) or len(token) > 512:
        raise InvalidRequestError(f"expected an API token ({API_TOKEN_PREFIX}...) on stdin")
    found = session.scalar(
        select(ApiToken.id).where(ApiToken.token_sha256 == hash_api_token(token))
    )
    if found is None:
        raise NotFoundError("API token", "given on stdin")
    return found


def list_tokens(session: Session, *, email: str | None = None) -> list[TokenSummary]:
    query = select(ApiToken, User.email).join(User, User.id == ApiToken.user_id)
    if email is not None:
        query = query.where(User.id == find_user(session, email).id)
    rows = session.execute(query.order_by(ApiToken.id)).all()
    return [TokenSummary(t.id, t.user_id, e, t.created_at, t.revoked_at) for t, e in rows]


def _bump_generation(session: Session) -> None:
    session.execute(
        update(AuthGeneration).where(AuthGeneration.id == 1).values(value=AuthGeneration.value + 1)
    )


def revoke_token(session: Session, *, token_id: int, now: datetime) -> TokenSummary:
    """Revoke one API token (and end the dashboard sessions signed in with it)."""
    token = session.execute(
        select(ApiToken).where(ApiToken.id == token_id).with_for_update()
    ).scalar_one_or_none()
    if token is None:
        raise NotFoundError("API token", token_id)
    if token.revoked_at is not None:
        raise ConflictError(f"API token {token_id} was already revoked at {token.revoked_at}")
    token.revoked_at = now
    session.execute(delete(WebSession).where(WebSession.token_id == token_id))
    _bump_generation(session)
    append_event(
        session,
        actor_id=None,
        action="token.revoke",
        entity_type="user",
        entity_id=token.user_id,
        payload={"token_id": token_id},
        now=now,
    )
    email = session.scalar(select(User.email).where(User.id == token.user_id)) or ""
    summary = TokenSummary(token.id, token.user_id, email, token.created_at, now)
    commit(session, f"API token {token_id}")
    return summary


def disable_user(session: Session, *, email: str, now: datetime) -> AccountSummary:
    """Disable an account: its API tokens, JWTs and dashboard sessions stop working. Its
    registered assets and results stay, as the audit log's history does."""
    user = find_user(session, email)
    session.execute(select(User.id).where(User.id == user.id).with_for_update())
    if user.disabled_at is not None:
        raise ConflictError(f"user {user.email} was already disabled at {user.disabled_at}")
    user.disabled_at = now
    session.execute(delete(WebSession).where(WebSession.user_id == user.id))
    _bump_generation(session)
    append_event(
        session,
        actor_id=None,
        action="user.disable",
        entity_type="user",
        entity_id=user.id,
        payload={"email": user.email},
        now=now,
    )
    active = session.scalar(
        select(func.count())
        .select_from(ApiToken)
        .where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
    )
    summary = AccountSummary(
        user.id, user.email, user.is_admin, user.oidc_issuer, user.created_at, now, active or 0
    )
    commit(session, f"user {user.email}")
    return summary
