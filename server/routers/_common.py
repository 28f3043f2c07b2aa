"""What every router shares: documented error responses, id path parameters, page building."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import Path, Query
from pydantic import BaseModel
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from sealbench.server.schemas import ErrorBody, Page
from sealbench.server.services._common import PageOf

__all__ = ["ERRORS", "IdPath", "OptionalId", "document_errors", "in_thread", "to_page"]

#: The error answers every route documents. Descriptions only: a response ``model`` here made
#: FastAPI build a pydantic TypeAdapter for each of them on every route, twice (when a route is
#: declared and when its router is included), 1,300 of them at start, about a third of the
#: registry's start-up CPU; the app's OpenAPI document gives each the :class:`ErrorBody` schema
#: instead (:func:`document_errors`).
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": text}
    for status, text in (
        (400, "malformed request body"),
        (401, "not authenticated"),
        (403, "not allowed"),
        (404, "not found"),
        (409, "conflict or invalid state"),
        (413, "body too large"),
        (422, "invalid request or rejected result"),
        (503, "a key set could not be fetched"),
    )
}

IdPath = Annotated[int, Path(ge=1, le=2**31 - 1)]
OptionalId = Annotated[int | None, Query(ge=1, le=2**31 - 1)]

S = TypeVar("S", bound=BaseModel)
R = TypeVar("R")


def to_page(page: PageOf[R], convert: Callable[[R], S], page_type: type[Page[S]]) -> Page[S]:
    """Convert a service page. ``page_type`` is the concrete ``Page[X]`` the route returns, so
    that FastAPI accepts the instance as is instead of validating every item again."""
    return page_type(
        items=tuple(convert(item) for item in page.items),
        limit=page.limit,
        offset=page.offset,
        next_offset=page.next_offset,
    )


async def in_thread(session: Session, work: Callable[[], R]) -> R:
    """Run ``work`` (service call and conversion to a schema) in the thread pool and end the
    session there too, so that no database I/O ever runs on the event loop and each request
    costs one thread hop (handlers are ``async``; FastAPI then validates the returned schema
    without a second hop)."""

    def run() -> R:
        try:
            return work()
        finally:
            session.close()

    return await run_in_threadpool(run)


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an OpenAPI document) with :class:`ErrorBody` as the JSON body of each error
    answer :data:`ERRORS` lists (422 included: the registry answers invalid requests with it,
    not with FastAPI's validation body) in every operation that documents it."""
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in body.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault("ErrorBody", body)
    documented = {str(code) for code in ERRORS}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for code, answer in operation.get("responses", {}).items():
                if code in documented:
                    answer["content"] = {"application/json": {"schema": ref}}
    return schema
