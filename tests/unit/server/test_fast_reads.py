"""The benchmark reads served from rows straight to JSON (issue 42,
:mod:`sealbench.server.routers.fast_reads`) answer exactly what the API answers, and nothing the
API would not: a token the process has not resolved, a disabled account, a bad or unknown query
parameter, a missing benchmark and any other method all reach the API, which answers as it
always did."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.routers import fast_reads
from sealbench.server.services.accounts import disable_user
from sealbench.server.settings import ServerSettings

API = "/api/v1"


class _Ticker:
    """The token cache's clock: it moves only when a test moves it (the revocation check is
    then due exactly when the test says, whatever the machine's speed)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticker() -> _Ticker:
    return _Ticker()


@pytest.fixture
def client(settings: ServerSettings, clock: Any, jwks_fetcher: Any,
           ticker: _Ticker) -> Iterator[TestClient]:
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher, monotonic=ticker)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def seeded(client: TestClient, make_user: Any, h: Any) -> Any:
    """An authority with three benchmarks (one approved) and a reader."""
    authority, admin = make_user("authority@example.test"), make_user("admin@example.test",
                                                                      admin=True)
    ids = [h.ok(client.post(f"{API}/benchmarks", json=h.benchmark_body(f"b{i}"),
                            headers=authority.headers), 201)["id"] for i in range(3)]
    h.ok(client.post(f"{API}/benchmarks/{ids[1]}/approve", headers=admin.headers))
    return authority, ids


