"""The enclave's egress rule: no connection but to the launcher and the run's pinned endpoints.

:func:`install_egress_guard` (called once by the image's entry point, before any plug-in or model
is loaded) adds an audit hook (:func:`sys.addaudithook`; it cannot be removed, so there is one
per process) that checks every ``socket.getaddrinfo``, ``socket.connect``, ``socket.sendto`` and
``socket.sendmsg`` of the process, whoever makes it (the enclave, a plug-in, a library), against
the current :class:`EgressPolicy`, and raises :class:`~sealbench.contract.errors.EgressRefused`
naming the host for anything else. The policy has two phases:

1. until the run is attested (:meth:`EgressGuard.attesting`): the launcher's Unix socket
   (Confidential Space's ``/run/container_launcher/teeserver.sock``, or a socket in
   ``--launcher-dir``) and the loopback interface (where the INSECURE mock's verifier publishes
   the endpoints of its tokens); no key, weight or case is in the process yet;
2. once it is (:meth:`EgressGuard.pin`, from :func:`~sealbench.enclave.run.run_enclave`): the
   launcher's socket and the hosts and ports of the run's checked
   :class:`~sealbench.contract.spec.ServiceEndpoints` (Google's STS, Cloud KMS and Cloud Storage,
   or the mock's loopback URLs) and nothing else.

A name lookup is allowed for a pinned host only (so no data leaves in a DNS query for another
name); a connection or datagram to an IP address only when a lookup of a pinned host returned it
(``socket.getaddrinfo`` is wrapped to record what it returns), or when the endpoint names that
address itself. Without a guard installed (library callers, in-process tests) nothing is checked.
Code that opens sockets outside Python (a C library's own resolver or connections) is not seen;
the evaluation image has none on the enclave's path (Cloud KMS is used over REST).
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from sealbench.contract.errors import EgressRefused
from sealbench.contract.spec import ENDPOINT_FIELDS, ServiceEndpoints
from sealbench.platforms.attester import DEFAULT_SOCKET_PATH

__all__ = [
    "LAUNCHER_SOCKET_NAME",
    "LOOPBACK_HOSTS",
    "EgressGuard",
    "EgressPolicy",
    "install_egress_guard",
]

#: The loopback names and addresses allowed while the run is attested.
LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
#: The launcher socket's file name (Confidential Space's, which the mock's launcher reuses).
LAUNCHER_SOCKET_NAME: Final = DEFAULT_SOCKET_PATH.name
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}
_EVENTS: Final = frozenset({"socket.getaddrinfo", "socket.connect", "socket.sendto",
                            "socket.sendmsg"})


def _host(value: object) -> str:
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    return text.lower().rstrip(".")


def _shown(host: str) -> str:
    return host[:80] + ("..." if len(host) > 80 else "")


@dataclass(frozen=True)
class EgressPolicy:
    """Where the process may connect: ``hosts`` (name or address, any port when ``ports`` is
    None for it) and Unix sockets at ``unix_paths``."""

    hosts: frozenset[str]
    ports: frozenset[tuple[str, int]] | None
    unix_paths: frozenset[str]

    @classmethod
    def attesting(cls, unix_paths: Iterable[str]) -> EgressPolicy:
        """Phase 1: the launcher's socket and the loopback interface, any port."""
        return cls(LOOPBACK_HOSTS, None, frozenset(unix_paths))

    @classmethod
    def pinned(cls, endpoints: ServiceEndpoints, unix_paths: Iterable[str]) -> EgressPolicy:
        """Phase 2: the launcher's socket and each endpoint's host and port."""
        pairs = set()
        for name in ENDPOINT_FIELDS:
            url = urlsplit(getattr(endpoints, name))
            if url.hostname is None:
                raise ValueError(f"{name}: no host")
            pairs.add((_host(url.hostname), url.port or _DEFAULT_PORTS[url.scheme]))
        return cls(frozenset(h for h, _ in pairs), frozenset(pairs), frozenset(unix_paths))

    def allows_name(self, host: str) -> bool:
        return host in self.hosts

    def allows(self, host: str, port: int) -> bool:
        if host not in self.hosts:
            return False
        return self.ports is None or (host, port) in self.ports


