"""The Docker backend (``sealbench run --tee docker``): the real evaluation image, run by the
local Docker engine through the Docker SDK, attested by the mock TEE. INSECURE as a TEE (the
operator owns the engine and can read the container's memory); it proves that the very image a
benchmark names works end to end, with the digest the engine reports in its claims.

For each run :class:`DockerLauncher`:

1. creates the container (not started) from the image, with the run spec as its environment
   (what its platform's :meth:`~sealbench.platforms.platform.Platform.launch_environment` makes of
   the spec, the platform being the one whose ``launcher_backends`` names ``docker``; nothing
   of the operator's environment is passed), hardened:
   read-only root filesystem, a ``tmpfs`` at ``/tmp`` for scratch, ``no-new-privileges``, every
   capability dropped, a memory limit with no swap, a process limit; host networking so the
   mock cloud on 127.0.0.1 is reachable;
2. reads the image ID of the created container (the image actually run, whatever tag pointed
   where) and asks the mock launcher for a workload socket and token file with that digest and
   the spec's environment as attested env overrides; the socket's folder is bind-mounted
   read-only at ``/run/container_launcher`` (where the real launcher puts it);
3. starts the container, streams its stdout lines to ``on_output``, reads the failure from the
   enclave's ``failed`` event there (a container that dies without one: its exit code, and
   stderr's last line as the reason), waits, maps the exit code to :class:`EnclaveRunFailed`
   (the enclave's exit codes, or 137 with ``OOMKilled`` for the memory limit), and always
   removes the container and the socket. The memory figure it reports (``peak_rss_bytes``) is the
   container's cgroup peak: resident memory plus page cache and the ``/tmp`` tmpfs, which is
   what the memory limit counts. The wall time it reports (``wall_seconds``) runs from the
   creation of the container to its exit: container creation and start-up are part of what a
   run costs, as the interpreter's start is part of a mock run's.

The benchmark's aggregator (issue 27) runs the same way on the aggregator image
(``sealbench-aggregate``: the evaluation image's layers, its own command and launch policy):
:meth:`DockerLauncher.start_aggregator` with an
:class:`~sealbench.contract.pool.AggregateSpec`, whose variables that image's
``allow_env_override`` label must allow.

``file://`` locations in the spec (local buckets, the result folder; for the aggregator, its
pool authorization's folder and the dataset and statistics locations its inputs name) are
bind-mounted at the same path, read-only except the result folder. While one is present the
container runs as the operator's uid:gid instead of the image's user, so that it can write the
operator's 0700 result folder; it still has no capabilities and cannot gain privileges.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Final

import docker.errors
from docker import DockerClient
from docker.models.containers import Container
from docker.types import Mount

from sealbench.contract.pool import AggregateSpec
from sealbench.contract.pool_authorization import PoolAuthorization
from sealbench.contract.result import MAX_DOCUMENT_BYTES, ResultFormatError
from sealbench.contract.spec import RunSpec
from sealbench.mocktee.constants import LAUNCH_TIMEOUT_S, MAX_FAILURE_REASON
from sealbench.mocktee.launcher import (
    ImagePolicy,
    LaunchedWorkload,
    MockLauncher,
    private_launcher_dir,
)
from sealbench.platforms.launcher import (
    EnclaveRunFailed,
    FailureWatch,
    LaunchError,
    LaunchResult,
    OutputFn,
    check_backend,
    failure_from_exit,
    launch_environment,
    platform_for_backend,
)
from sealbench.platforms.platform import LaunchPlatform

__all__ = [
    "BACKEND",
    "CONTAINER_LAUNCHER_DIR",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "DockerLauncher",
    "DockerWorkload",
]

_log = logging.getLogger("sealbench.client")

#: The ``sealbench run --tee`` name of this launcher.
BACKEND: Final = "docker"
#: Where Confidential Space mounts the launcher's socket folder inside the container.
CONTAINER_LAUNCHER_DIR: Final = "/run/container_launcher"
#: Seconds a run may take before its container is killed.
DEFAULT_TIMEOUT_S: Final = LAUNCH_TIMEOUT_S
DEFAULT_MEMORY_LIMIT: Final = "4g"
DEFAULT_TMPFS_SIZE: Final = "1g"
_PIDS_LIMIT: Final = 256
#: Output kept in memory: the last stderr lines (for the failure reason), and one line's length.
_STDERR_LINES: Final = 100
_MAX_LINE: Final = 16 * 1024
_MAX_REASON: Final = MAX_FAILURE_REASON
_SIGKILL_EXIT: Final = 128 + 9
#: Scratch inside the container (a tmpfs: nothing reaches a disk).
_SCRATCH: Final = "/tmp"  # noqa: S108 - a path inside the container, not on this machine


def _file_path(uri: str) -> Path | None:
    """The local path a ``file://`` URI names, None for any other scheme."""
    if not uri.startswith("file://"):
        return None
    return Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))


