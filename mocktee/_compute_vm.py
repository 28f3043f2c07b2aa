"""One mock Confidential Space VM (for :mod:`sealbench.mocktee.compute`): its serial port, the
launch specification derived from its metadata exactly as the Confidential Space launcher
derives it (``google/go-tpm-tools`` ``launcher/spec``), and the boot that runs the workload as a
child process. INSECURE BY DESIGN: nothing here is measured by hardware.

The image pull: given a pull check (:class:`~sealbench.mocktee.artifacts.MockArtifacts`), an
Artifact Registry image whose repository does not grant the VM's service account a role with
``downloadArtifacts`` is refused as the real launcher's pull is: :data:`PULL_FAILED` with the
registry's "denied: Permission … denied on resource … (or it may not exist)" on the serial
port, no workload, launcher exit 1.

Boot, as the launcher does it: ``tee-env-NAME`` entries must all be allowed by the image's
launch policy (:class:`ImagePolicy`), ``tee-cmd`` (a JSON string array) only if it allows a
command override, ``tee-container-log-redirect`` only as its log-redirect label permits, and
``tee-restart-policy`` must be ``Never`` (the only policy the mock runs). A refused launch spec is
logged on the serial port and the launcher exits 1 without starting the workload. Otherwise the
workload — the installed ``python -m sealbench.enclave`` with the image's own arguments (the
mock has no registry: :class:`MockImageEntry`, by digest, says what an image runs and under which
launch policy; the evaluation image is any other digest) — gets the socket and token file of a
:class:`LaunchedWorkload` through ``--launcher-dir``, the ``tee-cmd`` arguments appended, and the
env overrides as its environment;
its stdout and stderr are the serial output when log redirection is on. The launcher's last line
is the current launcher's structured one (go-tpm-tools since October 2024, ``log/slog`` text):
``level=INFO msg="TEE container launcher exiting" exit_code=N``: 0 success, 1 workload or
launcher error, 4 on a debug image (the VM stays RUNNING). The format of before
(``TEE container launcher exiting, exit code: N (…)``) is :data:`LEGACY_LAUNCHER_EXIT`, for
tests of clients that must still read it.

A confidential-GPU VM (``a3-highgpu-1g`` with its ``nvidia-h100-80gb``, on the
``confidential-space-preview-cgpu`` family) has no GPU here: ``tee-install-gpu-driver`` installs
nothing and the workload runs on this machine's CPU (ONNX Runtime picks its CPU provider). Its
token carries what the preview GPU image attests: ``support_attributes: ["EXPERIMENTAL"]``
(never ``STABLE``), ``hwmodel: GCP_INTEL_TDX`` and ``submods.nvidia_gpu.cc_mode: "ON"`` (the
GPU's confidential-computing mode, which the host sets; see
:class:`~sealbench.mocktee.verifier.WorkloadLaunch`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from sealbench.mocktee.image import EVALUATION_MODULE
from sealbench.mocktee.launcher import ImagePolicy, LaunchedWorkload, private_launcher_dir
from sealbench.mocktee.verifier import TokenMinter, WorkloadLaunch

__all__ = [
    "AGGREGATOR_ARGS",
    "LAUNCHER_EXIT",
    "LEGACY_LAUNCHER_EXIT",
    "PULL_FAILED",
    "SERIAL_BUFFER_BYTES",
    "ImageCatalogue",
    "ImagePolicy",
    "MockImageEntry",
    "MockVm",
    "PullCheck",
    "SerialPort",
    "boot",
    "image_digest_of_vm",
    "launch_from_metadata",
    "metadata_items",
]

#: Compute keeps (and getSerialPortOutput returns) at most the last 1 MiB of serial output.
SERIAL_BUFFER_BYTES = 1 << 20
LAUNCHER_EXIT = 'level=INFO msg="TEE container launcher exiting" exit_code={code}'
LEGACY_LAUNCHER_EXIT = "TEE container launcher exiting, exit code: {code} ({message})"
_EXIT_MESSAGES = {
    0: "workload finished successfully, shutting down the VM",
    1: "workload or launcher error, shutting down the VM",
    4: "VM remains running",
}
DIGEST_REFERENCE = re.compile(r"^[^@\s]+@(?P<digest>sha256:[0-9a-f]{64})$")
_HWMODEL = {"SEV": "GCP_AMD_SEV", "TDX": "GCP_INTEL_TDX"}
_REDIRECTS = ("true", "serial", "cloud_logging", "false")
#: The confidential-computing mode Compute sets on a confidential H100 (``nvidia_gpu.cc_mode``).
GPU_CC_MODE = "ON"
#: The aggregator image's own command after ``python -m sealbench.enclave``: its CMD, what
#: ``sealbench.enclave.__main__.AGGREGATE_COMMAND`` names (the mock may not import the enclave).
AGGREGATOR_ARGS: Final = ("aggregate",)


@dataclass(frozen=True)
class MockImageEntry:
    """What one mock image runs in a VM: ``python -m sealbench.enclave`` with ``args`` (the
    image's own command, not an operator's ``tee-cmd``), under ``policy`` (its
    ``tee.launch_policy.*`` labels)."""

    args: tuple[str, ...]
    policy: ImagePolicy


#: The entry of an image digest (the mock's stand-in for pulling the image and reading it).
ImageCatalogue = Callable[[str], MockImageEntry]


class SerialPort:
    """Append-only console bytes of which the last :data:`SERIAL_BUFFER_BYTES` are kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = bytearray()
        self._dropped = 0

    def write_line(self, line: str) -> None:
        with self._lock:
            self._data += (line.rstrip("\n") + "\n").encode("utf-8", "replace")
            excess = len(self._data) - SERIAL_BUFFER_BYTES
            if excess > 0:
                del self._data[:excess]
                self._dropped += excess

    def read(self, start: int) -> tuple[str, int, int]:
        """``(contents, start, next)`` from byte offset ``start``; an offset older than the
        buffer starts at its oldest byte (the reply's ``start`` then says so)."""
        with self._lock:
            begin = max(start, self._dropped)
            end = self._dropped + len(self._data)
            if begin >= end:
                return "", begin, begin
            chunk = bytes(self._data[begin - self._dropped :])
            return chunk.decode("utf-8", "replace"), begin, end


