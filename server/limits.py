"""An ASGI middleware that refuses oversized and deeply nested request bodies before any
handler, parser or database sees them.

A declared ``Content-Length`` above the cap is refused at once (413); otherwise the body is read
while counting, and refused as soon as it passes the cap (413), so a chunked upload cannot slip
through. A body whose JSON nesting exceeds ``max_depth`` is refused with 422 (Python's JSON
parser would otherwise recurse on it). Accepted bodies are replayed to the application unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BodyLimitMiddleware", "json_depth_exceeds"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth_exceeds(body: bytes, max_depth: int) -> bool:
    """Whether the bracket nesting of ``body`` (outside strings) goes deeper than
    ``max_depth``. Not a JSON validator: malformed bodies are left to the parser."""
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub(b"", body)):
        if match.group() in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int, max_depth: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _refuse(send, 400, "bad_request", "Content-Length is not a number")
                    return
                if declared > self.max_bytes:
                    await self._too_large(send)
                    return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if json_depth_exceeds(body, self.max_depth):
            await _refuse(
                send, 422, "json_too_deep", f"JSON nesting deeper than {self.max_depth} levels"
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await _refuse(
            send, 413, "payload_too_large", f"request body exceeds {self.max_bytes} bytes"
        )


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    payload = json.dumps({"code": code, "message": message, "details": []}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
