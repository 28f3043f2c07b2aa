"""Shared wire types: constrained strings, JSON objects, pages and the error body."""

from __future__ import annotations

import math
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from sealbench.contract.pin import Pin

__all__ = [
    "Digest",
    "ErrorBody",
    "ErrorDetail",
    "Health",
    "Id",
    "JsonObject",
    "JsonOut",
    "MetricsVersion",
    "Name",
    "Page",
    "Version",
    "VersionInfo",
    "WireModel",
]

Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")]
#: A benchmark pin on the wire: the text ``<name>/<version>``, held typed.
MetricsVersion = Pin
Id = Annotated[int, Field(ge=1, le=2**31 - 1)]

_MAX_JSON_NODES = 10_000


def _finite_json(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Refuse NaN/Infinity (not JSON; unhashable canonically) and oversized documents."""
    stack: list[object] = [value]
    nodes = 0
    while stack:
        item = stack.pop()
        nodes += 1
        if nodes > _MAX_JSON_NODES:
            raise ValueError(f"JSON object has more than {_MAX_JSON_NODES} values")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"numbers must be finite, received {item!r}")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


JsonObject = Annotated[dict[str, JsonValue], AfterValidator(_finite_json)]
#: A JSON object in a response: already checked when it came in, so not walked again.
JsonOut = dict[str, JsonValue]


class WireModel(BaseModel):
    """Base of every request and response body: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ErrorDetail(WireModel):
    loc: tuple[str | int, ...] = ()
    msg: str
    type: str


class ErrorBody(WireModel):
    """Every error response: a stable machine ``code`` and a human ``message``."""

    code: str
    message: str
    details: tuple[ErrorDetail, ...] = ()


T = TypeVar("T")


class Page(WireModel, Generic[T]):
    """One page of a list; ``next_offset`` is null on the last page."""

    items: tuple[T, ...]
    limit: int
    offset: int
    next_offset: int | None


class Health(WireModel):
    status: str


class VersionInfo(WireModel):
    version: str
    api: str
    schema_revision: str | None
