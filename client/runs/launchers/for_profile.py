"""The launcher of a ``sealbench run --tee`` backend for a profile: the mock process, the local
evaluation image on Docker (attested by the mock TEE), and a Confidential Space VM (on the mock's
Compute stand-in for a mock profile, on Google Compute otherwise). What this module adds is the
profile's settings; which launcher, and for which platform, is
:mod:`sealbench.client.backends`'s (the backend maps to the installed platform
whose ``launcher_backends`` names it), and no launcher implementation is imported here.

Docker-dependent modules are imported only when a Docker backend is built: without the
``docker`` extra the other backends work, and these say to install ``sealbench[docker]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sealbench.client.assets import owner
from sealbench.client.backends import TeeBackend
from sealbench.client.errors import ConfigError, NotAvailableError
from sealbench.client.images import pinned
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile

#: The zone a mock profile's confidential VMs run in unless ``--zone`` says otherwise.
from sealbench.mocktee.constants import MOCK_ZONE
from sealbench.platforms.launcher import Launcher
from sealbench.platforms.storage import BlobStore

__all__ = [
    "MOCK_ZONE",
    "CsOptions",
    "aggregator_reference",
    "make_aggregator_launcher",
    "make_launcher",
    "mock_launcher",
    "owner_store_opener",
]

#: Seconds between two polls of a mock Confidential Space VM (a local process).
MOCK_POLL_S = 0.5


@dataclass(frozen=True)
class CsOptions:
    """``sealbench run --tee confidential-space`` options (None: the profile's default)."""

    project: str | None = None
    zone: str | None = None
    service_account: str | None = None
    image_reference: str | None = None
    tdx: bool = False
    keep_vm: bool = False
    debug: bool = False
    compute_endpoint: str | None = None
    accelerator: str | None = None


def mock_launcher(endpoints: Any, *, debug: bool = False) -> Launcher:
    """The mock backend's launcher: the enclave as a child process, tokens signed by the
    running mock verifier."""
    from sealbench.client.backends import mock_process_launcher

    return mock_process_launcher(endpoints.control, debug=debug)


def make_launcher(
    backend: str,
    *,
    profile: ResolvedProfile,
    client: RegistryClient,
    benchmark_id: int,
    endpoints: Any,
    mock_tee: Path | None,
    debug: bool,
    image: str | None,
    cs: CsOptions,
) -> Launcher:
    """The :class:`~sealbench.client.runs.launchers.Launcher` of ``backend`` for this profile (the
    platform it launches for is the installed one whose launchers include ``backend``)."""
    from sealbench.client.backends import platform_for_backend
    from sealbench.client.runs.launchers import LaunchError

    try:
        platform_for_backend(backend)
    except LaunchError as exc:
        raise ConfigError(str(exc), hint="install the platform that provides it") from exc
    if backend == TeeBackend.MOCK:
        return mock_launcher(endpoints, debug=debug)
    if backend == TeeBackend.DOCKER:
        return _docker_launcher(client, benchmark_id, endpoints, debug, image)
    if backend == TeeBackend.CONFIDENTIAL_SPACE:
        return _cs_launcher(profile, client, benchmark_id, endpoints, mock_tee, debug, cs)
    return _platform_launcher(backend, profile, client, benchmark_id, debug)


def _platform_launcher(
    backend: str, profile: ResolvedProfile, client: RegistryClient, benchmark_id: int,
    debug: bool,
) -> Launcher:
    """The launcher of a backend this version does not ship, built by the installed platform
    that names it from the platform-neutral options every such launcher takes
    (:meth:`~sealbench.platforms.platform.Platform.launcher`): the benchmark's image, the
    profile's account settings on that platform, and ``debug``."""
    from sealbench.client.backends import (
        LaunchSettingsError,
        build_launcher,
        platform_for_backend,
    )

    benchmark = client.get_benchmark(benchmark_id)
    account = profile.profile.account
    platform = platform_for_backend(backend).name
    settings = dict(account.settings) if account and account.platform == platform else {}
    try:
        return build_launcher(
            backend, image_reference=benchmark.image_reference,
            image_digest=benchmark.image_digest, settings=settings, debug=debug,
        )
    except LaunchSettingsError as exc:
        raise ConfigError(str(exc), hint=exc.hint) from exc


def _docker_launcher(
    client: RegistryClient, benchmark_id: int, endpoints: Any, debug: bool, image: str | None
) -> Launcher:
    image_module = pinned.docker_image_module()
    from sealbench.client.backends import docker_launcher
    from sealbench.client.runs.launchers import LaunchError

    # By default the very image the benchmark pins (a local build's digest is its image ID).
    wanted = image or client.get_benchmark(benchmark_id).image_digest
    engine = image_module.connect_engine()
    image_module.check_image_variant(engine, wanted, gpu=False)  # Docker runs on the CPU
    try:
        return docker_launcher(engine, endpoints.control, wanted, debug=debug)
    except LaunchError as exc:
        raise ConfigError(
            str(exc),
            hint="build it with 'sealbench image build' (a benchmark created with --tee docker "
            "pins the image then present), or pass --image REF",
        ) from exc


def _check_variant_if_local(reference: str, *, gpu: bool) -> None:
    """Refuse a GPU run on the CPU image and a CPU run on the CUDA image when the image is on
    this machine's Docker engine (built here before its push); without the Docker SDK, an
    engine or the image here, nothing can be read before the VM starts."""
    try:
        image_module = pinned.docker_image_module()
    except NotAvailableError:
        return
    try:
        engine = image_module.connect_engine(timeout=10)
        image_module.check_image_variant(engine, reference, gpu=gpu)
    except image_module.EngineUnavailableError:
        return


def _cs_launcher(
    profile: ResolvedProfile,
    client: RegistryClient,
    benchmark_id: int,
    endpoints: Any,
    mock_tee: Path | None,
    debug: bool,
    cs: CsOptions,
) -> Launcher:
    from sealbench.client.backends import (
        LaunchSettingsError,
        confidential_space_launcher,
    )

    credentials: Any = None
    cloud: Any = None
    project, zone, account = cs.project, cs.zone, cs.service_account
    api_endpoint = cs.compute_endpoint
    if endpoints is not None:  # a mock profile: the mock's Compute stand-in, its owner account
        cloud = owner.owner_cloud(profile, client, mock_tee)
        credentials = cloud.credentials()
        project = project or cloud.project_id
        zone = zone or MOCK_ZONE
        account = account or f"sealbench-runner@{project}.iam.gserviceaccount.com"
        api_endpoint = api_endpoint or endpoints.compute
    elif profile.profile.gcp is not None:  # the profile's project, as the owner it acts as
        gcp = profile.profile.gcp
        cloud = owner.gcp_owner_cloud(gcp)
        credentials = cloud.credentials()
        project = project or gcp.project
        zone = zone or gcp.zone
        account = account or gcp.service_account
        api_endpoint = api_endpoint or gcp.api_endpoints.get("compute")
    reference = cs.image_reference or client.get_benchmark(benchmark_id).image_reference
    _check_variant_if_local(reference, gpu=cs.accelerator is not None)
    missing = [name for name, value in (("--project", project), ("--zone", zone),
                                        ("--service-account", account)) if not value]
    if missing:
        raise ConfigError(
            f"--tee confidential-space needs {', '.join(missing)}",
            hint="name your Google Cloud project, zone and the VM's service account "
            "(docs/gcp-setup.md)",
        )
    assert project and zone and account
    try:
        return confidential_space_launcher(
            project=project,
            zone=zone,
            service_account=account,
            image_reference=reference,
            tee="TDX" if cs.tdx or cs.accelerator else "SEV",  # confidential GPUs: TDX only
            debug=debug or cs.debug,
            keep_vm=cs.keep_vm,
            accelerator=cs.accelerator,
            credentials=credentials,
            api_endpoint=api_endpoint,
            result_store=None if cloud is None else _result_opener(cloud),
            # the mock's VMs run on this machine: watch them closely, so that their serial
            # output is read before it goes away with the stopped VM (Google's 10 s otherwise)
            poll_interval=MOCK_POLL_S if endpoints is not None else None,
        )
    except LaunchSettingsError as exc:
        raise ConfigError(str(exc), hint=exc.hint) from exc


def make_aggregator_launcher(
    backend: str,
    *,
    profile: ResolvedProfile,
    client: RegistryClient,
    benchmark: Any,
    endpoints: Any,
    mock_tee: Path | None,
    image: str | None,
    cs: CsOptions,
) -> Any:
    """The launcher of ``backend`` on the image of ``benchmark``'s aggregator (issue 27;
    :class:`~sealbench.client.runs.pool.AggregatorLauncher`): the mock's aggregator, the Docker
    image ``image`` (default: the benchmark's aggregator digest, an image ID on this engine), or
    a Confidential Space VM on ``cs.image_reference`` (default: the aggregator's digest in the
    repository of the benchmark's evaluation image). :class:`ConfigError` for a backend that
    does not run the aggregator."""
    digest = benchmark.aggregator_image_digest
    launcher: Any
    if backend == TeeBackend.MOCK:
        launcher = mock_launcher(endpoints)
    elif backend == TeeBackend.DOCKER:
        launcher = _docker_launcher(client, benchmark.id, endpoints, False, image or digest)
    elif backend == TeeBackend.CONFIDENTIAL_SPACE:
        reference = cs.image_reference or aggregator_reference(benchmark.image_reference, digest)
        launcher = _cs_launcher(profile, client, benchmark.id, endpoints, mock_tee, False,
                                replace(cs, image_reference=reference))
    else:
        launcher = None
    if not callable(getattr(launcher, "start_aggregator", None)):
        raise ConfigError(f"the {backend!r} backend does not run the aggregator image",
                          hint="pool with --tee mock, docker or confidential-space")
    return launcher


def aggregator_reference(evaluation_reference: str, digest: str) -> str:
    """``<repository>@<digest>``: the aggregator image pushed beside the evaluation image
    ``evaluation_reference`` (``repo@sha256:…``), as ``docs/aggregator.md`` says to push it."""
    repository, at, _ = evaluation_reference.partition("@")
    if not at or not repository:
        raise ConfigError(
            f"the benchmark's image {evaluation_reference!r} names no repository to find its "
            "aggregator in", hint="pass --image-reference REPO@sha256:… of the aggregator image")
    return f"{repository}@{digest}"


def owner_store_opener(
    profile: ResolvedProfile, client: RegistryClient, mock_tee: Path | None
) -> Callable[[str], tuple[BlobStore, str]]:
    """Opens a location as the profile's owner: a ``file://`` folder as is, a ``gs://`` one
    with the profile's cloud account (the mock's for a mock profile), made on first use."""
    from sealbench.platforms.storage import open_storage_uri

    clouds: list[Any] = []

    def open_location(uri: str) -> tuple[BlobStore, str]:
        if uri.startswith("file://"):
            return open_storage_uri(uri)
        if not clouds:
            if mock_tee or profile.profile.mock_tee:
                clouds.append(owner.owner_cloud(profile, client, mock_tee))
            elif profile.profile.gcp is not None:
                clouds.append(owner.gcp_owner_cloud(profile.profile.gcp))
            else:
                raise ConfigError(f"profile {profile.name} has no cloud account to reach {uri}",
                                  hint="add your Google Cloud settings to the profile")
        return _result_opener(clouds[0])(uri)  # type: ignore[no-any-return]

    return open_location


def _result_opener(cloud: Any) -> Any:
    """Opens a run's result URI as the profile's owner (a local ``file://`` folder as is): where
    a Confidential Space run's outcome is decided once its VM has stopped."""
    from sealbench.platforms.storage import open_storage_uri

    def open_result(uri: str) -> Any:
        return open_storage_uri(uri) if uri.startswith("file://") else cloud.blob_store(uri)

    return open_result
