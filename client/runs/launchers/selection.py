"""Which launcher starts a run: the one module of the client that imports launcher
implementations (a test scans the CLI modules for it).

``sealbench run --tee BACKEND`` names a launcher backend. The backend maps, through the platform
registry (:func:`~sealbench.client.runs.launchers.base.platform_for_backend`: the one installed
:class:`~sealbench.platforms.platform.Platform` whose ``launcher_backends`` names it), to the
platform whose workloads that launcher starts; each factory here hands that platform to the
launcher, which renders the run spec with the platform's
:meth:`~sealbench.platforms.platform.Platform.launch_environment`. A backend no installed platform
names is refused with the installed ones listed.

Backends and their implementations (imported only when chosen: the Docker SDK and
google-cloud-compute are optional extras):

- ``mock`` → :class:`~sealbench.client.runs.launchers.mock.MockProcessLauncher` (INSECURE)
- ``docker`` → :class:`~sealbench.client.runs.launchers.docker.DockerLauncher` (INSECURE)
- ``confidential-space`` →
  :class:`~sealbench.client.runs.launchers.confidential_space.ConfidentialSpaceLauncher`
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from sealbench.client.runs.launchers.base import Launcher, LaunchError, platform_for_backend
from sealbench.platforms.platform import Platform

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = [
    "LaunchSettingsError",
    "confidential_space_launcher",
    "docker_launcher",
    "gpu_machine",
    "mock_process_launcher",
    "platform_for_backend",
]


class LaunchSettingsError(LaunchError):
    """The launcher's settings are refused before anything starts; ``hint`` says what to do."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def gpu_machine(accelerator: str) -> tuple[str, int]:
    """``(machine type, GPU count)`` of a confidential GPU VM for ``--accelerator``;
    :class:`LaunchSettingsError` for an accelerator sealbench does not launch."""
    from sealbench.client.runs.launchers._cs_resources import GPU_MACHINES

    if accelerator not in GPU_MACHINES:
        raise LaunchSettingsError(f"unknown accelerator {accelerator!r}",
                                  hint=f"use one of {', '.join(sorted(GPU_MACHINES))}")
    return GPU_MACHINES[accelerator]


def mock_process_launcher(control_url: str, *, debug: bool = False) -> Launcher:
    """``--tee mock``: the enclave as a child process, its tokens signed by the running mock
    verifier whose control endpoint is ``control_url``."""
    from sealbench.client.runs.launchers.mock import BACKEND, MockProcessLauncher
    from sealbench.mocktee import MockLauncher, RemoteTokenMinter

    platform = platform_for_backend(BACKEND)
    return MockProcessLauncher(
        MockLauncher(RemoteTokenMinter(control_url)), debug=debug, platform=platform
    )


def docker_launcher(engine: Any, control_url: str, image: str, *, debug: bool = False) -> Launcher:
    """``--tee docker``: the evaluation image ``image`` on the Docker engine ``engine``, attested
    by the running mock verifier whose control endpoint is ``control_url``."""
    from sealbench.client.runs.launchers.docker import BACKEND, DockerLauncher
    from sealbench.mocktee import MockLauncher, RemoteTokenMinter

    platform = platform_for_backend(BACKEND)
    return DockerLauncher(
        engine, MockLauncher(RemoteTokenMinter(control_url)), image, debug=debug,
        platform=platform,
    )


def confidential_space_launcher(
    *,
    project: str,
    zone: str,
    service_account: str,
    image_reference: str,
    tee: Literal["SEV", "TDX"],
    debug: bool,
    accelerator: str | None = None,
    keep_vm: bool,
    credentials: Credentials | None,
    api_endpoint: str | None,
    result_store: Any = None,
    poll_interval: float | None = None,
) -> Launcher:
    """``--tee confidential-space``: a Confidential Space VM in ``project``/``zone``; settings
    that cannot work (an image named by tag, ...) raise :class:`LaunchSettingsError`."""
    from sealbench.client.runs.launchers.confidential_space import (
        BACKEND,
        POLL_INTERVAL_S,
        ConfidentialSpaceError,
        ConfidentialSpaceLauncher,
        VmSettings,
    )

    platform: Platform = platform_for_backend(BACKEND)
    try:
        settings = VmSettings(
            project=project,
            zone=zone,
            service_account=service_account,
            image_reference=image_reference,
            tee=tee,
            debug=debug,
            keep_vm=keep_vm,
            accelerator=accelerator,
        )
    except ConfidentialSpaceError as exc:
        raise LaunchSettingsError(str(exc), hint=exc.hint) from exc
    return ConfidentialSpaceLauncher(
        settings, credentials=credentials, api_endpoint=api_endpoint, platform=platform,
        result_store=result_store,
        poll_interval=POLL_INTERVAL_S if poll_interval is None else poll_interval,
    )
