"""The registry's most frequent reads, served from rows straight to JSON (issue 42): ``GET
/api/v1/benchmarks`` (a page) and ``GET /api/v1/benchmarks/{id}``.

Through FastAPI each of these paid for dependency solving, an ORM or row object validated into
a pydantic model per item, the response model's validation, Starlette's response object and
every middleware layer: about as much CPU again as the query (issue 42: MedPerf's Django server
used only 3.5-4.2 times more per read). :class:`FastReads` sits in front of the application,
FastAPI's own layers included (:func:`~sealbench.server.app.create_app`), and answers these
two requests itself, when and only when nothing about them is unusual: a GET of exactly one of
these paths, an ``Authorization`` header with an API token the process's token cache already
resolved (:meth:`~sealbench.server.auth.Authenticator.cached`, the same first step the API's
own dependency takes, with the same revocation rule: when the revocation check is due, the
reading thread makes it first, as the API's authentication does), query parameters it reads
exactly as the API does (``limit`` 1-200, ``offset`` 0-10^9, ``state`` one of the benchmark
states, each at most once, nothing else), and a benchmark that exists. Anything else (a first
request with a token, a bad parameter, a missing benchmark, another method, a read the
database failed) goes to the application unchanged, which answers it as before, errors
included.

The rows are read by the same SELECT the API's service runs (the table's columns in id order,
a page of ``limit + 1``; one primary-key read), compiled once per dialect and run on a driver
connection that each of a few reading threads keeps (:class:`_ReaderThreads`: no pool
checkout, no SQLAlchemy ``Connection``, a cheaper thread hop than anyio's). Each value is
turned into what the schema serialises as the ORM's column types would (:data:`_LAYOUT`: UTC
timestamps, JSON documents, booleans, the pin as text) and each benchmark serialised by
pydantic-core (:func:`pydantic_core.to_json`) in the field order of
:class:`~sealbench.server.schemas.BenchmarkPublic`, once per distinct row (:class:`_Memo`);
a page joins them as ``to_json`` writes a page: the API's answer, byte for byte (a test
compares them on SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from queue import SimpleQueue
from typing import Any, Final, TypeVar, cast, get_args
from urllib.parse import parse_qsl

from pydantic_core import from_json, to_json
from sqlalchemy import JSON, Boolean, Integer, String, bindparam, select
from sqlalchemy.exc import DBAPIError
from starlette.types import ASGIApp, Receive, Scope, Send

from sealbench.server.models import Benchmark, PinColumn, UtcDateTime
from sealbench.server.schemas import BenchmarkPublic, BenchmarkState

__all__ = ["FastReads"]

_FIELDS: Final = tuple(BenchmarkPublic.model_fields)
_COLUMNS: Final = tuple(Benchmark.__table__.columns)
_STATES: Final = frozenset(get_args(BenchmarkState))
_LIMIT: Final = (1, 200)
_OFFSET: Final = (0, 1_000_000_000)
_DIGITS: Final = re.compile(r"[1-9][0-9]{0,9}")
_JSON_HEADERS: Final = ((b"content-type", b"application/json"),)
_T = TypeVar("_T")


def _utc(value: Any) -> Any:
    """A stored timestamp as the schema writes it: UTC (SQLite keeps the text without its
    offset, which the ORM type reads as UTC; PostgreSQL gives an aware datetime)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def _json(value: Any) -> Any:
    return from_json(value) if isinstance(value, str | bytes) else value


def _bool(value: Any) -> Any:
    return value if value is None else bool(value)


def _text(value: Any) -> Any:
    return value if value is None else str(value)


def _converter(column: Any) -> Callable[[Any], Any] | None:
    """How a raw driver value of ``column`` becomes what the schema serialises (None: as is):
    the ORM's types' result processing, without the ORM."""
    kind = column.type
    if isinstance(kind, UtcDateTime):
        return _utc
    if isinstance(kind, PinColumn):
        return _text
    if isinstance(kind, JSON):
        return _json
    if isinstance(kind, Boolean):
        return _bool
    return None


