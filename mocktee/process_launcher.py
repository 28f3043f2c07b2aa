"""INSECURE: the mock TEE backend. Runs ``python -m sealbench.enclave`` as a child process wired
to a running mock confidential cloud, for tests and ``sealbench demo``. Nothing isolates the
child from its operator: it proves only that the protocol works.

For each run :class:`MockProcessLauncher`:

1. asks the mock launcher (:class:`sealbench.mocktee.launcher.MockLauncher`, in-process or
   talking to a ``python -m sealbench.mocktee`` through ``RemoteTokenMinter``) for a workload
   socket and token file, with the run spec's environment as the attested env overrides (what
   its platform's :meth:`~sealbench.platforms.platform.Platform.launch_environment` makes of the
   spec; the platform is the one whose ``launcher_backends`` names ``mock``) and
   :func:`~sealbench.mocktee.image.enclave_image_digest` as the image digest;
2. starts the child with exactly that environment (plus ``PATH`` and a private ``TMPDIR``; the
   parent's environment is not inherited) and ``--launcher-dir`` naming the socket's folder;
3. streams the child's stdout (progress lines) to ``on_output``, reads the failure from the
   enclave's ``failed`` event there (:class:`~sealbench.platforms.launcher.FailureWatch`; a
   child that dies without one is reported by its exit code, its last stderr line as the
   reason), and reports the child's exit code (as :class:`EnclaveRunFailed`) and peak resident
   memory (``wait4`` rusage of that child alone).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from sealbench.contract.pool import AGGREGATE_ENV_NAMES, AggregateSpec
from sealbench.contract.spec import RunSpec
from sealbench.crypto.digest import Sha256Digest
from sealbench.mocktee.constants import LAUNCH_TIMEOUT_S, MAX_FAILURE_REASON
from sealbench.mocktee.image import (
    AGGREGATOR_MODULE,
    EVALUATION_MODULE,
    aggregator_image_digest,
    enclave_image_digest,
)
from sealbench.mocktee.launcher import (
    ImagePolicy,
    LaunchedWorkload,
    MockLauncher,
    private_launcher_dir,
)
from sealbench.mocktee.state import warn_insecure_once
from sealbench.platforms.launcher import (
    EnclaveRunFailed,
    FailureWatch,
    LaunchError,
    LaunchResult,
    LaunchTimeoutError,
    OutputFn,
    check_backend,
    failure_from_exit,
    launch_environment,
    platform_for_backend,
)
from sealbench.platforms.platform import LaunchPlatform

__all__ = [
    "AGGREGATOR_POLICY",
    "BACKEND",
    "DEFAULT_TIMEOUT_S",
    "MockProcessLauncher",
    "MockProcessWorkload",
]

#: The ``sealbench run --tee`` name of this launcher.
BACKEND = "mock"

_log = logging.getLogger("sealbench.client")

#: Seconds a mock run may take before it is killed.
DEFAULT_TIMEOUT_S = LAUNCH_TIMEOUT_S
_MAX_REASON = MAX_FAILURE_REASON
#: The aggregator image's launch policy: its own spec's variables only, no command override
#: (the mock Compute's aggregator image runs under it too).
AGGREGATOR_POLICY = ImagePolicy(allow_env_override=frozenset(AGGREGATE_ENV_NAMES))


class MockProcessWorkload:
    """One running enclave child process and its mock launcher socket."""

    def __init__(
        self,
        launched: LaunchedWorkload,
        process: subprocess.Popen[str],
        socket_dir: Path,
        workdir: Path,
        remove_workdir: bool,
        image_digest: str,
        on_output: OutputFn | None,
    ) -> None:
        self._launched = launched
        self._process = process
        self._socket_dir = socket_dir
        self._workdir = workdir
        self._remove_workdir = remove_workdir
        self._image_digest = image_digest
        self._started = time.monotonic()
        self._stderr: list[str] = []
        self._result: LaunchResult | LaunchError | None = None
        #: The enclave's ``failed`` event, read from its stdout on the way to ``on_output``.
        self._failure = FailureWatch(on_output)
        self._readers = [
            threading.Thread(target=self._pump, args=(process.stdout, self._failure),
                             daemon=True),
            threading.Thread(
                target=self._pump, args=(process.stderr, self._stderr.append), daemon=True
            ),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _pump(stream: IO[str] | None, sink: OutputFn | None) -> None:
        if stream is None:
            return
        for line in stream:
            if sink is not None:
                sink(line.rstrip("\n"))

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def workdir(self) -> Path:
        """The child's working directory (its ``TMPDIR`` is ``workdir/tmp``)."""
        return self._workdir

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._process.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT_S) -> LaunchResult:
        if self._result is None:
            try:
                self._result = self._reap(timeout)
            except LaunchError as exc:
                self._result = exc
        if isinstance(self._result, LaunchError):
            raise self._result
        return self._result

    def _reap(self, timeout: float | None) -> LaunchResult | LaunchError:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                pid, status, usage = os.wait4(self._process.pid, os.WNOHANG)
                if pid:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    self.kill()
                    pid, status, usage = os.wait4(self._process.pid, 0)
                    self._process.returncode = os.waitstatus_to_exitcode(status)
                    raise LaunchTimeoutError(
                        f"the enclave did not finish within {timeout} s; killed"
                    )
                time.sleep(0.05)
            code = os.waitstatus_to_exitcode(status)
            self._process.returncode = code
            for reader in self._readers:
                reader.join(timeout=10)
        finally:
            self._launched.stop()
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            if self._remove_workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
        peak = usage.ru_maxrss * 1024  # Linux reports KiB
        if code == 0:
            return LaunchResult(self._image_digest, time.monotonic() - self._started, peak)
        if code < 0:
            return EnclaveRunFailed(code, f"killed by signal {-code}", peak)
        return failure_from_exit(code, self._failure.event, self._stderr, peak,
                                 max_reason=_MAX_REASON)

    def __enter__(self) -> MockProcessWorkload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._result is None:
            self.kill()
            with contextlib.suppress(LaunchError):
                self.wait(timeout=30)