@dataclass
class MockVm:
    """An instance and its workload. ``body`` is the validated insert request."""

    project_id: str
    project_number: str
    zone: str
    name: str
    instance_id: str
    body: dict[str, Any]
    #: The quota the VM holds while it is not TERMINATED (metric → amount).
    quota: dict[str, int]
    debug: bool
    #: A confidential GPU is attached (the preview GPU image family).
    gpu: bool = False
    #: Seconds the VM spends STOPPING after its launcher exits (a real shutdown takes a few:
    #: its serial port is still readable then, no longer once TERMINATED).
    shutdown_s: float = 0.0
    status: str = "PROVISIONING"
    history: list[str] = field(default_factory=lambda: ["PROVISIONING"])
    serial: SerialPort = field(default_factory=SerialPort)
    process: subprocess.Popen[str] | None = None
    deleted: bool = False
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00"))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set_status(self, status: str) -> None:
        with self.lock:
            self.status = status
            self.history.append(status)


def metadata_items(body: dict[str, Any]) -> dict[str, str]:
    """The instance metadata as a dict; ValueError on a malformed or duplicate item."""
    out: dict[str, str] = {}
    for item in (body.get("metadata") or {}).get("items") or []:
        key, value = item.get("key"), item.get("value", "")
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("metadata items need string keys and values")
        if key in out:
            raise ValueError(f"Duplicate metadata key '{key}'")
        out[key] = value
    return out


def image_digest_of_vm(vm: MockVm) -> str:
    """The digest ``vm``'s ``tee-image-reference`` names; ValueError unless it names one."""
    digest = DIGEST_REFERENCE.match(metadata_items(vm.body).get("tee-image-reference", ""))
    if digest is None:
        raise ValueError("tee-image-reference must name the image by digest in the mock")
    return digest.group("digest")


def launch_from_metadata(vm: MockVm, policy: ImagePolicy) -> tuple[WorkloadLaunch, bool]:
    """``(attested launch, log redirect to serial)`` for ``vm`` (pure), or ValueError with the
    launcher's reason for refusing the launch spec."""
    metadata = metadata_items(vm.body)
    reference = metadata.get("tee-image-reference", "")
    digest = image_digest_of_vm(vm)
    env = {k.removeprefix("tee-env-"): v for k, v in metadata.items() if k.startswith("tee-env-")}
    cmd: tuple[str, ...] | None = None
    if "tee-cmd" in metadata:
        try:
            parsed = json.loads(metadata["tee-cmd"])
        except json.JSONDecodeError as exc:
            raise ValueError(f"tee-cmd is not JSON: {exc}") from exc
        if not isinstance(parsed, list) or not all(isinstance(a, str) for a in parsed):
            raise ValueError("tee-cmd must be a JSON array of strings")
        cmd = tuple(parsed)
    policy.check(env, cmd)  # LaunchPolicyViolation is a ValueError: the launcher's refusal
    if metadata.get("tee-restart-policy", "Never") != "Never":
        raise ValueError("the sealbench mock runs only tee-restart-policy=Never")
    redirect = metadata.get("tee-container-log-redirect", "false").lower()
    if redirect not in _REDIRECTS:
        raise ValueError(f"invalid tee-container-log-redirect value {redirect!r}")
    allowed = policy.log_redirect == "always" or (policy.log_redirect == "debugonly" and vm.debug)
    if redirect != "false" and not allowed:
        raise ValueError("log redirection is not allowed by the image's launch policy")
    confidential = vm.body["confidentialInstanceConfig"]["confidentialInstanceType"]
    launch = WorkloadLaunch(
        image_digest=digest,
        image_reference=reference,
        env_overrides=env,
        debug=vm.debug,
        cmd_override=cmd,
        hwmodel=_HWMODEL[confidential],
        project_id=vm.project_id,
        project_number=vm.project_number,
        zone=vm.zone,
        instance_name=vm.name,
        instance_id=vm.instance_id,
        service_accounts=(str(vm.body["serviceAccounts"][0]["email"]),),
        gpu_cc_mode=GPU_CC_MODE if vm.gpu else None,
    )
    return launch, redirect in ("true", "serial")