def _run_paths(spec: RunSpec) -> tuple[list[Path], Path | None]:
    """(read-only folders, writable result folder) named by ``file://`` URIs in ``spec``."""
    inputs = [_file_path(spec.dataset.uri), _file_path(spec.model.uri)]
    return [p for p in inputs if p is not None], _file_path(spec.result_uri)


def _aggregate_paths(spec: AggregateSpec) -> tuple[list[Path], Path | None]:
    """(read-only folders, writable result folder) of an aggregator run: the folder of the
    pool authorization (``pool-authorization.json`` at the spec's inputs location), and each
    ``file://`` dataset and statistics location its inputs document names (the sites' result
    folders when they ran here), read from it as the aggregator will read it. The aggregator
    verifies the authorization; one that cannot be read here leaves its own folder mounted,
    and the aggregator reports why it is refused."""
    inputs_path = _file_path(spec.inputs_uri)
    folders: list[Path | None] = [None if inputs_path is None else inputs_path.parent]
    if inputs_path is not None:
        with contextlib.suppress(OSError, ResultFormatError):
            with inputs_path.open("rb") as src:
                document = PoolAuthorization.from_bytes(src.read(MAX_DOCUMENT_BYTES + 1))
            for entry in document.inputs.inputs:
                folders += [_file_path(entry.dataset.uri), _file_path(entry.statistics_uri)]
    return [p for p in folders if p is not None], _file_path(spec.result_uri)


def _container_uid(container: Container) -> int | None:
    """The numeric uid the container runs as (``Config.User``), None for root or a name."""
    user = str(container.attrs.get("Config", {}).get("User") or "").split(":")[0]
    return int(user) if user.isdigit() and user != str(os.getuid()) else None


def _mounts(
    socket_dir: Path, inputs: list[Path], result: Path | None
) -> tuple[list[Mount], bool]:
    """The socket folder, each input folder read-only (once, and not one inside the result
    folder or another input), the result folder writable (made 0700 when absent); and whether
    any host folder is mounted (the container then runs as the operator's uid:gid)."""
    mounts = [Mount(CONTAINER_LAUNCHER_DIR, str(socket_dir), type="bind", read_only=True)]
    outer = [result] if result is not None else []
    for path in sorted(set(inputs), key=lambda p: (len(p.parts), str(p))):
        if any(path == o or path.is_relative_to(o) for o in outer):
            continue
        outer.append(path)
        mounts.append(Mount(str(path), str(path), type="bind", read_only=True))
    if result is not None:
        result.mkdir(parents=True, exist_ok=True, mode=0o700)
        mounts.append(Mount(str(result), str(result), type="bind", read_only=False))
    return mounts, bool(inputs) or result is not None


