"""The TEE launcher boundary: the :class:`Attester` protocol (an evidence source: fresh tokens on
request, nothing else; no file is required) and :class:`LauncherAttester`, which asks the
Confidential Space launcher (or the mock's, which speaks the same protocol) for attestation tokens
over its Unix socket (``GET /v1/token`` for the default STS-audience token, ``POST /v1/token``
with a custom audience and nonces) and also knows where the launcher keeps the refreshed default
token file (for tools that read it; the enclave asks the socket).

Wire format (``google/go-tpm-tools`` ``launcher/teeserver``): the response body is the raw
compact JWT (HTTP 200, ``Content-Type: text/html``); errors are HTTP 400/500 with a plain-text
reason. The POST body is ``{"audience": str, "nonces": [str, ...], "token_type": "OIDC"}``.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from sealbench.platforms.errors import AttesterError

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "DEFAULT_TOKEN_FILE",
    "LAUNCHER_TIMEOUT_S",
    "MAX_NONCES",
    "MAX_TOKEN_BYTES",
    "Attester",
    "LauncherAttester",
]

DEFAULT_SOCKET_PATH = Path("/run/container_launcher/teeserver.sock")
DEFAULT_TOKEN_FILE = Path("/run/container_launcher/attestation_verifier_claims_token")
#: Seconds allowed for one request to the launcher (it calls the verifier on our behalf).
LAUNCHER_TIMEOUT_S = 60.0
#: The launcher accepts at most this many nonces.
MAX_NONCES = 6
#: Upper bound on a token we are willing to read.
MAX_TOKEN_BYTES = 64 * 1024
#: Nonce sizes that both documented ranges (10-74 and 8-88 bytes) accept.
_NONCE_MIN, _NONCE_MAX = 10, 74
_AUDIENCE_MAX = 512


@runtime_checkable
class Attester(Protocol):
    """Something that returns attestation tokens for the running workload."""

    def token(self, audience: str | None = None, nonces: Sequence[str] = ()) -> str:
        """A fresh token: the platform's default one (Confidential Space: audience
        ``https://sts.googleapis.com``) when ``audience`` is None, else a custom token with that
        audience and ``nonces``."""
        ...


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


class LauncherAttester:
    """:class:`Attester` that talks HTTP to the launcher's Unix socket."""

    def __init__(
        self,
        socket_path: Path = DEFAULT_SOCKET_PATH,
        token_file: Path = DEFAULT_TOKEN_FILE,
        timeout: float = LAUNCHER_TIMEOUT_S,
    ) -> None:
        self._socket_path = socket_path
        self._token_file = token_file
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"LauncherAttester(socket_path={str(self._socket_path)!r})"

    @property
    def token_file(self) -> Path:
        """The file where the launcher keeps the (refreshed) default token."""
        return self._token_file

    def token(self, audience: str | None = None, nonces: Sequence[str] = ()) -> str:
        if isinstance(nonces, str):
            raise TypeError("nonces must be a sequence of strings, not one string")
        if audience is None:
            if nonces:
                raise AttesterError("nonces need a custom audience (the launcher requires one)")
            return self._request("GET", None)
        if not audience or len(audience.encode()) > _AUDIENCE_MAX:
            raise AttesterError(f"audience must be 1-{_AUDIENCE_MAX} bytes")
        if len(nonces) > MAX_NONCES:
            raise AttesterError(f"at most {MAX_NONCES} nonces, got {len(nonces)}")
        for nonce in nonces:
            if not _NONCE_MIN <= len(nonce.encode()) <= _NONCE_MAX:
                raise AttesterError(
                    f"each nonce must be {_NONCE_MIN}-{_NONCE_MAX} bytes, got {len(nonce.encode())}"
                )
        body = {"audience": audience, "nonces": list(nonces), "token_type": "OIDC"}
        return self._request("POST", json.dumps(body).encode())

    def _request(self, method: str, body: bytes | None) -> str:
        conn = _UnixHTTPConnection(self._socket_path, self._timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, "/v1/token", body=body, headers=headers)
            response = conn.getresponse()
            data = response.read(MAX_TOKEN_BYTES + 1)
        except OSError as exc:
            raise AttesterError(f"launcher socket {self._socket_path} unreachable: {exc}") from exc
        except http.client.HTTPException as exc:
            raise AttesterError(f"launcher socket {self._socket_path}: bad reply: {exc}") from exc
        finally:
            conn.close()
        if len(data) > MAX_TOKEN_BYTES:
            raise AttesterError(f"launcher reply exceeds {MAX_TOKEN_BYTES} bytes")
        text = data.decode("utf-8", errors="replace").strip()
        if response.status != 200:
            # The launcher's error texts describe the request, never a token.
            raise AttesterError(f"launcher refused ({response.status}): {text[:500]}")
        if text.count(".") != 2:
            raise AttesterError("launcher reply is not a compact JWT")
        return text
