"""Fixtures every tier shares: the operator's token trap (an attacker's endpoint on loopback),
and a third TEE platform installed by entry point only (:func:`third_platform`). And what every
session does: its child processes die with it, however it ends (:func:`pytest_configure`), and
the mock launcher's workload folders go under the session's own root."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from sealbench.mocktee.launcher import LAUNCHER_ROOT_ENV
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


# --- Child processes die with the session; each session has its own launcher root ----------
#
# A test starts servers, mock TEEs, enclaves and helper loops as child processes. When pytest
# is interrupted (Ctrl-C, SIGTERM from CI, a timeout) or killed, none may stay behind: every
# session (and every xdist worker) is a child subreaper, so an orphaned grandchild stays in its
# tree, SIGTERM/SIGHUP unwind pytest like Ctrl-C, and at the end every descendant still alive
# is terminated. A watchdog process outlives a SIGKILLed pytest: it keeps a snapshot of the
# session's descendants (and knows the session's marker variable that they inherit) and
# terminates them once the session's process is gone.

_SESSION_MARKER = "SEALBENCH_TEST_SESSION"
#: The outermost session's own temporary root (its workers' and nested sessions' are inside).
_SESSION_ROOT = "SEALBENCH_TEST_SESSION_ROOT"
_PR_SET_CHILD_SUBREAPER = 36
_REAP_GRACE_S = 3.0

_WATCHDOG = r"""
import os, select, shutil, signal, sys, time
session, marker, root = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
def start_time(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
def table():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[int(name)] = (int(fields[1]), fields[19])
    return out
def descendants(root, procs):
    children = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child != os.getpid() and child not in found:
                found[child] = procs[child][1]
                todo.append(child)
    return found
def marked(procs):
    found = {}
    for pid, (_, started) in procs.items():
        if pid == os.getpid():
            continue
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            found[pid] = started
    return found
session_started = start_time(session)
known = {}
while start_time(session) == session_started:
    ready, _, _ = select.select([sys.stdin], [], [], 2.0)
    if ready and not os.read(sys.stdin.fileno(), 1):
        break
    procs = table()
    known = {p: s for p, s in known.items() if procs.get(p, (0, None))[1] == s}
    known.update(descendants(session, procs))
targets = {**known, **marked(table())}
for sig in (signal.SIGTERM, signal.SIGKILL):
    alive = {p: s for p, s in targets.items() if start_time(p) == s}
    for pid in alive:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + 3
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {p: s for p, s in alive.items() if start_time(p) == s}
shutil.rmtree(root, ignore_errors=True)
"""


def _proc_start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root`` (pid -> kernel start time), from /proc."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        started[int(entry.name)] = fields[19]
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = started[child]
                todo.append(child)
    return found


def terminate_descendants(root: int, spare: frozenset[int] = frozenset()) -> list[int]:
    """SIGTERM every descendant of ``root`` but ``spare``, then SIGKILL those still alive after
    :data:`_REAP_GRACE_S`; returns the pids it signalled."""
    targets = {p: s for p, s in _descendants(root).items() if p not in spare}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = {p: s for p, s in targets.items() if _proc_start_time(p) == s}
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + _REAP_GRACE_S
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            alive = {p: s for p, s in alive.items() if _proc_start_time(p) == s}
    return sorted(targets)


class _Reaper:
    def __init__(self) -> None:
        self.watchdog: subprocess.Popen[bytes] | None = None
        self.session_root: Path | None = None  # the outermost session's, made here
        self.interrupted = False  # by a signal: see _raise_interrupt


_reaper = _Reaper()


def _raise_interrupt(signum: int, frame: object) -> None:
    """Unwind as Ctrl-C does (fixtures torn down, then :func:`pytest_unconfigure`); a second
    signal must not cut that short."""
    _reaper.interrupted = True
    for other in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@pytest.hookimpl(tryfirst=True)  # before the tmp_path plug-in reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # A short root (a socket path is at most 107 bytes) of the outermost session's own.
    if _SESSION_MARKER not in os.environ:  # the outermost session (not an xdist worker)
        os.environ[_SESSION_MARKER] = secrets.token_hex(8)
        _reaper.session_root = Path(tempfile.mkdtemp(prefix="sbt-", dir="/tmp"))
        os.environ[_SESSION_ROOT] = str(_reaper.session_root)
        if sys.platform == "linux":
            _reaper.watchdog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, str(os.getpid()),
                 f"{_SESSION_MARKER}={os.environ[_SESSION_MARKER]}", str(_reaper.session_root)],
                stdin=subprocess.PIPE, start_new_session=True,
            )
        if config.option.basetemp is None:
            # tmp_path and tmp_path_factory under the session's root as well, not the
            # /tmp/pytest-of-USER that every run of this user shares (and rotates); they go
            # with the session's root (--basetemp DIR keeps them).
            config.option.basetemp = str(_reaper.session_root / "tmp")
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _raise_interrupt)
    # The mock launcher's workload folders go under this session's (or worker's) own root,
    # never the machine-wide one another run may be using.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    launcher_root = tempfile.mkdtemp(prefix=f"{worker}-", dir=os.environ[_SESSION_ROOT])
    os.environ[LAUNCHER_ROOT_ENV] = launcher_root


#: The handlers a test must leave as it found them: a test that leaves SIGINT ignored, or
#: SIGTERM without :func:`_raise_interrupt`, makes every later test's session uninterruptible.
_KEPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _signal_handlers_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test (its body and function-scoped fixtures) that changes a handler of
    :data:`_KEPT_SIGNALS` fails, and the handler is put back for the tests after it. A session
    started with SIGINT ignored (a background job of a non-interactive shell) keeps it ignored:
    only a change is a failure."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in _KEPT_SIGNALS}
    yield
    after = {signum: signal.getsignal(signum) for signum in _KEPT_SIGNALS}
    changed = {signum: now for signum, now in after.items() if now != before[signum]}
    if not changed or _reaper.interrupted:  # unwinding, a second signal is ignored
        return
    for signum in changed:
        signal.signal(signum, before[signum])
    pytest.fail(f"{request.node.nodeid} left the handler of " + ", ".join(
        f"{signal.Signals(s).name} {now!r} (it found {before[s]!r})"
        for s, now in changed.items()), pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    spare = frozenset({_reaper.watchdog.pid}) if _reaper.watchdog is not None else frozenset()
    if sys.platform == "linux":
        terminate_descendants(os.getpid(), spare)
    if _reaper.watchdog is not None:
        assert _reaper.watchdog.stdin is not None
        _reaper.watchdog.stdin.close()  # the session ends: it sweeps once more and exits
        _reaper.watchdog.wait(timeout=30)
    if _reaper.session_root is not None:
        shutil.rmtree(_reaper.session_root, ignore_errors=True)


# --- Parallel where it is honest ---------------------------------------------------------------
#
# ``PYTEST_WORKERS=2 make test`` runs two xdist workers with ``--dist loadgroup``: every test of a
# module runs on one worker (its module-scoped world is built once, its module state is never
# shared across processes), and the tests that use one of these session-wide worlds run on one
# worker whatever their module (built once; the Docker engine and its image tags, the wheel, are
# one machine's).
SHARED_WORLDS = {
    "docker_engine": "docker",
    "sealbench_wheel": "wheel",
    "enclave_world": "enclave-world",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        used = getattr(item, "fixturenames", ())
        group = next((g for name, g in SHARED_WORLDS.items() if name in used), None)
        if group is None:
            group = item.path.relative_to(config.rootpath).as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):  # an xdist worker: what it collects, the order
        # xdist hands out groups in the order of their first test: the Docker group (the
        # longest, every image build) first, so that one worker starts it at once while the
        # other takes the rest, instead of one worker finishing it alone at the end.
        first = {g: i for i, g in enumerate(SHARED_WORLDS.values())}
        items.sort(key=lambda item: first.get(_group_of(item), len(first)))


def _group_of(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark is not None and mark.args else None