def _served_fast(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each answer the fast path gives (by the path it answered)."""
    answered: list[str] = []
    original = fast_reads.FastReads.__call__

    async def spy(self: Any, scope: Any, receive: Any, send: Any) -> None:
        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start" and not any(
                    k == b"x-through-api" for k, _ in message.get("headers", [])):
                answered.append(scope["path"])
            await send(message)

        async def through_api(scope2: Any, receive2: Any, send2: Any) -> None:
            async def mark(message: Any) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (b"x-through-api", b"1")]}
                await send2(message)

            await inner(scope2, receive2, mark)

        inner = self.app
        self.app = through_api
        try:
            await original(self, scope, receive, watch)
        finally:
            self.app = inner

    monkeypatch.setattr(fast_reads.FastReads, "__call__", spy)
    return answered


def _strip(response: Any) -> tuple[int, bytes, str]:
    return response.status_code, response.content, response.headers["content-type"]


@pytest.mark.parametrize("query", ["", "?limit=2", "?limit=2&offset=1", "?state=approved",
                                   "?state=pending&limit=200&offset=0", "?offset=5",
                                   "?limit=%32"])
def test_a_page_is_the_apis_page(client: TestClient, seeded: Any, query: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    authority, _ids = seeded
    fast = _served_fast(monkeypatch)
    # the API's own answer: a duplicate parameter is one the fast path leaves to it (FastAPI
    # reads the last), and the API answers it as the query without the duplicate
    through_api = client.get(f"{API}/benchmarks{query}{'&' if query else '?'}x=1",
                             headers=authority.headers)
    assert fast == []
    answer = client.get(f"{API}/benchmarks{query}", headers=authority.headers)
    assert fast == [f"{API}/benchmarks"]
    assert _strip(answer) == _strip(through_api)
    assert answer.json() == through_api.json()


def test_one_benchmark_is_the_apis_answer(client: TestClient, seeded: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    authority, ids = seeded
    fast = _served_fast(monkeypatch)
    for bid in ids:
        through_api = client.get(f"{API}/benchmarks/{bid}?x=1", headers=authority.headers)
        answer = client.get(f"{API}/benchmarks/{bid}", headers=authority.headers)
        assert _strip(answer) == _strip(through_api)
    assert fast == [f"{API}/benchmarks/{bid}" for bid in ids]


@pytest.mark.parametrize("query", ["?limit=0", "?limit=201", "?limit=-1", "?limit=1e3",
                                   "?offset=1000000001", "?state=open", "?state=",
                                   "?limit=2&limit=3", "?sort=name", "?limit=٣"])
def test_a_query_the_api_would_refuse_or_read_otherwise_reaches_the_api(
        client: TestClient, seeded: Any, query: str, monkeypatch: pytest.MonkeyPatch) -> None:
    authority, _ids = seeded
    client.get(f"{API}/benchmarks", headers=authority.headers)  # the token is resolved
    fast = _served_fast(monkeypatch)
    client.get(f"{API}/benchmarks{query}", headers=authority.headers)
    assert fast == []


def test_a_missing_benchmark_gets_the_apis_404(client: TestClient, seeded: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    authority, _ids = seeded
    client.get(f"{API}/benchmarks", headers=authority.headers)
    fast = _served_fast(monkeypatch)
    for path in ("/999999", "/0", "/007", "/99999999999"):
        r = client.get(f"{API}/benchmarks{path}", headers=authority.headers)
        assert r.status_code in (404, 422) and r.json()["code"] in ("not_found",
                                                                    "invalid_request")
    assert fast == []


def test_a_token_not_yet_resolved_or_absent_or_forged_is_the_apis_to_judge(
        client: TestClient, seeded: Any, make_user: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _authority, ids = seeded
    newcomer = make_user("newcomer@example.test")
    fast = _served_fast(monkeypatch)
    assert client.get(f"{API}/benchmarks", headers=newcomer.headers).status_code == 200
    assert fast == []  # its first request: the API resolves the token
    assert client.get(f"{API}/benchmarks", headers=newcomer.headers).status_code == 200
    assert fast == [f"{API}/benchmarks"]
    assert client.get(f"{API}/benchmarks").status_code == 401
    forged = {"Authorization": "Bearer sbt_" + "A" * 43}
    assert client.get(f"{API}/benchmarks/{ids[0]}", headers=forged).status_code == 401
    assert fast == [f"{API}/benchmarks"]


def test_a_disabled_account_is_refused_as_by_the_api(
        client: TestClient, seeded: Any, make_user: Any, database_url: str, clock: Any,
        ticker: _Ticker, monkeypatch: pytest.MonkeyPatch) -> None:
    _authority, _ids = seeded
    reader = make_user("reader@example.test")
    assert client.get(f"{API}/benchmarks", headers=reader.headers).status_code == 200
    db = open_database(database_url)
    try:
        with db.writer() as session:
            disable_user(session, email=reader.email, now=clock())
    finally:
        db.dispose()
    ticker.now += 1.5  # past the revocation check interval (1 s), the API's own rule
    fast = _served_fast(monkeypatch)
    assert client.get(f"{API}/benchmarks", headers=reader.headers).status_code == 401
    assert fast == []


def test_other_methods_and_paths_are_the_apis(client: TestClient, seeded: Any, h: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    authority, ids = seeded
    client.get(f"{API}/benchmarks", headers=authority.headers)
    fast = _served_fast(monkeypatch)
    h.ok(client.post(f"{API}/benchmarks", json=h.benchmark_body("b9"),
                     headers=authority.headers), 201)
    client.get(f"{API}/benchmarks/{ids[0]}/leaderboard", headers=authority.headers)
    client.get(f"{API}/benchmarks/", headers=authority.headers, follow_redirects=False)
    assert fast == []


def test_a_changed_benchmark_is_read_as_it_is_now(client: TestClient, seeded: Any,
                                                  make_user: Any, h: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each benchmark's JSON is kept by the whole row it was made from: a change (here the
    admin's approval, and a closing) is a new row, read as the API reads it."""
    authority, ids = seeded
    admin = make_user("admin2@example.test", admin=True)
    client.get(f"{API}/benchmarks", headers=authority.headers)
    fast = _served_fast(monkeypatch)
    before = client.get(f"{API}/benchmarks/{ids[0]}", headers=authority.headers).json()
    page_before = client.get(f"{API}/benchmarks", headers=authority.headers).content
    h.ok(client.post(f"{API}/benchmarks/{ids[0]}/approve", headers=admin.headers))
    after = client.get(f"{API}/benchmarks/{ids[0]}", headers=authority.headers)
    page_after = client.get(f"{API}/benchmarks", headers=authority.headers)
    assert fast == [f"{API}/benchmarks/{ids[0]}", f"{API}/benchmarks"] * 2
    assert before["state"] == "pending" and after.json()["state"] == "approved"
    assert page_after.content != page_before
    assert _strip(after) == _strip(client.get(f"{API}/benchmarks/{ids[0]}?x=1",
                                              headers=authority.headers))
    assert _strip(page_after) == _strip(client.get(f"{API}/benchmarks?x=1",
                                                   headers=authority.headers))


def test_the_reading_threads_end_with_the_app(settings: ServerSettings, clock: Any,
                                              jwks_fetcher: Any, make_user: Any) -> None:
    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "sealbench-fast-read"]

    before = readers()
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    with TestClient(app) as test_client:
        reader = make_user("reader@example.test")
        for _ in range(2):  # the first resolves the token, the second is read by a thread
            assert test_client.get(f"{API}/benchmarks", headers=reader.headers).status_code == 200
        assert len(readers()) > len(before)
    assert readers() == before


def test_the_memo_of_serialised_benchmarks_stays_within_its_bytes() -> None:
    """A row's JSON is what the serialiser makes of it, the same object while kept; the memo
    starts again empty rather than hold more than its bound (a benchmark's contract may be
    large)."""
    names = [c.name for c in fast_reads._COLUMNS]

    def row(name: object) -> tuple[object, ...]:
        return tuple(name if n == "name" else 7 if n == "id" else None for n in names)

    memo = fast_reads._Memo(entries=1000, max_bytes=4000)
    first = memo.item(row("a"))
    assert first == fast_reads.to_json(fast_reads._item(row("a")))
    assert memo.item(row("a")) is first
    for i in range(200):
        assert memo.item(row("x" * 100 + str(i))).startswith(b'{"id":7,')
        assert sum(map(len, memo._items.values())) <= 4000
    assert memo.item(row("a")) == first
    # 1 == 1.0: a row holding a float is never answered from (nor kept in) the memo
    assert b'"name":1,' in memo.item(row(1))
    assert b'"name":1.0,' in memo.item(row(1.0))
    assert b'"name":1,' in memo.item(row(1))
