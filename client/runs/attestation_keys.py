"""The attestation verifier's keys on this machine: what ``result open`` checks a result token's
signature with, on every profile.

A profile's platform names the verifier (:class:`KeySource`: the issuer a token must carry and
where its key set is published, as the account's platform answers in its
:class:`~sealbench.platforms.account.AccountRoutes`; Google's Confidential Space verifier for a
profile without one, :func:`gcp_key_source`). :class:`KeyCache` fetches the set through a
:class:`KeySetFetcher` and keeps a copy in the profile's data directory
(``attestation-keys/<sha256 of the URL>.json``, mode 0600); it answers from that copy without
asking while it is fresh (:data:`FRESH_S`), and, when the set cannot be fetched (offline), from
a copy at most :data:`MAX_OFFLINE_AGE_S` old that holds the token's key id. Without either it
raises :class:`AttestationKeysUnavailableError`: ``result open`` then refuses, unless its user
passed ``--unverified`` (the output then says the signature was not checked).

::

    ConfigError (exit 3)
    └── AttestationKeysUnavailableError   the verifier's keys cannot be fetched and none are cached
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from sealbench.client.errors import ConfigError
from sealbench.client.registry.logstate import write_private
from sealbench.crypto.attestation import MAX_JWKS_LENGTH, Jwks
from sealbench.crypto.errors import CryptoError

__all__ = [
    "FETCH_TIMEOUT_S",
    "FRESH_S",
    "KEYS_DIR",
    "MAX_OFFLINE_AGE_S",
    "AttestationKeysUnavailableError",
    "HttpxKeySetFetcher",
    "IssuerKeys",
    "KeyCache",
    "KeySetFetcher",
    "KeySource",
    "gcp_key_source",
    "token_kid",
]

#: Folder of the profile's data directory holding the cached key sets.
KEYS_DIR: Final = "attestation-keys"
#: Seconds a cached key set is used without asking the verifier again.
FRESH_S: Final = 3600.0
#: Oldest cached key set used when the verifier cannot be reached (Google rotates its signing
#: keys within weeks; a token signed by a key this old is refused by the registry anyway).
MAX_OFFLINE_AGE_S: Final = 30 * 86400.0
#: Seconds allowed for one fetch.
FETCH_TIMEOUT_S: Final = 10.0
_URL: Final = re.compile(r"^(https://[^\s/]+|http://(127\.0\.0\.1|localhost)(:[0-9]{1,5})?)(/\S*)?$")


class AttestationKeysUnavailableError(ConfigError):
    """The verifier's key set cannot be fetched, and no usable copy is cached."""


@dataclass(frozen=True)
class KeySource:
    """Where a platform's verifier publishes its keys: ``issuer`` is the ``iss`` its tokens
    carry; ``jwks_url`` the key set (None: read from the issuer's OpenID discovery document);
    ``hint`` what to do when it cannot be reached."""

    issuer: str
    jwks_url: str | None = None
    hint: str | None = None


def gcp_key_source(api_endpoints: Mapping[str, str]) -> KeySource:
    """Google's Confidential Space verifier (its published key set), or the ``attestation``
    endpoint override of a profile (its key set found by OpenID discovery)."""
    # the platform publishes its verifier (the client imports no platform implementation)
    from sealbench.client.backends import TeeBackend

    google = TeeBackend.CONFIDENTIAL_SPACE.platform.verifier
    if google is None:  # Confidential Space has one verifier for every deployment
        raise AttestationKeysUnavailableError("the Confidential Space platform names no verifier")
    override = api_endpoints.get("attestation")
    if override is None or override.rstrip("/") == google.issuer:
        return KeySource(google.issuer, google.jwks_url,
                         hint="check this machine reaches www.googleapis.com, or pass "
                         "--unverified to open the result without checking its signature")
    return KeySource(override.rstrip("/"), None,
                     hint=f"check the attestation endpoint {override} answers, or pass "
                     "--unverified to open the result without checking its signature")


class KeySetFetcher(Protocol):
    """Returns the document at ``url`` (at most ``limit`` bytes) or raises
    :class:`AttestationKeysUnavailableError`."""

    def fetch(self, url: str, limit: int) -> bytes: ...