_BY_NAME: Final = {c.name: c for c in _COLUMNS}
#: (field, its column's position in the SELECT, its converter), in the schema's field order
_LAYOUT: Final = tuple((name, _COLUMNS.index(_BY_NAME[name]), _converter(_BY_NAME[name]))
                       for name in _FIELDS)


def _item(row: Sequence[Any]) -> dict[str, Any]:
    """One benchmark's JSON object from a raw row: the schema's fields in its order."""
    item = {}
    for name, index, convert in _LAYOUT:
        value = row[index]
        item[name] = value if convert is None or value is None else convert(value)
    return item


@dataclass(frozen=True)
class _Sql:
    """A SELECT compiled for one dialect: its text and, for a positional parameter style
    (SQLite's ``?``), the order of its parameters."""

    text: str
    order: tuple[str, ...] | None

    def params(self, values: dict[str, Any]) -> Any:
        return values if self.order is None else tuple(values[n] for n in self.order)


class _Statements:
    """The three SELECTs (a page, a page of one state, one benchmark), compiled once per
    database dialect and run through the driver as they are: no ORM rows, no per-value type
    processing but :data:`_LAYOUT`'s."""

    def __init__(self) -> None:
        self._by_dialect: dict[str, tuple[_Sql, _Sql, _Sql]] = {}

    def of(self, engine: Any) -> tuple[_Sql, _Sql, _Sql]:
        found = self._by_dialect.get(engine.dialect.name)
        if found is None:
            lim, off = bindparam("lim", type_=Integer), bindparam("off", type_=Integer)
            every = select(*_COLUMNS).order_by(Benchmark.id)
            page = every.limit(lim).offset(off)
            by_state = every.where(Benchmark.state == bindparam("state", type_=String)) \
                .limit(lim).offset(off)
            one = select(*_COLUMNS).where(Benchmark.id == bindparam("id", type_=Integer))
            compiled = [s.compile(dialect=engine.dialect) for s in (page, by_state, one)]
            found = (_sql(compiled[0]), _sql(compiled[1]), _sql(compiled[2]))
            self._by_dialect[engine.dialect.name] = found
        return found


def _sql(compiled: Any) -> _Sql:
    order = getattr(compiled, "positiontup", None)
    return _Sql(str(compiled), None if not order else tuple(order))


_SQL: Final = _Statements()


def _fetch(connection: Any, sql: _Sql, values: dict[str, Any]) -> list[Any]:
    """The rows of ``sql`` on a driver connection of a reading thread's own: no pool checkout
    and no SQLAlchemy ``Connection`` (its events, a ``BEGIN`` on SQLite, its result object:
    together 130 of the 150 us that reading one benchmark took). The read ends its transaction
    (PostgreSQL's driver opened one; SQLite's connections read in autocommit mode, a snapshot
    per statement, as the API's readers do)."""
    cursor = connection.cursor()
    try:
        cursor.execute(sql.text, sql.params(values))
        rows = list(cursor.fetchall())
    finally:
        cursor.close()
    connection.rollback()
    return rows


#: the value types a memo key may hold: for these, equal values serialise alike (not so for
#: 1 == 1.0 == True, or datetimes equal across time zones)
_KEY_TYPES: Final = frozenset({int, str, type(None)})


class _Memo:
    """Each benchmark's JSON object by the raw row it was made from (serialising a row took
    about 7 us, most of a page's CPU). The key is the whole row, every column the object is
    made from, so an entry can never be stale: a changed benchmark is a new key. Rows holding
    other types than :data:`_KEY_TYPES` (PostgreSQL's parsed JSON and datetimes) are
    serialised each time. At most ``entries`` objects of ``max_bytes`` of JSON in all (the
    keys hold about as much again); when full it starts again empty."""

    def __init__(self, entries: int, max_bytes: int) -> None:
        self._entries = entries
        self._max_bytes = max_bytes
        self._bytes = 0  # approximate under concurrent readers: a bound, not an account
        self._items: dict[tuple[Any, ...], bytes] = {}

    def item(self, row: Sequence[Any]) -> bytes:
        key = tuple(row)
        if not set(map(type, key)) <= _KEY_TYPES:
            return to_json(_item(key))
        found = self._items.get(key)
        if found is None:
            found = to_json(_item(key))
            if len(self._items) >= self._entries or self._bytes + len(found) > self._max_bytes:
                self._items.clear()  # atomic: no thread iterates the memo
                self._bytes = 0
            self._items[key] = found
            self._bytes += len(found)
        return found


