"""The registry's most frequent reads, served from rows straight to JSON (issue 42): ``GET
/api/v1/benchmarks`` (a page) and ``GET /api/v1/benchmarks/{id}``.

Through FastAPI each of these paid for dependency solving, an ORM or row object validated into
a pydantic model per item, the response model's validation, Starlette's response object and
every middleware layer: about as much CPU again as the query (issue 42: MedPerf's Django server
used only 3.5-4.2 times more per read). :class:`FastReads` sits in front of the application and
answers these two requests itself, when and only when nothing about them is unusual: a GET of
exactly one of these paths, an ``Authorization`` header the process's token cache already
resolved (:meth:`~sealbench.server.auth.Authenticator.cached`, the same first step the API's
own dependency takes, with the same revocation rule), query parameters it reads exactly as the
API does (``limit`` 1-200, ``offset`` 0-10^9, ``state`` one of the benchmark states, each at
most once, nothing else), and a benchmark that exists. Anything else (a first request with a
token, a bad parameter, a missing benchmark, another method) goes to the application unchanged,
which answers it as before, errors included. The rows are read in the thread pool by the same
SELECT the API's service runs (the table's columns in id order, a page of ``limit + 1``; one
primary-key read), compiled once per dialect and run through the driver, each value turned into
what the schema serialises as the ORM's column types would (:data:`_LAYOUT`: UTC timestamps,
JSON documents, booleans, the pin as text), and the page serialised once by pydantic-core
(:func:`pydantic_core.to_json`) in the field order of
:class:`~sealbench.server.schemas.BenchmarkPublic`: the API's answer, byte for byte (a test
compares them on SQLite and PostgreSQL).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, cast, get_args
from urllib.parse import parse_qsl

from pydantic_core import from_json, to_json
from sqlalchemy import JSON, Boolean, Integer, String, bindparam, select
from starlette.concurrency import run_in_threadpool
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


class FastReads:
    """ASGI middleware answering the benchmark reads described in the module's docstring; every
    other request goes to ``app``. ``prefix``: the API's path prefix (``/api/v1``)."""

    def __init__(self, app: ASGIApp, *, prefix: str) -> None:
        self.app = app
        self._list = f"{prefix}/benchmarks"
        self._one = f"{prefix}/benchmarks/"

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

    @staticmethod
    def _signed_in(scope: Scope) -> Any:
        """The registry, when the request's token is one the process already resolved."""
        registry = getattr(scope["app"].state, "registry", None)
        if registry is None:
            return None
        for name, value in scope["headers"]:
            if name == b"authorization":
                try:
                    header = value.decode("latin-1")
                except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
                    return None
                return registry if registry.authenticator.cached(header) is not None else None
        return None

    async def _page(self, scope: Scope) -> bytes | None:
        params = _list_params(scope["query_string"])
        registry = self._signed_in(scope) if params is not None else None
        if registry is None or params is None:
            return None
        state, limit, offset = params

        def work() -> bytes:
            engine = registry.db.engine
            page_sql, state_sql, _one = _SQL.of(engine)
            sql = page_sql if state is None else state_sql
            values = {"lim": limit + 1, "off": offset, "state": state}
            with engine.connect() as conn:
                rows = conn.exec_driver_sql(sql.text, sql.params(values)).fetchall()
            items = [_item(row) for row in rows]
            more = len(items) > limit
            return to_json({"items": items[:limit], "limit": limit, "offset": offset,
                            "next_offset": offset + limit if more else None})

        return await run_in_threadpool(work)

    async def _benchmark(self, scope: Scope, benchmark_id: int) -> bytes | None:
        if benchmark_id > 2**31 - 1 or scope["query_string"]:
            return None
        registry = self._signed_in(scope)
        if registry is None:
            return None

        def work() -> bytes | None:
            engine = registry.db.engine
            one = _SQL.of(engine)[2]
            with engine.connect() as conn:
                row = conn.exec_driver_sql(one.text, one.params({"id": benchmark_id})).first()
            return None if row is None else to_json(_item(row))

        return await run_in_threadpool(work)
