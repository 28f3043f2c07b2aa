"""The mock Confidential Space launcher: for one launched workload, an HTTP server on a Unix
socket (``teeserver.sock``) with the real ``GET /v1/token`` / ``POST /v1/token`` behaviour, and the
default token file (``attestation_verifier_claims_token``) written atomically and refreshed at
0.7-0.9 of the remaining lifetime, as ``google/go-tpm-tools`` ``launcher/teeserver`` does.

Whoever launches the workload supplies the image digest, reference and env overrides (the
facts a real launcher measures); the verifier signs them. As the real launcher does, the image's
launch policy (:class:`ImagePolicy`, the ``tee.launch_policy.*`` labels) is enforced first: an
env override the image does not allow, or a command override, is refused before any token
exists. INSECURE BY DESIGN: nothing here is measured by hardware.

Nothing left behind is a credential: each workload gets a private folder (0700, see
:func:`private_launcher_dir`) holding its socket and its token file (both 0600), owned by the
workload's user, removed when the workload stops. The folder's name records its owner process
(pid and start time); a later launch removes the folders of owners that died without cleaning
up (a SIGKILLed ``sealbench run``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import secrets
import shutil
import stat
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sealbench.contract.spec import ENV_OVERRIDE_NAMES
from sealbench.crypto.files import write_private
from sealbench.mocktee._http import Request, Response, UnixHttpService
from sealbench.mocktee.state import warn_insecure_once
from sealbench.mocktee.verifier import DEFAULT_AUDIENCE, TokenMinter, WorkloadLaunch

__all__ = [
    "CONTROL_TIMEOUT_S",
    "LAUNCHER_ROOT",
    "LAUNCHER_ROOT_ENV",
    "SOCKET_NAME",
    "TOKEN_FILE_NAME",
    "ImagePolicy",
    "LaunchPolicyViolation",
    "LaunchedWorkload",
    "MockLauncher",
    "RemoteTokenMinter",
    "handle_token_request",
    "launcher_root",
    "private_launcher_dir",
    "sweep_stale_launcher_dirs",
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
#: Where workload folders are made: short (a socket path is at most 107 bytes), per user.
LAUNCHER_ROOT = Path(tempfile.gettempdir()) / f"sealbench-launcher-{os.getuid()}"
#: A folder to use instead of :data:`LAUNCHER_ROOT` (a test session's own, so that two runs on
#: one machine never see each other's workload folders); read at each launch.
LAUNCHER_ROOT_ENV = "SEALBENCH_LAUNCHER_ROOT"


def launcher_root() -> Path:
    """Where this process makes workload folders: ``$SEALBENCH_LAUNCHER_ROOT`` if set, else
    :data:`LAUNCHER_ROOT`."""
    override = os.environ.get(LAUNCHER_ROOT_ENV)
    return Path(override) if override else LAUNCHER_ROOT


class LaunchPolicyViolation(ValueError):  # noqa: N818 - reads as the launcher's refusal
    """The launch asks for something the image's launch policy does not allow."""


@dataclass(frozen=True)
class ImagePolicy:
    """The image's launch-policy labels (``tee.launch_policy.*``) as the mock applies them. The
    default is the sealbench evaluation image's: ``allow_env_override`` =
    :data:`sealbench.contract.spec.ENV_OVERRIDE_NAMES` (what ``docker/Dockerfile`` writes), no
    command override, ``log_redirect=always``."""

    allow_env_override: frozenset[str] = frozenset(ENV_OVERRIDE_NAMES)
    allow_cmd_override: bool = False
    log_redirect: str = "always"

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> ImagePolicy:
        """The policy an image's labels state (absent labels allow nothing)."""
        names = labels.get("tee.launch_policy.allow_env_override", "")
        return cls(
            allow_env_override=frozenset(n.strip() for n in names.split(",") if n.strip()),
            allow_cmd_override=labels.get("tee.launch_policy.allow_cmd_override") == "true",
            log_redirect=labels.get("tee.launch_policy.log_redirect", "never"),
        )

    def check(self, env_overrides: Mapping[str, str], cmd_override: Sequence[str] | None) -> None:
        """Raise :class:`LaunchPolicyViolation` with the launcher's reason, as Confidential
        Space refuses such a launch spec."""
        for name in sorted(env_overrides):
            if name not in self.allow_env_override:
                raise LaunchPolicyViolation(
                    f"env var {name} is not allowed to be overridden on this image"
                )
        if cmd_override and not self.allow_cmd_override:
            raise LaunchPolicyViolation("CMD is not allowed to be overridden on this image")


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[-1].split()[19]


def _owner_alive(folder: Path) -> bool:
    """Whether the process named in ``folder``'s name (``PID-STARTTIME-RANDOM``) still runs."""
    pid, _, rest = folder.name.partition("-")
    started = rest.partition("-")[0]
    return pid.isdigit() and _start_time(int(pid)) == started