class MockProcessLauncher:
    """INSECURE :class:`~sealbench.platforms.launcher.Launcher` running the enclave as a
    child process against a mock TEE. ``workdir_root`` is where each run's working directory
    (and its ``TMPDIR``) is created; each is removed when the run ends unless ``keep_workdir``.
    ``platform`` (default: the installed one whose launchers include ``mock``) decides how the
    run spec reaches the workload."""

    def __init__(
        self,
        launcher: MockLauncher,
        *,
        image_digest: str | None = None,
        python: str = sys.executable,
        workdir_root: Path | None = None,
        keep_workdir: bool = False,
        debug: bool = False,
        platform: LaunchPlatform | None = None,
    ) -> None:
        self._platform = check_backend(platform or platform_for_backend(BACKEND), BACKEND)
        self._launcher = launcher
        self._image_digest = image_digest or enclave_image_digest()
        self._python = python
        self._workdir_root = workdir_root
        self._keep = keep_workdir
        self._debug = debug
        warn_insecure_once("sealbench.client", "INSECURE mock TEE: nothing protects the enclave")

    @property
    def image_digest(self) -> str:
        return self._image_digest

    @property
    def image_reference(self) -> str:
        return f"sealbench.local/evaluation@{self._image_digest}"

    def start(self, spec: RunSpec, *, on_output: OutputFn | None = None) -> MockProcessWorkload:
        return self._start(launch_environment(self._platform, spec), self._image_digest,
                           self.image_reference, EVALUATION_MODULE, None, on_output)

    @property
    def aggregator_image_digest(self) -> str:
        """The digest the aggregator "image" of this code attests (:mod:`~sealbench.mocktee.
        image`)."""
        return aggregator_image_digest(Sha256Digest(self._image_digest))

    def start_aggregator(self, spec: AggregateSpec, *,
                         on_output: OutputFn | None = None) -> MockProcessWorkload:
        """Start the benchmark's aggregator (issue 27) as its own attested workload: its
        image digest and fixed command, its spec as the attested env overrides."""
        digest = self.aggregator_image_digest
        return self._start(launch_environment(self._platform, spec), digest,
                           f"sealbench.local/aggregator@{digest}", AGGREGATOR_MODULE,
                           AGGREGATOR_POLICY, on_output)

    def _start(self, environ: dict[str, str], image_digest: str, reference: str, module: str,
               policy: ImagePolicy | None, on_output: OutputFn | None) -> MockProcessWorkload:
        if self._workdir_root is not None:
            self._workdir_root.mkdir(parents=True, exist_ok=True)
        socket_dir = private_launcher_dir()  # 0700; stale ones of dead runs are removed
        workdir = Path(tempfile.mkdtemp(prefix="sealbench-run-", dir=self._workdir_root))
        (workdir / "tmp").mkdir()
        try:
            launched = self._launcher.start_workload(
                image_digest,
                reference,
                environ,
                self._debug,
                socket_dir=socket_dir,
                policy=policy,
            )
        except Exception as exc:  # the mock's own failures, whatever they are
            shutil.rmtree(socket_dir, ignore_errors=True)
            shutil.rmtree(workdir, ignore_errors=True)
            raise LaunchError(f"the mock launcher could not start a workload: {exc}") from exc
        child_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TMPDIR": str(workdir / "tmp"),
            "HOME": str(workdir),
            "PYTHONUNBUFFERED": "1",
            **environ,
        }
        try:
            process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                [self._python, "-m", module, "--launcher-dir", str(socket_dir)],
                cwd=workdir,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            launched.stop()
            shutil.rmtree(socket_dir, ignore_errors=True)
            shutil.rmtree(workdir, ignore_errors=True)
            raise LaunchError(f"cannot start {self._python}: {exc}") from exc
        return MockProcessWorkload(
            launched,
            process,
            socket_dir,
            workdir,
            not self._keep,
            image_digest,
            on_output,
        )

    def launch(
        self,
        spec: RunSpec,
        *,
        on_output: OutputFn | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
    ) -> LaunchResult:
        with self.start(spec, on_output=on_output) as workload:
            return workload.wait(timeout)