class _Lines:
    """Splits a byte stream into lines for a sink."""

    def __init__(self, sink: OutputFn | None) -> None:
        self._sink = sink
        self._pending = b""

    def feed(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self._emit(line[:_MAX_LINE])
        if len(self._pending) > _MAX_LINE:  # a very long line goes out in pieces
            self._emit(self._pending[:_MAX_LINE])
            self._pending = b""

    def close(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = b""

    def _emit(self, line: bytes) -> None:
        if self._sink is not None:
            self._sink(line.decode("utf-8", "replace").rstrip("\r"))


class DockerWorkload:
    """One started container and its mock launcher socket."""

    def __init__(
        self,
        client: DockerClient,
        container: Container,
        launched: LaunchedWorkload,
        socket_dir: Path,
        image_digest: str,
        on_output: OutputFn | None,
        memory_limit: str,
        *,
        started: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._memory_limit = memory_limit
        self._container = container
        self._launched = launched
        self._socket_dir = socket_dir
        self._image_digest = image_digest
        self._started = started  # before the container was created
        self._clock = clock
        self._stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        self._result: LaunchResult | EnclaveRunFailed | None = None
        self._closed = False
        self._peak_memory: int | None = None
        #: The enclave's ``failed`` event, read from its stdout on the way to ``on_output``.
        self._failure = FailureWatch(on_output)
        stream = self._attach(logs=True)
        container.start()
        self._reader = threading.Thread(
            target=self._pump, args=(stream, self._failure), name="sealbench-docker-logs",
            daemon=True,
        )
        self._reader.start()
        self._sampler = threading.Thread(
            target=self._sample_memory, name="sealbench-docker-stats", daemon=True
        )
        self._sampler.start()

    def _sample_memory(self) -> None:
        """Track the container's memory peak from the engine's stats stream (about one sample a
        second until the container stops): cgroup v1 reports its own ``max_usage``, cgroup v2
        only the current ``usage``, so there it is the largest sample."""
        with contextlib.suppress(docker.errors.DockerException, OSError, ValueError):
            for sample in self._client.api.stats(str(self._container.id), decode=True):
                memory = sample.get("memory_stats") or {}
                value = max(int(memory.get("max_usage") or 0), int(memory.get("usage") or 0))
                if value:
                    self._peak_memory = max(self._peak_memory or 0, value)

    def _attach(self, *, logs: bool) -> Iterator[tuple[bytes | None, bytes | None]]:
        return self._client.api.attach(
            str(self._container.id), stdout=True, stderr=True, stream=True, logs=logs, demux=True
        )

    def _pump(
        self, stream: Iterator[tuple[bytes | None, bytes | None]], sink: OutputFn | None
    ) -> None:
        """Forward output until the container ends. A long silence does not end the stream:
        the SDK waits for each frame with ``poll`` and no timeout (checked with a client
        timeout of 1 s and an enclave silent for 1.4 s at start)."""
        out, err = _Lines(sink), _Lines(self._stderr.append)
        with contextlib.suppress(docker.errors.DockerException, OSError, ValueError):
            for stdout, stderr in stream:
                if stdout:
                    out.feed(stdout)
                if stderr:
                    err.feed(stderr)
        out.close()
        err.close()

    @property
    def container_id(self) -> str:
        return str(self._container.id)

    @property
    def pid(self) -> int | None:
        """The container's init process as the host sees it (None once it has ended)."""
        with contextlib.suppress(docker.errors.DockerException):
            self._container.reload()
            pid = int(self._container.attrs.get("State", {}).get("Pid") or 0)
            return pid or None
        return None

    def kill(self) -> None:
        with contextlib.suppress(docker.errors.DockerException):
            self._container.kill()

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT_S) -> LaunchResult:
        if self._result is None:
            try:
                self._result = self._reap(timeout)
            finally:
                self.close()
        if isinstance(self._result, EnclaveRunFailed):
            raise self._result
        return self._result

    def _reap(self, timeout: float | None) -> LaunchResult | EnclaveRunFailed:
        try:
            status = self._container.wait(timeout=timeout)
        except docker.errors.DockerException as exc:
            raise LaunchError(f"lost the container while waiting for it: {exc}") from exc
        except (OSError, ValueError) as exc:  # requests' read timeout is an OSError
            self.kill()
            raise LaunchError(f"the enclave did not finish within {timeout} s; killed") from exc
        code = int(status.get("StatusCode", -1))
        self._reader.join(timeout=10)
        self._sampler.join(timeout=5)
        wall = self._clock() - self._started
        if code == 0:
            return LaunchResult(self._image_digest, wall, self._peak_memory)
        failed = failure_from_exit(code, self._failure.event, self._stderr, self._peak_memory,
                                   max_reason=_MAX_REASON)
        killed = None
        if code == _SIGKILL_EXIT and failed.code is None and not any(
                line.strip() for line in self._stderr):
            killed = "killed (SIGKILL)"
        with contextlib.suppress(docker.errors.DockerException):
            self._container.reload()
            if self._container.attrs.get("State", {}).get("OOMKilled"):
                killed = f"killed: the container reached its memory limit ({self._memory_limit})"
        return failed if killed is None else EnclaveRunFailed(code, killed, self._peak_memory)

    def close(self) -> None:
        """Remove the container and stop the launcher socket (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            with contextlib.suppress(docker.errors.NotFound):
                self._container.remove(force=True)
        except docker.errors.DockerException as exc:
            _log.warning("could not remove container %s: %s", self._container.id, exc)
        finally:
            self._launched.stop()
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def __enter__(self) -> DockerWorkload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._result is None:
            self.kill()
        self.close()


class DockerLauncher:
    """INSECURE :class:`~sealbench.platforms.launcher.Launcher` running the evaluation
    image ``image`` (a tag or an image ID) on the Docker engine ``client``, attested by the
    mock launcher ``launcher`` with the digest of the image actually run. ``clock`` times each
    run from the creation of its container. ``platform`` (default: the installed one whose
    launchers include ``docker``) decides how the run spec reaches the workload."""

    def __init__(
        self,
        client: DockerClient,
        launcher: MockLauncher,
        image: str,
        *,
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        tmpfs_size: str = DEFAULT_TMPFS_SIZE,
        debug: bool = False,
        clock: Callable[[], float] = time.monotonic,
        platform: LaunchPlatform | None = None,
    ) -> None:
        self._platform = check_backend(platform or platform_for_backend(BACKEND), BACKEND)
        self._client = client
        self._clock = clock
        self._launcher = launcher
        self._image = image
        self._memory = memory_limit
        self._tmpfs = tmpfs_size
        self._debug = debug
        self._image_digest = self._inspect(image)
        _log.warning(
            "INSECURE docker TEE: image %s runs on the local engine, attested by the mock",
            image,
        )

    def _inspect(self, image: str) -> str:
        try:
            return str(self._client.images.get(image).id)
        except docker.errors.ImageNotFound as exc:
            raise LaunchError(
                f"image {image} is not present on the Docker engine; build it with "
                "'sealbench image build'"
            ) from exc
        except docker.errors.DockerException as exc:
            raise LaunchError(f"cannot inspect image {image}: {exc}") from exc

    @property
    def image_digest(self) -> str:
        """The image ID ``image`` names now (a local build's digest, see
        :mod:`sealbench.client.images.build`)."""
        return self._image_digest

    @property
    def image_reference(self) -> str:
        return self._image

    @property
    def aggregator_image_digest(self) -> str:
        """The image ID this launcher runs, as :class:`~sealbench.client.runs.pool.
        AggregatorLauncher` names it: a DockerLauncher on the aggregator image
        (``sealbench-aggregate``) is the aggregator's launcher."""
        return self._image_digest

    def _create(self, run_id: str, environ: dict[str, str], socket_dir: Path,
                paths: tuple[list[Path], Path | None]) -> Container:
        mounts, needs_operator_uid = _mounts(socket_dir, *paths)
        user = f"{os.getuid()}:{os.getgid()}" if needs_operator_uid else None
        return self._client.containers.create(
            self._image,
            environment=environ,
            user=user,
            network_mode="host",
            read_only=True,
            tmpfs={_SCRATCH: f"rw,nosuid,nodev,size={self._tmpfs},mode=1777"},
            security_opt=["no-new-privileges"],
            cap_drop=["ALL"],
            mem_limit=self._memory,
            memswap_limit=self._memory,
            pids_limit=_PIDS_LIMIT,
            mounts=mounts,
            labels={"sealbench.run-id": run_id},
            name=f"sealbench-{run_id}-{os.urandom(3).hex()}",
            stdin_open=False,
            tty=False,
            detach=True,
        )

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> DockerWorkload:
        """Start an evaluation run of ``spec`` (module docstring)."""
        return self._start(spec.run_id, launch_environment(self._platform, spec),
                           _run_paths(spec), on_output)

    def start_aggregator(self, spec: AggregateSpec, *,
                         on_output: OutputFn | None = None) -> DockerWorkload:
        """Start the benchmark's aggregator (issue 27) on this launcher's image (the aggregator
        image), its spec as the attested env overrides, which the image's own launch policy
        (``AGGREGATE_ENV_NAMES``) must allow; its inputs document's folder, the ``file://``
        locations that document names and its result folder mounted."""
        return self._start(spec.run_id, launch_environment(self._platform, spec),
                           _aggregate_paths(spec), on_output)

    def _start(self, run_id: str, environ: dict[str, str],
               paths: tuple[list[Path], Path | None],
               on_output: OutputFn | None) -> DockerWorkload:
        """Create the container of ``run_id`` with ``environ`` and the host folders ``paths``
        (read-only inputs, writable result), attest it with the mock launcher under the image's
        own launch policy, and start it."""
        started = self._clock()
        socket_dir = private_launcher_dir()  # 0700; stale ones of dead runs are removed
        container: Container | None = None
        launched: LaunchedWorkload | None = None
        try:
            container = self._create(run_id, environ, socket_dir, paths)
            digest = str(container.attrs["Image"])  # the image this container runs
            # As Confidential Space does: the image's own launch policy decides which
            # overrides the operator may pass; the socket folder belongs to the container's user.
            labels = self._client.images.get(digest).labels or {}
            launched = self._launcher.start_workload(
                digest,
                self._image,
                environ,
                self._debug,
                socket_dir=socket_dir,
                policy=ImagePolicy.from_labels(labels),
                owner=_container_uid(container),
            )
            return DockerWorkload(
                self._client,
                container,
                launched,
                socket_dir,
                digest,
                on_output,
                self._memory,
                started=started,
                clock=self._clock,
            )
        except Exception as exc:  # the engine's and the mock's failures, whatever they are
            if launched is not None:
                launched.stop()
            if container is not None:
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
            shutil.rmtree(socket_dir, ignore_errors=True)
            if isinstance(exc, LaunchError):
                raise
            raise LaunchError(f"the container could not be started: {exc}") from exc

    def launch(
        self,
        spec: RunSpec,
        *,
        on_output: OutputFn | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
    ) -> LaunchResult:
        with self.start(spec, on_output=on_output) as workload:
            return workload.wait(timeout)