class HttpxKeySetFetcher:
    """Fetch over HTTPS (plain HTTP only on the loopback interface) with a timeout and a size
    cap."""

    def __init__(self, timeout: float = FETCH_TIMEOUT_S) -> None:
        self._timeout = timeout

    def fetch(self, url: str, limit: int) -> bytes:
        import httpx

        if not _URL.match(url):
            raise AttestationKeysUnavailableError(
                f"{url[:80]!r} is not an https URL (or http on the loopback interface)"
            )
        try:
            with httpx.stream("GET", url, timeout=self._timeout,
                              headers={"Accept": "application/json"}) as response:
                response.raise_for_status()
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise AttestationKeysUnavailableError(
                            f"{url} answers more than {limit} bytes")
        except httpx.HTTPError as exc:
            raise AttestationKeysUnavailableError(f"cannot fetch {url}: {exc}") from exc
        return body


@dataclass(frozen=True)
class IssuerKeys:
    """A verifier's key set as this machine holds it: fetched now, or (``cached``) the copy
    fetched at ``fetched_at``."""

    issuer: str
    jwks: Jwks
    fetched_at: float
    cached: bool


def token_kid(token: str) -> str | None:
    """The key id a compact JWS names in its header (unverified; None when it names none or
    is not a JWS): only to choose a key set."""
    import base64

    head = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    kid = header.get("kid") if isinstance(header, dict) else None
    return kid if isinstance(kid, str) else None


class KeyCache:
    """Key sets by URL in ``root`` (module docstring), fetched through ``fetcher``."""

    def __init__(
        self, root: Path, fetcher: KeySetFetcher, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._root = root
        self._fetcher = fetcher
        self._clock = clock

    def _path(self, url: str) -> Path:
        return self._root / f"{hashlib.sha256(url.encode()).hexdigest()}.json"

    def _cached(self, url: str) -> tuple[Jwks, float] | None:
        try:
            doc = json.loads(self._path(url).read_bytes()[: 2 * MAX_JWKS_LENGTH])
            if doc.get("url") != url:
                return None
            return Jwks.from_json(doc["jwks"]), float(doc["fetched_at"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, CryptoError):
            return None

    def _jwks_url(self, source: KeySource) -> str:
        if source.jwks_url is not None:
            return source.jwks_url
        discovery = f"{source.issuer}/.well-known/openid-configuration"
        try:
            url = json.loads(self._fetcher.fetch(discovery, 1 << 16))["jwks_uri"]
        except (ValueError, KeyError, TypeError) as exc:
            raise AttestationKeysUnavailableError(
                f"{discovery} names no key set (jwks_uri)", hint=source.hint
            ) from exc
        if not isinstance(url, str) or not _URL.match(url):
            raise AttestationKeysUnavailableError(f"{discovery} names no usable key set URL")
        return url

    def get(self, source: KeySource, kid: str | None = None) -> IssuerKeys:
        """The key set of ``source`` able to check a token signed with key ``kid``."""
        now = self._clock()
        url = source.jwks_url
        cached = self._cached(url) if url is not None else None
        knows = cached is not None and (kid is None or kid in cached[0].keys)
        if cached is not None and knows and 0 <= now - cached[1] < FRESH_S:
            return IssuerKeys(source.issuer, cached[0], cached[1], cached=True)
        try:
            url = self._jwks_url(source)
            raw = self._fetcher.fetch(url, MAX_JWKS_LENGTH)
            try:
                jwks = Jwks.from_json(raw)
            except CryptoError as exc:
                raise AttestationKeysUnavailableError(
                    f"the key set at {url} is malformed: {exc}") from exc
        except AttestationKeysUnavailableError as exc:
            if url is not None and cached is None:
                cached = self._cached(url)
            if cached is not None and (kid is None or kid in cached[0].keys) and (
                    0 <= now - cached[1] <= MAX_OFFLINE_AGE_S):
                return IssuerKeys(source.issuer, cached[0], cached[1], cached=True)
            raise AttestationKeysUnavailableError(
                f"cannot check the result's signature: the keys of the attestation verifier "
                f"{source.issuer} cannot be fetched ({exc}) and no usable copy is cached on this "
                "machine", hint=source.hint,
            ) from exc
        write_private(self._path(url), json.dumps(
            {"url": url, "issuer": source.issuer, "fetched_at": now,
             "jwks": json.loads(raw)}, sort_keys=True).encode() + b"\n")
        return IssuerKeys(source.issuer, jwks, now, cached=False)
