"""The mock Confidential Space launcher: for one launched workload, an HTTP server on a Unix
socket (``teeserver.sock``) with the real ``GET /v1/token`` / ``POST /v1/token`` behaviour, and the
default token file (``attestation_verifier_claims_token``) written atomically and refreshed at
0.7-0.9 of the remaining lifetime, as ``google/go-tpm-tools`` ``launcher/teeserver`` does.

Whoever launches the workload supplies the image digest, reference and env overrides (the
facts a real launcher measures); the verifier signs them. INSECURE BY DESIGN: nothing here is
measured by hardware.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from sealbench.mocktee._http import Request, Response, UnixHttpService
from sealbench.mocktee.state import atomic_write
from sealbench.mocktee.verifier import DEFAULT_AUDIENCE, TokenMinter, WorkloadLaunch

__all__ = [
    "CONTROL_TIMEOUT_S",
    "SOCKET_NAME",
    "TOKEN_FILE_NAME",
    "LaunchedWorkload",
    "MockLauncher",
    "RemoteTokenMinter",
    "handle_token_request",
]

_log = logging.getLogger("sealbench.mocktee")

SOCKET_NAME = "teeserver.sock"
TOKEN_FILE_NAME = "attestation_verifier_claims_token"  # noqa: S105 - a file name
#: Seconds allowed for a call to the mock's control endpoint.
CONTROL_TIMEOUT_S = 30.0
_MAX_NONCES = 6
_NONCE_MIN, _NONCE_MAX = 8, 88
_AUDIENCE_MAX = 512
_TOKEN_TYPES = {"OIDC", "PKI", "AWS_PRINCIPALTAGS", "LIMITED_AWS"}
_TOKEN_OPTION_FIELDS = {"audience", "nonces", "token_type", "aws_principal_tag_options"}
_SUN_PATH_MAX = 107


def _text(status: int, message: str) -> Response:
    return Response(status, (message + "\n").encode(), "text/plain; charset=utf-8")


def _token(token: str) -> Response:
    # The real teeserver answers the raw JWT with Content-Type text/html (sic).
    return Response(200, token.encode(), "text/html")


def handle_token_request(request: Request, mint: Callable[[str, Sequence[str]], str]) -> Response:
    """The launcher's ``/v1/token`` endpoint (pure apart from ``mint``)."""
    if request.path != "/v1/token":
        return _text(404, "404 page not found")
    if request.method == "GET":
        return _token(mint(DEFAULT_AUDIENCE, ()))
    if request.method != "POST":
        return _text(400, f"TEE server received invalid HTTP method: {request.method}")
    try:
        options = json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _text(400, f"failed to parse POST body as TokenOptions: {exc}")
    if not isinstance(options, dict):
        return _text(400, "failed to parse POST body as TokenOptions: not a JSON object")
    unknown = sorted(set(options) - _TOKEN_OPTION_FIELDS)
    if unknown:
        return _text(
            400, f'failed to parse POST body as TokenOptions: json: unknown field "{unknown[0]}"'
        )
    audience = options.get("audience", "")
    nonces = options.get("nonces") or []
    token_type = options.get("token_type", "")
    if not isinstance(audience, str) or not isinstance(token_type, str):
        return _text(400, "failed to parse POST body as TokenOptions: wrong field type")
    if not isinstance(nonces, list) or not all(isinstance(n, str) for n in nonces):
        return _text(400, "failed to parse POST body as TokenOptions: nonces must be strings")
    if audience == "":
        return _text(400, "use GET request for the default identity token")
    if not token_type:
        return _text(400, "token_type is a required parameter")
    if token_type not in _TOKEN_TYPES:
        return _text(400, f"unsupported token type: {token_type}")
    if token_type != "OIDC":  # noqa: S105 - a token type name
        return _text(400, f"the sealbench mock verifier only issues OIDC tokens, not {token_type}")
    if len(audience.encode()) > _AUDIENCE_MAX:
        return _text(400, f"audience exceeds the maximum of {_AUDIENCE_MAX} bytes")
    if len(nonces) > _MAX_NONCES:
        return _text(400, f"got {len(nonces)} nonces, but only {_MAX_NONCES} are allowed")
    for nonce in nonces:
        if not _NONCE_MIN <= len(nonce.encode()) <= _NONCE_MAX:
            return _text(
                400,
                f"nonce must be between {_NONCE_MIN} and {_NONCE_MAX} bytes, "
                f"got {len(nonce.encode())}",
            )
    return _token(mint(audience, tuple(nonces)))