_MEMO: Final = _Memo(4096, 16 * 2**20)


def _int(text: str, bounds: tuple[int, int]) -> int | None:
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def _list_params(query: bytes) -> tuple[BenchmarkState | None, int, int] | None:
    """``state``, ``limit`` and ``offset`` as the API reads them, or None when the query is
    anything the fast path does not answer exactly as the API does."""
    state: BenchmarkState | None = None
    limit, offset = 50, 0
    seen: set[str] = set()
    try:
        pairs = parse_qsl(query.decode("ascii"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    for key, value in pairs:
        if key in seen:
            return None
        seen.add(key)
        if key == "limit":
            found = _int(value, _LIMIT)
            if found is None:
                return None
            limit = found
        elif key == "offset":
            found = _int(value, _OFFSET)
            if found is None:
                return None
            offset = found
        elif key == "state" and value in _STATES:
            state = cast(BenchmarkState, value)
        else:
            return None
    return state, limit, offset


class _ReaderThreads:
    """The threads the fast reads' database work runs in, each with a driver connection of
    its own: a plain queue that daemon threads take work from, each answer handed back with
    ``call_soon_threadsafe``. The API's hop (anyio's worker pool: a capacity limiter, run-vars,
    a condition variable) costs about three times as much CPU per request (50 against 16 us).
    At most ``threads`` threads read: two on SQLite (whose reads hold the GIL from end to end),
    four on PostgreSQL (each connection is one more beyond the pool's, per process). They are
    started by the first read and ended, with their connections, by :meth:`close` (the app's
    lifespan)."""

    def __init__(self, threads: int) -> None:
        self._count = threads
        self._queue: SimpleQueue[_Work | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    async def run(self, engine: Any, work: Callable[[Any], _T]) -> _T:
        """``work(connection)`` in a reading thread, on a connection of ``engine``'s."""
        if not self._threads:
            self._start(engine)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._queue.put((loop, future, engine, work))
        return await future

    def _start(self, engine: Any) -> None:
        count = min(self._count, 2 if engine.dialect.name == "sqlite" else 4)
        with self._lock:
            while len(self._threads) < count:
                thread = threading.Thread(target=self._serve, name="sealbench-fast-read",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        held: tuple[Any, Any] | None = None  # (engine, its connection) this thread reads on
        try:
            while (item := self._queue.get()) is not None:
                loop, future, engine, work = item
                try:
                    if held is None or held[0] is not engine:
                        _close(held)
                        held = None
                        held = (engine, _connect(engine))
                    result = work(held[1])
                except BaseException as exc:  # noqa: BLE001 - raised in the awaiting request
                    _close(held)  # a connection that failed a read is not read on again
                    held = None
                    loop.call_soon_threadsafe(_settle, future, None, exc)
                else:
                    loop.call_soon_threadsafe(_settle, future, result, None)
        finally:
            _close(held)

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
            for _thread in threads:
                self._queue.put(None)
        for thread in threads:
            thread.join()


#: a read for a reading thread: the loop and future to answer, the engine, the work
_Work = tuple[Any, "asyncio.Future[Any]", Any, Callable[[Any], Any]]


def _connect(engine: Any) -> Any:
    """A driver connection for a reading thread: made by ``engine``'s pool (so with its setup:
    SQLite's pragmas and autocommit reads) and detached from it, so that the pool's own
    connections stay for the API."""
    connection = engine.raw_connection()
    connection.detach()
    return connection


def _close(held: tuple[Any, Any] | None) -> None:
    if held is not None:
        with contextlib.suppress(Exception):  # closing a broken connection may fail too
            held[1].close()


@dataclass(frozen=True)
class _Caller:
    """Who asks: the registry, the ``Authorization`` header, and whether the event loop found
    its token resolved (:meth:`~sealbench.server.auth.Authenticator.cached`)."""

    registry: Any
    header: str
    resolved: bool


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


class FastReads:
    """ASGI middleware answering the benchmark reads described in the module's docstring; every
    other request goes to ``app``. ``prefix``: the API's path prefix (``/api/v1``); ``state``:
    the application's state, whose ``registry`` the lifespan sets; ``threads``: how many threads
    read for it."""

    def __init__(self, app: ASGIApp, *, prefix: str, state: Any, threads: int) -> None:
        self.app = app
        self._list = f"{prefix}/benchmarks"
        self._one = f"{prefix}/benchmarks/"
        self._state = state
        self._readers = _ReaderThreads(threads)

    def close(self) -> None:
        """End the reading threads (the app's lifespan, at shutdown)."""
        self._readers.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path == self._list:
            body = await self._page(scope)
        elif path.startswith(self._one) and _DIGITS.fullmatch(path, len(self._one)):
            body = await self._benchmark(scope, int(path[len(self._one):]))
        else:
            body = None
        if body is None:
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode()), *_JSON_HEADERS]})
        await send({"type": "http.response.body", "body": body})

    def _caller(self, scope: Scope) -> _Caller | None:
        """The registry and the request's ``Authorization`` header, when there are both."""
        registry = getattr(self._state, "registry", None)
        if registry is None:
            return None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
                return _Caller(registry, header,
                               registry.authenticator.cached(header) is not None)
        return None

    async def _read(self, caller: _Caller,
                    work: Callable[[Any], bytes | None]) -> bytes | None:
        """``work``'s answer from a reading thread, when the caller's token is one the process
        resolved (if the event loop could not tell, because the revocation check was due, the
        thread makes the check first, as the API's authentication does); None (the API
        answers) otherwise, or when the database failed the read, so that a failure is answered
        as the API answers it."""
        authenticator = caller.registry.authenticator

        def read(connection: Any) -> bytes | None:
            if not caller.resolved and authenticator.checked(caller.header) is None:
                return None
            return work(connection)

        engine = caller.registry.db.engine
        try:
            return await self._readers.run(engine, read)
        except (DBAPIError, engine.dialect.loaded_dbapi.Error):
            return None

    async def _page(self, scope: Scope) -> bytes | None:
        params = _list_params(scope["query_string"])
        caller = self._caller(scope) if params is not None else None
        if caller is None or params is None:
            return None
        state, limit, offset = params
        engine = caller.registry.db.engine

        def work(connection: Any) -> bytes:
            page_sql, state_sql, _one = _SQL.of(engine)
            sql = page_sql if state is None else state_sql
            rows = _fetch(connection, sql, {"lim": limit + 1, "off": offset, "state": state})
            more = len(rows) > limit
            items = b",".join([_MEMO.item(row) for row in rows[:limit]])
            return b"".join((b'{"items":[', items, b'],"limit":', str(limit).encode(),
                             b',"offset":', str(offset).encode(), b',"next_offset":',
                             str(offset + limit).encode() if more else b"null", b"}"))

        return await self._read(caller, work)

    async def _benchmark(self, scope: Scope, benchmark_id: int) -> bytes | None:
        if benchmark_id > 2**31 - 1 or scope["query_string"]:
            return None
        caller = self._caller(scope)
        if caller is None:
            return None
        engine = caller.registry.db.engine

        def work(connection: Any) -> bytes | None:
            one = _SQL.of(engine)[2]
            rows = _fetch(connection, one, {"id": benchmark_id})
            return _MEMO.item(rows[0]) if rows else None

        return await self._read(caller, work)
