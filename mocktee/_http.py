"""The mock's small HTTP layer: each mock service is a pure ``handle(Request) -> Response``
callable, served here by a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (or on a Unix socket for
the launcher). Bodies are bounded; nothing that could hold a token or key is ever logged."""

from __future__ import annotations

import json
import logging
import socketserver
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "MAX_BODY_BYTES",
    "Handler",
    "HttpService",
    "Request",
    "Response",
    "UnixHttpService",
    "bearer_token",
    "google_error",
    "json_response",
]

_log = logging.getLogger("sealbench.mocktee")

#: How often a serving thread checks for shutdown (stops are quick; idle cost is negligible).
POLL_INTERVAL_S = 0.05
#: Largest request body any mock service accepts (uploads stream through the storage proxy).
MAX_BODY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Request:
    """One parsed HTTP request. ``path`` is percent-decoded; ``raw_path`` is not."""

    method: str
    path: str
    raw_path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else {}


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json; charset=UTF-8"
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]


def json_response(status: int, value: object) -> Response:
    return Response(status, json.dumps(value, indent=2).encode())


_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    501: "UNIMPLEMENTED",
}


def google_error(code: int, message: str, status: str | None = None) -> Response:
    """Google's JSON error shape: ``{"error": {"code", "message", "status"}}``."""
    return json_response(
        code,
        {"error": {"code": code, "message": message, "status": status or _STATUS_NAMES[code]}},
    )


def bearer_token(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _make_handler_class(handle: Handler, name: str) -> type[BaseHTTPRequestHandler]:
    class _RequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"sealbench-mocktee-{name}"

        def _dispatch(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send(google_error(400, f"request body exceeds {MAX_BODY_BYTES} bytes"))
                self.close_connection = True
                return
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            request = Request(
                method=self.command,
                path=unquote(parts.path),
                raw_path=parts.path,
                query=query,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
            try:
                response = handle(request)
            except Exception:  # noqa: BLE001 - the server's one error boundary: answer 500
                _log.exception("mock %s: internal error on %s %s", name, self.command, parts.path)
                response = google_error(500, "internal error in the mock", "INTERNAL")
            self._send(response)

        def _send(self, response: Response) -> None:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch  # noqa: N815 - stdlib names

        def log_message(self, format: str, *args: object) -> None:
            # Paths and status only; bodies and headers (tokens) are never logged.
            _log.debug("mock %s: %s", name, format % args)

        def address_string(self) -> str:
            return str(self.client_address[0]) if self.client_address else "unix"

    return _RequestHandler


class HttpService:
    """Serves ``handle`` on ``host:port`` (port 0 picks a free one) in a daemon thread."""

    def __init__(self, name: str, handle: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self.name = name
        self._server = ThreadingHTTPServer((host, port), _make_handler_class(handle, name))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL_S},
            name=f"mocktee-{name}",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _ThreadingUnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class UnixHttpService:
    """Serves ``handle`` over HTTP on a Unix socket (the launcher's ``teeserver.sock``)."""

    def __init__(self, name: str, handle: Handler, socket_path: Path) -> None:
        self.name = name
        self.socket_path = socket_path
        socket_path.unlink(missing_ok=True)
        self._server = _ThreadingUnixHTTPServer(str(socket_path), _make_handler_class(handle, name))
        socket_path.chmod(0o777)  # as the real launcher does: any container user may connect
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL_S},
            name=f"mocktee-{name}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.socket_path.unlink(missing_ok=True)
