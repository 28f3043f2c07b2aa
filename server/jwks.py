"""Fetching and caching JSON Web Key Sets (OIDC user tokens, attestation issuers).

:class:`JwksFetcher` is the one I/O interface; :class:`UrllibJwksFetcher` is the real one (a
timeout from :data:`JWKS_FETCH_TIMEOUT_S`, a bounded read). :class:`JwksCache` keeps each set
for a TTL on an injected clock and refetches early, at most once per
:data:`MIN_REFRESH_INTERVAL_S`, when a token names a key id the cached set lacks (key rotation).
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sealbench.crypto.attestation import MAX_JWKS_LENGTH, Jwks
from sealbench.crypto.errors import KeyFormatError
from sealbench.server.errors import UpstreamUnavailableError

__all__ = [
    "JWKS_FETCH_TIMEOUT_S",
    "MIN_REFRESH_INTERVAL_S",
    "JwksCache",
    "JwksFetcher",
    "UrllibJwksFetcher",
]

JWKS_FETCH_TIMEOUT_S = 5.0
MIN_REFRESH_INTERVAL_S = 30.0


class JwksFetcher(Protocol):
    """Returns the raw JWKS document at ``url`` or raises
    :class:`~sealbench.server.errors.UpstreamUnavailableError`."""

    def fetch(self, url: str) -> bytes: ...


class UrllibJwksFetcher:
    """Fetch over HTTP(S) with the standard library, with a timeout and a size cap."""

    def __init__(self, timeout: float = JWKS_FETCH_TIMEOUT_S) -> None:
        self._timeout = timeout

    def fetch(self, url: str) -> bytes:
        if not url.startswith(("https://", "http://")):
            raise UpstreamUnavailableError(f"JWKS URL must be http(s), received {url!r}")
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                body: bytes = response.read(MAX_JWKS_LENGTH + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise UpstreamUnavailableError(f"could not fetch the JWKS at {url}: {exc}") from exc
        if len(body) > MAX_JWKS_LENGTH:
            raise UpstreamUnavailableError(f"the JWKS at {url} exceeds {MAX_JWKS_LENGTH} bytes")
        return body


@dataclass(frozen=True)
class _Entry:
    jwks: Jwks
    fetched_at: float


class JwksCache:
    """Thread-safe per-URL cache of parsed key sets."""

    def __init__(self, fetcher: JwksFetcher, *, ttl: float, clock: Callable[[], float]) -> None:
        self._fetcher = fetcher
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def get(self, url: str, kid: str | None = None) -> Jwks:
        """The key set at ``url``; refetched when stale, or when ``kid`` is missing and the
        cached copy is older than :data:`MIN_REFRESH_INTERVAL_S`."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(url)
        if entry is not None:
            age = now - entry.fetched_at
            fresh = age < self._ttl
            knows_kid = kid is None or kid in entry.jwks.keys
            if fresh and (knows_kid or age < MIN_REFRESH_INTERVAL_S):
                return entry.jwks
        raw = self._fetcher.fetch(url)
        try:
            jwks = Jwks.from_json(raw)
        except KeyFormatError as exc:
            raise UpstreamUnavailableError(f"the JWKS at {url} is malformed: {exc}") from exc
        with self._lock:
            self._entries[url] = _Entry(jwks, now)
        return jwks
