"""The JWKS cache: a key set is fetched once per TTL, refetched early for an unknown key id
(key rotation) but at most once per MIN_REFRESH_INTERVAL_S, and fetch failures surface as
UpstreamUnavailableError (503), never as a crash."""

from __future__ import annotations

from typing import Any

import pytest

from sealbench.server.errors import UpstreamUnavailableError
from sealbench.server.jwks import MIN_REFRESH_INTERVAL_S, JwksCache, UrllibJwksFetcher

URL = "https://idp.test/jwks"


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_jwks_cached_for_ttl(h: Any) -> None:
    fetcher, clock = h.FakeJwksFetcher({URL: h.TokenFactory(kid="a").jwks}), _Clock()
    cache = JwksCache(fetcher, ttl=300, clock=clock)
    assert "a" in cache.get(URL, "a").keys
    clock.t += 299
    cache.get(URL, "a")
    assert len(fetcher.calls) == 1
    clock.t += 2
    cache.get(URL, "a")
    assert len(fetcher.calls) == 2


def test_unknown_kid_refetches_at_most_once_per_interval(h: Any) -> None:
    fetcher, clock = h.FakeJwksFetcher({URL: h.TokenFactory(kid="old").jwks}), _Clock()
    cache = JwksCache(fetcher, ttl=3600, clock=clock)
    cache.get(URL, "old")
    fetcher.documents[URL] = h.TokenFactory(kid="new").jwks
    assert "new" not in cache.get(URL, "new").keys  # too soon: no refetch storm
    assert len(fetcher.calls) == 1
    clock.t += MIN_REFRESH_INTERVAL_S
    assert "new" in cache.get(URL, "new").keys
    assert len(fetcher.calls) == 2


def test_malformed_jwks_is_upstream_error(h: Any) -> None:
    cache = JwksCache(h.FakeJwksFetcher({URL: b'{"keys": "nope"}'}), ttl=60, clock=_Clock())
    with pytest.raises(UpstreamUnavailableError, match="malformed"):
        cache.get(URL)


def test_fetcher_refuses_non_http_urls() -> None:
    with pytest.raises(UpstreamUnavailableError):
        UrllibJwksFetcher(timeout=1).fetch("file:///etc/passwd")
