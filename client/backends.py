"""Which launcher starts a run (the CLI goes through this module; a test scans it). It sits
below the client's rooms (every room may import it, it imports none of them): the owner's cloud,
the pinned images and the runs all ask it which platform a ``--tee`` backend stands for.

``sealbench run --tee BACKEND`` names a launcher backend (:class:`TeeBackend`, the shipped ones,
or one an installed platform brings: :func:`installed_backends`).
The backend maps, through the platform registry
(:func:`~sealbench.platforms.launcher.platform_for_backend`: the one installed
:class:`~sealbench.platforms.platform.Platform` whose ``launcher_backends`` names it), to the
platform whose workloads that launcher starts, and that platform builds the typed
:class:`~sealbench.platforms.launcher.Launcher`
(:meth:`~sealbench.platforms.platform.Platform.launcher`), which renders the run spec with the
platform's :meth:`~sealbench.platforms.platform.Platform.launch_environment`. A backend no
installed platform names is refused with the installed ones listed. This module names no
launcher implementation: a platform installed by entry point brings its own backends
(:func:`build_launcher`).

The shipped backends and the platforms that build them (their implementations are imported only
when chosen: the Docker SDK and google-cloud-compute are optional extras):

- ``mock``, ``docker`` → the INSECURE mock (:mod:`sealbench.mocktee`)
- ``confidential-space`` → Google's Confidential Space (:mod:`sealbench.gcp`)
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Literal

from sealbench.client.errors import ConfigError
from sealbench.platforms.launcher import Launcher, LaunchSettingsError, platform_for_backend
from sealbench.platforms.platform import Platform, installed_launcher_backends

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = [
    "LOCAL_MOCK_BACKENDS",
    "LaunchSettingsError",
    "TeeBackend",
    "build_launcher",
    "check_tee",
    "confidential_space_launcher",
    "docker_launcher",
    "gpu_machine",
    "installed_backends",
    "mock_process_launcher",
    "platform_for_backend",
]


class TeeBackend(StrEnum):
    """The ``--tee`` backends this version ships (another installed platform may bring more:
    :func:`build_launcher` takes any name)."""

    MOCK = "mock"
    DOCKER = "docker"
    CONFIDENTIAL_SPACE = "confidential-space"

    @property
    def platform(self) -> Platform:
        """The installed platform whose workloads this backend starts."""
        return platform_for_backend(self.value)

    def launcher(self, **options: Any) -> Launcher:
        """This backend's launcher, built by its platform from ``options``."""
        return build_launcher(self.value, **options)


#: The backends that run on this machine and attest to the running mock TEE (its endpoints are
#: what their run specs name, and their results stay in a local folder).
LOCAL_MOCK_BACKENDS: Final = frozenset({TeeBackend.MOCK.value, TeeBackend.DOCKER.value})


def installed_backends() -> tuple[str, ...]:
    """Every ``--tee`` backend of the installed platforms: the shipped ones (in
    :class:`TeeBackend` order) first, then the others by name (no platform constructed)."""
    named = {b for backends in installed_launcher_backends().values() for b in backends}
    shipped = tuple(b.value for b in TeeBackend if b.value in named)
    return shipped + tuple(sorted(named - set(shipped)))


def check_tee(tee: str) -> str:
    """The backend (a shipped :class:`TeeBackend` or one an installed platform brings), or an
    error that says which are installed."""
    known = installed_backends()
    if tee not in known:
        raise ConfigError(
            f"unknown TEE backend {tee[:40]!r}", hint=f"use one of {', '.join(known)}"
        )
    return tee


def build_launcher(backend: str, **options: Any) -> Launcher:
    """The launcher of ``backend`` (a shipped :class:`TeeBackend` or one an installed platform
    names), built by the one platform that names it."""
    return platform_for_backend(backend).launcher(backend, **options)


def gpu_machine(accelerator: str) -> tuple[str, int]:
    """``(machine type, GPU count)`` of a confidential GPU VM for ``--accelerator``;
    :class:`LaunchSettingsError` for an accelerator sealbench does not launch."""
    return TeeBackend.CONFIDENTIAL_SPACE.platform.gpu_machine(accelerator)


def mock_process_launcher(control_url: str, *, debug: bool = False) -> Launcher:
    """``--tee mock``: the enclave as a child process, its tokens signed by the running mock
    verifier whose control endpoint is ``control_url``."""
    return TeeBackend.MOCK.launcher(control_url=control_url, debug=debug)


def docker_launcher(engine: Any, control_url: str, image: str, *, debug: bool = False) -> Launcher:
    """``--tee docker``: the evaluation image ``image`` on the Docker engine ``engine``, attested
    by the running mock verifier whose control endpoint is ``control_url``."""
    return TeeBackend.DOCKER.launcher(
        engine=engine, control_url=control_url, image=image, debug=debug
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
    return TeeBackend.CONFIDENTIAL_SPACE.launcher(
        project=project, zone=zone, service_account=service_account,
        image_reference=image_reference, tee=tee, debug=debug, accelerator=accelerator,
        keep_vm=keep_vm, credentials=credentials, api_endpoint=api_endpoint,
        result_store=result_store, poll_interval=poll_interval,
    )