@dataclass
class EgressGuard:
    """The process's egress guard: its current policy and the addresses pinned names resolved
    to. One per process (:func:`install_egress_guard`)."""

    unix_paths: frozenset[str]
    policy: EgressPolicy
    _resolved: dict[str, set[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attesting(self) -> None:
        """Back to phase 1 (the entry point starts there)."""
        self._set(EgressPolicy.attesting(self.unix_paths))

    def pin(self, endpoints: ServiceEndpoints) -> None:
        """Phase 2: only the launcher and ``endpoints`` from now on."""
        self._set(EgressPolicy.pinned(endpoints, self.unix_paths))

    def _set(self, policy: EgressPolicy) -> None:
        with self._lock:
            self.policy = policy
            self._resolved.clear()

    # -- the checks ----------------------------------------------------------------------

    def check(self, event: str, args: tuple[Any, ...]) -> None:
        """Raise :class:`EgressRefused` when ``event`` (an audit event) leaves the policy."""
        if event == "socket.getaddrinfo":
            host = args[0]
            if host is None:  # a passive lookup (bind): no name leaves
                return
            name = _host(host)
            if self.policy.allows_name(name):
                return
            if _is_address(name):  # no lookup leaves: the connect that follows is refused here
                raise EgressRefused(f"connection to {_shown(name)}:{args[1]} refused: not an "
                                    "endpoint this run pins")
            raise EgressRefused(f"name lookup of {_shown(name)} refused: not an endpoint this "
                                "run pins")
        elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            address = args[1]
            if address is None and event == "socket.sendmsg":
                return  # a connected socket: its connect was checked
            self._check_address(address)

    def _check_address(self, address: object) -> None:
        if isinstance(address, str | bytes):
            path = address.decode("utf-8", "replace") if isinstance(address, bytes) else address
            if path in self.policy.unix_paths:
                return
            raise EgressRefused(f"connection to Unix socket {_shown(path)!r} refused: not the "
                                "launcher's")
        if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
            host, port = _host(address[0]), address[1]
            with self._lock:
                learned = port in self._resolved.get(host, ())
            if learned or self.policy.allows(host, port):
                return
            raise EgressRefused(f"connection to {_shown(host)}:{port} refused: not an endpoint "
                                "this run pins")
        raise EgressRefused(f"connection to an address of type {type(address).__name__} "
                            "refused: not an endpoint this run pins")

    def learn(self, host: object, port: object, results: list[Any]) -> None:
        """Record the addresses a pinned ``host`` resolved to (with its port)."""
        name = _host(host)
        if not self.policy.allows_name(name):
            return
        ports = {p for h, p in self.policy.ports or () if h == name}
        if isinstance(port, int) and self.policy.ports is None:
            ports.add(port)
        with self._lock:
            for *_, sockaddr in results:
                if isinstance(sockaddr, tuple) and sockaddr:
                    self._resolved.setdefault(_host(sockaddr[0]), set()).update(ports)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


_GUARD: EgressGuard | None = None
_INSTALL_LOCK: Final = threading.Lock()


def install_egress_guard(launcher_dir: Path | None = None) -> EgressGuard:
    """The process's :class:`EgressGuard`, in phase 1, installing its audit hook and the
    recording ``socket.getaddrinfo`` the first time (an audit hook stays for the life of the
    process). The launcher's socket is Confidential Space's, or the one of that name in
    ``launcher_dir`` (the INSECURE mock's; its platform is still what the evidence there
    proves)."""
    global _GUARD
    unix = {str(DEFAULT_SOCKET_PATH)}
    if launcher_dir is not None:
        unix.add(str(launcher_dir / LAUNCHER_SOCKET_NAME))
    with _INSTALL_LOCK:
        if _GUARD is None:
            guard = EgressGuard(frozenset(unix), EgressPolicy.attesting(unix))
            sys.addaudithook(_hook_of(guard))
            socket.getaddrinfo = _recording(socket.getaddrinfo, guard)
            _GUARD = guard
        else:
            _GUARD.unix_paths = frozenset(unix)
            _GUARD.attesting()
        return _GUARD


def _hook_of(guard: EgressGuard) -> Callable[[str, tuple[Any, ...]], None]:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in _EVENTS:
            guard.check(event, args)

    return hook


def _recording(original: Callable[..., list[Any]], guard: EgressGuard) -> Callable[..., list[Any]]:
    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        results = original(host, port, *args, **kwargs)  # the audit hook checks the name
        if host is not None:
            guard.learn(host, port, results)
        return results

    return getaddrinfo
