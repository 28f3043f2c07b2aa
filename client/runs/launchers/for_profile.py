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
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from sealbench.client.assets import owner
from sealbench.client.assets.accounts import client_errors, owner_store, profile_account
from sealbench.client.backends import TeeBackend
from sealbench.client.errors import ConfigError, NotAvailableError
from sealbench.client.images import pinned
from sealbench.client.registry.api import RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile
from sealbench.platforms.account import AccountRoutes, LaunchDefaults
from sealbench.platforms.launcher import Launcher
from sealbench.platforms.owner_cloud import OwnerCloud
from sealbench.platforms.storage import BlobStore

__all__ = [
    "CsOptions",
    "aggregator_reference",
    "make_aggregator_launcher",
    "make_launcher",
    "mock_launcher",
    "owner_store_opener",
]


def launch_options(backend: str, **flags: object) -> BaseModel | None:
    """A command's launch flags (``--project``, ``--zone``, ``--tdx``, ...) as the launch
    options model of the platform whose launchers include ``backend`` (its
    :attr:`~sealbench.platforms.platform.LaunchPlatform.launch_options`): the flags its model
    names, those left unset out; None when its launchers take no options (the mock's, whose
    runs ignore them)."""
    from sealbench.client.backends import check_tee, platform_for_backend
    from sealbench.client.runs.launchers import LaunchError

    try:
        model = platform_for_backend(check_tee(backend)).launch_options
    except LaunchError as exc:
        raise ConfigError(str(exc), hint="install the platform that provides it") from exc
    if model is None:
        return None
    given = {k: v for k, v in flags.items() if k in model.model_fields and v not in (None, False)}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None


def CsOptions(**flags: object) -> BaseModel:  # noqa: N802 - the former class's name, kept for its callers
    """``--tee confidential-space`` launch options (:func:`launch_options`)."""
    found = launch_options(TeeBackend.CONFIDENTIAL_SPACE, **flags)
    assert found is not None  # Confidential Space declares them
    return found


def _control_url(endpoints: AccountRoutes | None) -> str:
    """The control endpoint of the launchers on this machine that ``endpoints`` (an account's
    routes, :func:`sealbench.client.runs.launch.local_routes`) name; :class:`ConfigError`
    when they name none."""
    if endpoints is None or endpoints.control_url is None:
        raise ConfigError("this backend's launchers run on this machine and need a running "
                          "mock TEE", hint="pass --mock-tee DIR (the state directory of "
                          "'sealbench mock-tee up')")
    return endpoints.control_url


def mock_launcher(endpoints: AccountRoutes | None, *, debug: bool = False) -> Launcher:
    """The mock backend's launcher: the enclave as a child process, tokens signed by the
    running mock verifier (reached through the account's control endpoint)."""
    from sealbench.client.backends import mock_process_launcher

    return mock_process_launcher(_control_url(endpoints), debug=debug)