def _token_lifetime(token: str) -> float:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return float(claims["exp"]) - float(claims["iat"])


class LaunchedWorkload:
    """One running mock workload environment: its launcher socket and its token file."""

    def __init__(
        self, launch: WorkloadLaunch, minter: TokenMinter, socket_dir: Path, *, seed: int | None
    ) -> None:
        self.launch = launch
        self._minter = minter
        socket_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path = socket_dir / SOCKET_NAME
        self.token_file = socket_dir / TOKEN_FILE_NAME
        if len(str(self.socket_path).encode()) > _SUN_PATH_MAX:
            raise ValueError(f"socket path {self.socket_path} is too long for a Unix socket")
        self._rng = random.Random(seed)  # noqa: S311 - refresh jitter, not security
        self._stop = threading.Event()
        self._service = UnixHttpService(
            "launcher", lambda r: handle_token_request(r, self._mint), self.socket_path
        )
        lifetime = self._refresh_token_file()
        self._refresher = threading.Thread(
            target=self._refresh_loop, args=(lifetime,), name="mocktee-token-refresh", daemon=True
        )

    def _mint(self, audience: str, nonces: Sequence[str]) -> str:
        return self._minter.mint(self.launch, audience, nonces)

    def _refresh_token_file(self) -> float:
        token = self._mint(DEFAULT_AUDIENCE, ())
        atomic_write(self.token_file, token.encode(), mode=0o644)
        return _token_lifetime(token)

    def _refresh_loop(self, lifetime: float) -> None:
        backoff = 1.0
        while not self._stop.wait(lifetime * self._rng.uniform(0.7, 0.9)):
            try:
                lifetime = self._refresh_token_file()
                backoff = 1.0
            except Exception:  # noqa: BLE001 - keep refreshing, as the real launcher never gives up
                _log.warning("mock launcher: token refresh failed; retrying in %.0fs", backoff)
                lifetime = backoff / 0.8
                backoff = min(backoff * 2, 3600.0)

    def start(self) -> LaunchedWorkload:
        self._service.start()
        self._refresher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._service.stop()
        self.token_file.unlink(missing_ok=True)

    def __enter__(self) -> LaunchedWorkload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class MockLauncher:
    """Starts mock workload environments whose tokens ``minter`` signs."""

    def __init__(self, minter: TokenMinter, *, seed: int | None = None) -> None:
        self._minter = minter
        self._seed = seed

    def start_workload(
        self,
        image_digest: str,
        image_reference: str,
        env_overrides: Mapping[str, str],
        debug: bool = False,
        *,
        socket_dir: Path,
        cmd_override: Sequence[str] | None = None,
    ) -> LaunchedWorkload:
        """Create ``socket_dir/teeserver.sock`` and ``socket_dir/attestation_verifier_claims_token``
        for one workload and keep the token file fresh until :meth:`LaunchedWorkload.stop`."""
        launch = WorkloadLaunch(
            image_digest=image_digest,
            image_reference=image_reference,
            env_overrides=dict(env_overrides),
            debug=debug,
            cmd_override=tuple(cmd_override) if cmd_override is not None else None,
        )
        _log.warning(
            "INSECURE mock launcher: workload %s (%s image) at %s",
            image_digest,
            "debug" if debug else "production",
            socket_dir,
        )
        return LaunchedWorkload(launch, self._minter, socket_dir, seed=self._seed).start()


class RemoteTokenMinter:
    """A :class:`TokenMinter` that asks a running ``python -m sealbench.mocktee`` process (its
    control endpoint, see ``endpoints.json``) to sign tokens."""

    def __init__(self, control_url: str, timeout: float = CONTROL_TIMEOUT_S) -> None:
        if not control_url.startswith(("http://127.0.0.1:", "http://localhost:")):
            raise ValueError("the mock's control endpoint must be on the loopback interface")
        self._url = control_url.rstrip("/") + "/mock/v1/attestation:mint"
        self._timeout = timeout

    def mint(self, launch: WorkloadLaunch, audience: str, nonces: Sequence[str]) -> str:
        body = json.dumps(
            {"launch": launch.to_json(), "audience": audience, "nonces": list(nonces)}
        ).encode()
        request = urllib.request.Request(  # noqa: S310 - loopback http URL checked above
            self._url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
            token: str = json.loads(response.read(1 << 20))["token"]
        return token