#: ``(image reference, service account)`` → why the pull is refused, or None (it may pull).
PullCheck = Callable[[str, str], "str | None"]
#: The launcher's line for a refused pull: go-tpm-tools ``launcher/container_runner.go`` wraps
#: containerd's error in "cannot pull image: …" (containerd: ``failed to resolve reference …:
#: pulling from host … failed with status code […]: 403 Forbidden``); the registry's own denial
#: text in parentheses is the mock's addition (containerd may print the status only).
PULL_FAILED = ('cannot pull image: failed to resolve reference "{reference}": pulling from host '
               "{host} failed with status code [manifests {digest}]: 403 Forbidden ({why})")


def boot(
    vm: MockVm, images: ImageCatalogue, minter: TokenMinter, python: str,
    work_root: Path | None, pull: PullCheck | None = None,
) -> None:
    """Run ``vm`` to its end (called on the VM's own thread). ``images`` says what its image
    runs and under which launch policy; ``pull`` decides whether the VM's service account may
    pull its image (None: no registry to ask, every pull works)."""
    vm.set_status("STAGING")
    vm.set_status("RUNNING")
    vm.serial.write_line("TEE container launcher initiating (INSECURE sealbench mock)")
    code = 1
    try:
        image = images(image_digest_of_vm(vm))
        launch, redirect = launch_from_metadata(vm, image.policy)
        vm.serial.write_line(
            f"Launch Spec: ImageRef:{launch.image_reference} RestartPolicy:Never "
            f"Hardened:{not vm.debug} LogRedirect:{redirect} Envs:{sorted(launch.env_overrides)}"
        )
        refused = pull(launch.image_reference, launch.service_accounts[0]) if pull else None
        if refused is not None:
            raise ValueError(PULL_FAILED.format(
                reference=launch.image_reference, host=launch.image_reference.split("/", 1)[0],
                digest=launch.image_digest, why=refused))
        if vm.gpu:
            driver = metadata_items(vm.body).get("tee-install-gpu-driver", "false")
            vm.serial.write_line(
                f"GPU: 1 x nvidia-h100-80gb, cc_mode {GPU_CC_MODE}, tee-install-gpu-driver="
                f"{driver} (INSECURE mock: no GPU here, the workload runs on the CPU)"
            )
        code = _run_workload(vm, launch, image.args, redirect, minter, python, work_root)
    except (ValueError, OSError) as exc:
        vm.serial.write_line(str(exc))
    code = 4 if vm.debug else (0 if code == 0 else 1)
    vm.serial.write_line(LAUNCHER_EXIT.format(code=code, message=_EXIT_MESSAGES[code]))
    if not vm.debug and not vm.deleted:
        vm.set_status("STOPPING")
        time.sleep(vm.shutdown_s)
        vm.set_status("TERMINATED")


def _run_workload(
    vm: MockVm,
    launch: WorkloadLaunch,
    args: tuple[str, ...],
    redirect: bool,
    minter: TokenMinter,
    python: str,
    work_root: Path | None,
) -> int:
    socket_dir = private_launcher_dir()
    workdir = Path(tempfile.mkdtemp(prefix="sealbench-vm-", dir=work_root))
    (workdir / "tmp").mkdir()
    launched = LaunchedWorkload(launch, minter, socket_dir, seed=None).start()
    try:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TMPDIR": str(workdir / "tmp"),
            "HOME": str(workdir),
            "PYTHONUNBUFFERED": "1",
            "HOSTNAME": vm.name,
            **launch.env_overrides,
        }
        argv = [python, "-m", EVALUATION_MODULE, *args, "--launcher-dir", str(socket_dir)]
        with vm.lock:
            if vm.deleted:
                return 1
            vm.process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                [*argv, *(launch.cmd_override or ())],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        process = vm.process
        vm.serial.write_line(f"workload started (image {launch.image_digest})")
        sink = vm.serial.write_line if redirect else None
        pumps = [
            threading.Thread(target=_pump, args=(stream, sink), daemon=True)
            for stream in (process.stdout, process.stderr)
        ]
        for pump in pumps:
            pump.start()
        code = process.wait()
        for pump in pumps:
            pump.join(timeout=10)
        if code != 0:
            vm.serial.write_line("workload finished with a non-zero return code")
        return code
    finally:
        launched.stop()
        shutil.rmtree(socket_dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _pump(stream: IO[str] | None, sink: Callable[[str], None] | None) -> None:
    if stream is None:
        return
    for line in stream:
        if sink is not None:
            sink(line)
