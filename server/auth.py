"""Who is calling: API tokens issued by the server, or OIDC bearer JWTs from a configured issuer.

API tokens are 256-bit random strings (``sbt_`` + base64url) printed once and stored only as
their SHA-256. A fast unsalted hash is right here: the input has full entropy, so there is
nothing to brute-force and no dictionary to precompute, and a per-request lookup must stay
cheap. OIDC JWTs must be RS256, signed by a key of the issuer's JWKS, and carry the configured
``iss`` and ``aud``; the user is provisioned on first sight from ``sub`` and ``email``. A
disabled user (``users.disabled_at``) is refused either way.

The token cache, and how fast a revocation reaches every process: a resolved API token is kept
in this process's memory for at most ``cache_seconds``. Every revocation and every disabling
adds one to the database's ``auth_generation`` row in its own transaction; each process reads
that row (one primary-key read, by one thread at a time) at most once per
``revocation_check_seconds`` and empties its cache when the value moved. So a revoked token or a
disabled user stops working on every process at most ``revocation_check_seconds`` (default 1 s)
after the revocation committed, plus the duration of that read and of a request already past
authentication; the cache itself is safe to lose.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import jwt
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sealbench.server.audit import append_event
from sealbench.server.db import Database
from sealbench.server.errors import AuthenticationError
from sealbench.server.jwks import JwksCache
from sealbench.server.models import ApiToken, AuthGeneration, User
from sealbench.server.settings import OidcSettings

__all__ = [
    "API_TOKEN_PREFIX",
    "Authenticator",
    "Identity",
    "Principal",
    "hash_api_token",
    "new_api_token",
]

API_TOKEN_PREFIX = "sbt_"  # noqa: S105 - a public prefix, not a secret
_MAX_CACHE = 50_000
_JWT_LEEWAY_S = 30


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user_id: int
    email: str
    is_admin: bool


@dataclass(frozen=True)
class Identity:
    """A verified credential: who it is, which API token it was (None for a JWT) and, for a
    JWT, when it expires (a dashboard session signed in with it ends then)."""

    principal: Principal
    token_id: int | None
    expires_at: datetime | None


def new_api_token() -> str:
    """A fresh API token (shown to its user once, never stored)."""
    return API_TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_api_token(token: str) -> str:
    """The stored form of an API token: hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Authenticator:
    """Resolves an ``Authorization`` header to a :class:`Principal` or raises
    :class:`~sealbench.server.errors.AuthenticationError`."""

    def __init__(
        self,
        db: Database,
        *,
        oidc: OidcSettings | None,
        jwks: JwksCache,
        clock: Callable[[], datetime],
        cache_seconds: float,
        monotonic: Callable[[], float],
        revocation_check_seconds: float = 1.0,
    ) -> None:
        self._db = db
        self._oidc = oidc
        self._jwks = jwks
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._check_seconds = revocation_check_seconds
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, Identity]] = {}
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._checked_at = float("-inf")
        self._checking = threading.Lock()  # held by the one thread reading the generation

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller named by ``authorization`` (may read the database: call it from a
        worker thread)."""
        return self.identify(authorization).principal

    def identify(self, authorization: str | None) -> Identity:
        """Like :meth:`authenticate`, with the token id and the credential's expiry."""
        if not authorization:
            raise AuthenticationError("an 'Authorization: Bearer <token>' header is required")
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise AuthenticationError("the Authorization header must be 'Bearer <token>'")
        if credential.startswith(API_TOKEN_PREFIX):
            return self._api_token(credential)
        if self._oidc is not None and credential.count(".") == 2:
            return self._oidc_token(credential, self._oidc)
        raise AuthenticationError("the bearer token is not a sealbench API token or trusted JWT")

    def cached(self, authorization: str) -> Principal | None:
        """The principal of a recently resolved API token, without touching the database."""
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() != "bearer" or not credential.startswith(API_TOKEN_PREFIX):
            return None
        with self._lock:
            hit = self._cache.get(hash_api_token(credential.strip()))
        now = self._monotonic()
        if hit is None or now - hit[0] >= self._cache_seconds:
            return None
        if now - self._checked_at >= self._check_seconds and not self._checking.locked():
            return None  # the revocation generation is due: authenticate() reads it
        return hit[1].principal

    def checked(self, authorization: str) -> Principal | None:
        """:meth:`cached` after the revocation check that :meth:`authenticate` makes first:
        the principal of a recently resolved API token unless the check emptied the cache (may
        read the database: call it from a worker thread)."""
        self.check_revocations()
        return self.cached(authorization)

    def check_revocations(self) -> None:
        """Read the revocation generation if it is due, emptying the cache when it moved. One
        thread reads it; requests arriving meanwhile use the cache as it is (so the bound is
        the check interval plus one primary-key read)."""
        now = self._monotonic()
        if now - self._checked_at < self._check_seconds:
            return
        if not self._checking.acquire(blocking=False):
            return
        try:
            with self._db.reader() as session:
                value = session.scalar(select(AuthGeneration.value).where(AuthGeneration.id == 1))
            with self._lock:
                if value != self._generation:
                    self._cache.clear()
                    self._generation = value
                self._checked_at = max(self._checked_at, now)
        finally:
            self._checking.release()

    def _api_token(self, token: str) -> Identity:
        digest = hash_api_token(token)
        self.check_revocations()
        now = self._monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        with self._db.reader() as session:
            row = session.execute(
                select(User.id, User.email, User.is_admin, ApiToken.id.label("token_id"))
                .join(ApiToken, ApiToken.user_id == User.id)
                .where(
                    ApiToken.token_sha256 == digest,
                    ApiToken.revoked_at.is_(None),
                    User.disabled_at.is_(None),
                )
            ).first()
        if row is None:
            raise AuthenticationError("the API token is unknown or revoked")
        principal = Principal(user_id=row.id, email=row.email, is_admin=row.is_admin)
        identity = Identity(principal, token_id=row.token_id, expires_at=None)
        with self._lock:
            if len(self._cache) >= _MAX_CACHE:
                self._cache.clear()
            self._cache[digest] = (now, identity)
        return identity

    def _oidc_token(self, token: str, oidc: OidcSettings) -> Identity:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthenticationError("the bearer JWT is malformed") from exc
        kid = header.get("kid")
        if header.get("alg") != "RS256" or not isinstance(kid, str):
            raise AuthenticationError("the bearer JWT must be RS256 with a key id")
        keys = self._jwks.get(oidc.jwks_url, kid)
        key = keys.keys.get(kid)
        if key is None:
            raise AuthenticationError("the bearer JWT's key id is not in the issuer's JWKS")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                audience=oidc.audience,
                issuer=oidc.issuer,
                leeway=_JWT_LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"the bearer JWT was refused: {exc}") from exc
        subject = claims.get("sub")
        email = claims.get("email")
        if not isinstance(subject, str) or not isinstance(email, str) or "@" not in email:
            raise AuthenticationError("the bearer JWT must carry string 'sub' and 'email' claims")
        expires_at = datetime.fromtimestamp(int(claims["exp"]), UTC)
        return Identity(self._provision(oidc, subject, email), None, expires_at)

    def _provision(self, oidc: OidcSettings, subject: str, email: str) -> Principal:
        query = select(User).where(User.oidc_issuer == oidc.issuer, User.oidc_subject == subject)
        with self._db.reader() as session:
            user = session.scalars(query).first()
        if user is None:
            with self._db.writer() as session:
                user = self._create_oidc_user(session, oidc, subject, email)
        if user.disabled_at is not None:
            raise AuthenticationError(f"the account {user.email} is disabled")
        return Principal(user_id=user.id, email=user.email, is_admin=user.is_admin)

    def _create_oidc_user(
        self, session: Session, oidc: OidcSettings, subject: str, email: str
    ) -> User:
        existing = session.scalars(select(User).where(User.email == email)).first()
        if existing is not None:
            if existing.oidc_issuer == oidc.issuer and existing.oidc_subject == subject:
                return existing
            raise AuthenticationError(f"{email} is already registered to another identity")
        now = self._clock()
        user = User(
            email=email,
            is_admin=subject in oidc.admin_subjects,
            oidc_issuer=oidc.issuer,
            oidc_subject=subject,
            created_at=now,
        )
        session.add(user)
        try:
            session.flush()
            append_event(
                session,
                actor_id=user.id,
                action="user.provision",
                entity_type="user",
                entity_id=user.id,
                payload={"email": email, "issuer": oidc.issuer, "is_admin": user.is_admin},
                now=now,
            )
            session.commit()
        except IntegrityError as exc:
            # A concurrent first request provisioned the same identity: use that row.
            session.rollback()
            same = session.scalars(
                select(User).where(User.oidc_issuer == oidc.issuer, User.oidc_subject == subject)
            ).first()
            if same is None:
                raise AuthenticationError(f"{email} is already registered") from exc
            return same
        return user