def sweep_stale_launcher_dirs(root: Path | None = None) -> list[Path]:
    """Remove the workload folders under ``root`` (default :func:`launcher_root`) whose owner
    process is gone (or was replaced by another with its pid); returns what was removed."""
    root = launcher_root() if root is None else root
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for child in root.iterdir():
        if not _owner_alive(child):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    if removed:
        _log.warning("mock launcher: removed %d stale workload folders", len(removed))
    return removed


def private_launcher_dir(root: Path | None = None) -> Path:
    """A new private (0700) folder for one workload's socket and token file under ``root``
    (default :func:`launcher_root`; 0700, ours: a folder someone else made there is refused),
    after removing stale ones. The
    folder's name records its owner (pid and start time), so it exists complete from the
    moment it exists: a concurrent sweep never takes it for a dead run's."""
    root = launcher_root() if root is None else root
    root.mkdir(mode=0o700, exist_ok=True)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{root} must be a folder of uid {os.getuid()} with mode 0700")
    sweep_stale_launcher_dirs(root)
    pid = os.getpid()
    folder = root / f"{pid}-{_start_time(pid)}-{secrets.token_hex(4)}"
    folder.mkdir(mode=0o700)
    return folder


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
        self,
        launch: WorkloadLaunch,
        minter: TokenMinter,
        socket_dir: Path,
        *,
        seed: int | None,
        owner: int | None = None,
    ) -> None:
        """``socket_dir`` must be a private folder (:func:`private_launcher_dir`); ``owner`` is
        the uid of the workload's user when it is not ours (a container's), who then gets the
        folder, socket and token file, still 0700/0600."""
        self.launch = launch
        self._minter = minter
        self._owner = owner
        socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        socket_dir.chmod(0o700)
        self.socket_dir = socket_dir
        self.socket_path = socket_dir / SOCKET_NAME
        self.token_file = socket_dir / TOKEN_FILE_NAME
        if len(str(self.socket_path).encode()) > _SUN_PATH_MAX:
            raise ValueError(f"socket path {self.socket_path} is too long for a Unix socket")
        self._rng = random.Random(seed)  # noqa: S311 - refresh jitter, not security
        self._stop = threading.Event()
        self._service = UnixHttpService(
            "launcher", lambda r: handle_token_request(r, self._mint), self.socket_path
        )
        self.socket_path.chmod(0o600)
        self._give(socket_dir)
        self._give(self.socket_path)
        lifetime = self._refresh_token_file()
        self._refresher = threading.Thread(
            target=self._refresh_loop, args=(lifetime,), name="mocktee-token-refresh", daemon=True
        )

    def _mint(self, audience: str, nonces: Sequence[str]) -> str:
        return self._minter.mint(self.launch, audience, nonces)

    def _give(self, path: Path) -> None:
        if self._owner is not None:
            os.chown(path, self._owner, -1)

    def _refresh_token_file(self) -> float:
        token = self._mint(DEFAULT_AUDIENCE, ())
        # atomic, 0600 and owned as it should be throughout
        write_private(self.token_file, token.encode(), owner_uid=self._owner)
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
        """Stop serving and remove the socket, the token file and the workload's folder."""
        self._stop.set()
        self._service.stop()
        self.token_file.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.socket_dir)

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

    def __init__(
        self, minter: TokenMinter, *, seed: int | None = None, policy: ImagePolicy | None = None
    ) -> None:
        self._minter = minter
        self._seed = seed
        self._policy = policy or ImagePolicy()

    def start_workload(
        self,
        image_digest: str,
        image_reference: str,
        env_overrides: Mapping[str, str],
        debug: bool = False,
        *,
        socket_dir: Path,
        cmd_override: Sequence[str] | None = None,
        policy: ImagePolicy | None = None,
        owner: int | None = None,
        hwmodel: str = "GCP_AMD_SEV",
        secboot: bool = True,
    ) -> LaunchedWorkload:
        """Create ``socket_dir/teeserver.sock`` and ``socket_dir/attestation_verifier_claims_token``
        for one workload and keep the token file fresh until :meth:`LaunchedWorkload.stop`.
        ``policy`` (default: this launcher's) is the image's launch policy; a launch it does not
        allow raises :class:`LaunchPolicyViolation` and creates nothing. ``hwmodel`` and
        ``secboot`` are the machine the mock pretends to be (tests of the policies' refusals)."""
        (policy or self._policy).check(env_overrides, cmd_override)
        launch = WorkloadLaunch(
            image_digest=image_digest,
            image_reference=image_reference,
            env_overrides=dict(env_overrides),
            debug=debug,
            cmd_override=tuple(cmd_override) if cmd_override is not None else None,
            hwmodel=hwmodel,
            secboot=secboot,
        )
        warn_insecure_once("sealbench.mocktee", "INSECURE mock launcher: its tokens prove nothing")
        _log.info(
            "mock launcher: workload %s (%s image) at %s",
            image_digest,
            "debug" if debug else "production",
            socket_dir,
        )
        return LaunchedWorkload(
            launch, self._minter, socket_dir, seed=self._seed, owner=owner
        ).start()


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
