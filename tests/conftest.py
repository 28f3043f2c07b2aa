"""Fixtures every tier shares: the operator's token trap (an attacker's endpoint on loopback),
and a third TEE platform installed by entry point only (:func:`third_platform`)."""

from __future__ import annotations

import importlib
import shutil
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from sealbench.platforms import platform as platform_registry
from sealbench.platforms.platform import PLATFORM_GROUP

DOUBLE_SOURCE = Path(__file__).resolve().parent / "platforms_double" / "double_platform.py"
DOUBLE_MODULE = "sealbench_double_platform"


def _install_double(site: Path) -> None:
    """What ``pip install`` of a one-module distribution leaves: the module and its metadata."""
    shutil.copyfile(DOUBLE_SOURCE, site / f"{DOUBLE_MODULE}.py")
    info = site / "sealbench_double_platform-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sealbench-double-platform\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        f"[{PLATFORM_GROUP}]\ndouble = {DOUBLE_MODULE}:DoublePlatform\n"
    )


@pytest.fixture
def third_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A third platform, neither Google's nor the mock (``tests/platforms_double``), installed
    for the test only as an entry point of a ``*.dist-info`` on ``sys.path``: the module it is
    installed as (its names: ``NAME``, ``BACKEND``, ``ISSUER``, ...)."""
    site = tmp_path / "site-double"
    site.mkdir()
    _install_double(site)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    platform_registry._registered.cache_clear()
    try:
        yield importlib.import_module(DOUBLE_MODULE)
    finally:
        sys.modules.pop(DOUBLE_MODULE, None)
        platform_registry._registered.cache_clear()


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