def make_launcher(
    backend: str,
    *,
    profile: ResolvedProfile,
    client: RegistryClient,
    benchmark_id: int,
    endpoints: AccountRoutes | None,
    mock_tee: Path | None,
    debug: bool,
    image: str | None,
    cs: BaseModel | None,
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
        return _cs_launcher(profile, client, mock_tee, debug, cs, lambda: client.get_benchmark(
            benchmark_id).image_reference)
    return _platform_launcher(backend, profile, client, benchmark_id, debug, cs)


def _platform_launcher(
    backend: str, profile: ResolvedProfile, client: RegistryClient, benchmark_id: int,
    debug: bool, launch: BaseModel | None,
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
    account = profile_account(profile)
    platform = platform_for_backend(backend)
    model = platform.launch_options
    if launch is None and model is not None:
        launch = model()  # its defaults, typed
    try:
        return build_launcher(
            backend, image_reference=benchmark.image_reference,
            image_digest=benchmark.image_digest, debug=debug, launch=launch,
            account=account.settings if account and account.platform_name == platform.name
            else None,
        )
    except LaunchSettingsError as exc:
        raise ConfigError(str(exc), hint=exc.hint) from exc


def _docker_launcher(
    client: RegistryClient, benchmark_id: int, endpoints: AccountRoutes | None, debug: bool,
    image: str | None,
) -> Launcher:
    image_module = pinned.docker_image_module()
    from sealbench.client.backends import docker_launcher
    from sealbench.client.runs.launchers import LaunchError

    # By default the very image the benchmark pins (a local build's digest is its image ID).
    wanted = image or client.get_benchmark(benchmark_id).image_digest
    engine = image_module.connect_engine()
    image_module.check_image_variant(engine, wanted, gpu=False)  # Docker runs on the CPU
    try:
        return docker_launcher(engine, _control_url(endpoints), wanted, debug=debug)
    except LaunchError as exc:
        raise ConfigError(
            str(exc),
            hint="build it with 'sealbench image build' (a benchmark created with --tee docker "
            "pins the image then present), or pass --image REF",
        ) from exc


def _check_variant_if_local(reference: str, gpu: bool) -> None:
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
    mock_tee: Path | None,
    debug: bool,
    launch: BaseModel | None,
    image_reference: Callable[[], str],
) -> Launcher:
    """A Confidential Space VM, built by its platform from the command's ``launch`` options,
    the defaults of the account the command acts as (``--mock-tee``'s or the profile's: what its
    platform says of its VMs, acting with the account's owner cloud) and
    ``image_reference()`` (the benchmark's image unless the options name one)."""
    from sealbench.client.backends import LaunchSettingsError, build_launcher

    credentials: Any = None
    cloud: OwnerCloud | None = None
    defaults = LaunchDefaults()
    account = profile_account(profile, mock_tee)
    if account is not None:
        cloud = owner.owner_cloud(profile, client, mock_tee)
        found = account.launch_defaults(cloud)
        if found is None:  # its runs start no VM: the options alone decide
            cloud = None
        else:
            defaults = found
            with client_errors():
                credentials = cloud.credentials()
    try:
        return build_launcher(
            TeeBackend.CONFIDENTIAL_SPACE, launch=launch, defaults=defaults,
            image_reference=image_reference, check_image=_check_variant_if_local, debug=debug,
            credentials=credentials,
            result_store=None if cloud is None else _result_opener(cloud),
        )
    except LaunchSettingsError as exc:
        raise ConfigError(str(exc), hint=exc.hint) from exc


def make_aggregator_launcher(
    backend: str,
    *,
    profile: ResolvedProfile,
    client: RegistryClient,
    benchmark: Any,
    endpoints: AccountRoutes | None,
    mock_tee: Path | None,
    image: str | None,
    cs: BaseModel | None,
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
        launcher = _cs_launcher(profile, client, mock_tee, False, cs, lambda: (
            aggregator_reference(benchmark.image_reference, digest)))
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

    clouds: list[OwnerCloud] = []

    def open_location(uri: str) -> tuple[BlobStore, str]:
        if uri.startswith("file://"):
            return open_storage_uri(uri)
        if not clouds:
            if profile_account(profile, mock_tee) is None:
                raise ConfigError(f"profile {profile.name} has no cloud account to reach {uri}",
                                  hint="add your Google Cloud settings to the profile")
            clouds.append(owner.owner_cloud(profile, client, mock_tee))
        return _result_opener(clouds[0])(uri)

    return open_location


def _result_opener(cloud: OwnerCloud) -> Callable[[str], tuple[BlobStore, str]]:
    """Opens a run's result URI as the profile's owner (a local ``file://`` folder as is): where
    a Confidential Space run's outcome is decided once its VM has stopped."""
    from sealbench.platforms.storage import open_storage_uri

    as_owner = owner_store(cloud)

    def open_result(uri: str) -> tuple[BlobStore, str]:
        return open_storage_uri(uri) if uri.startswith("file://") else as_owner(uri)

    return open_result
