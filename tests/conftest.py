"""Fixtures every tier shares: the operator's token trap (an attacker's endpoint on loopback)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class TokenTrap:
    """An HTTP server an attacking operator runs on 127.0.0.1 to capture whatever a workload
    sends it (``requests``: method, path, headers and body of each)."""

    url: str
    requests: list[tuple[str, str, str, bytes]] = field(default_factory=list)

    def captured(self) -> bytes:
        return b"".join(h.encode() + body for _, _, h, body in self.requests)


@pytest.fixture
def token_trap() -> Iterator[TokenTrap]:
    trap: TokenTrap | None = None

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            assert trap is not None
            trap.requests.append((self.command, self.path, str(self.headers), body))
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST = do_PUT = _record  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    trap = TokenTrap(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield trap
    finally:
        server.shutdown()
        server.server_close()
