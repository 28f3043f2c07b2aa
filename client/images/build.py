"""Build the evaluation image (``docker/Dockerfile``) with no registry in reach, and report the
digest that benchmarks, key owners' policies and the attestation claims name.

Three steps, each usable on its own:

1. :func:`ensure_local_base` — the base image. Offline it is made on this machine: Debian's
   ``debootstrap --variant=minbase`` of bookworm with python3 (3.11) and its venv module, packed
   with ``tar`` and imported as ``sealbench-base:bookworm``. It is made once and reused; so is
   the **build image** ``sealbench-build:bookworm``, the same plus binutils, which runs only the
   Dockerfile's build stage (it strips the native libraries; it is not in the image).
2. :func:`prepare_build_context` — a build context of the Dockerfile and ``wheels/``: sealbench
   built from a copy of the sources (nothing is written into the checkout) plus every wheel of
   its ``enclave`` and ``gcp-enclave`` extras, from the local pip configuration.
3. :func:`build_image` — ``docker build`` through the Docker SDK with the launch-policy label
   computed from :data:`sealbench.contract.spec.ENV_OVERRIDE_NAMES` and the label
   :data:`~sealbench.client.images.source.LABEL_SOURCE_DIGEST` naming the checkout's source
   manifest (:mod:`sealbench.client.images.source`), then :func:`normalize_image`; then
   :func:`build_aggregator_image` derives the benchmark's **aggregator image** from it (issue 27:
   the same layers, its own command ``python -m sealbench.enclave aggregate`` and launch policy
   :data:`sealbench.contract.pool.AGGREGATE_ENV_NAMES`; configuration only, no new layer).

What "digest" means here: an image built locally has no registry manifest, so its digest is the
engine's image ID, ``sha256:`` of the image configuration. The classic builder writes the time
of every step into that configuration, so :func:`normalize_image` re-registers the built layers
under :func:`canonical_config` (layer content digests + runtime settings, times fixed at
:data:`SOURCE_DATE_EPOCH`): unchanged sources give the same digest with or without the build
cache. The Docker launcher attests exactly that value as ``submods.container.image_digest``. A
pushed image is named by its registry manifest digest instead; see ``docs/image.md``.

Errors (all :class:`sealbench.client.errors.ClientError`, printed by the CLI with a hint)::

    ImageBuildError                 exit 1  a step of the build failed
    ├── EngineUnavailableError      exit 3  no Docker engine to talk to
    ├── BaseImageError              exit 1  debootstrap, tar or the import failed
    └── WheelhouseError             exit 1  pip could not build the wheelhouse
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

import docker
import docker.errors
from docker import DockerClient

from sealbench.client.errors import ClientError
from sealbench.client.images.source import (
    LABEL_SOURCE_DIGEST,
    check_built_from,
    source_digest,
    source_files,
)
from sealbench.contract.pool import AGGREGATE_ENV_NAMES
from sealbench.contract.spec import ENV_OVERRIDE_NAMES
from sealbench.crypto.digest import Sha256Digest, parse_digest

__all__ = [
    "ACCELERATORS",
    "AGGREGATOR_ENTRYPOINT",
    "AGGREGATOR_REPOSITORY",
    "AGGREGATOR_TITLE",
    "BASE_TAG",
    "BUILD_TAG",
    "DEBIAN_MIRROR",
    "ENGINE_TIMEOUT_S",
    "IMAGE_REPOSITORY",
    "LABEL_ACCELERATOR",
    "LABEL_ALLOW_ENV_OVERRIDE",
    "LABEL_LOG_REDIRECT",
    "LABEL_PLUGINS",
    "LABEL_SOURCE_DIGEST",
    "LABEL_TITLE",
    "NVIDIA_LIBRARY_PATH",
    "SOURCE_DATE_EPOCH",
    "Accelerator",
    "AcceleratorMismatchError",
    "BaseImageError",
    "EngineUnavailableError",
    "ImageBuildError",
    "ImageBuildResult",
    "ProgressFn",
    "WheelhouseError",
    "aggregator_allow_env_override_value",
    "aggregator_dockerfile",
    "allow_env_override_value",
    "build_aggregator_image",
    "build_arguments",
    "build_image",
    "canonical_config",
    "check_accelerator",
    "check_image_variant",
    "checkout_source",
    "connect_engine",
    "ensure_local_base",
    "find_source_root",
    "fresh_local_image",
    "image_accelerator",
    "image_labels",
    "local_aggregator_image",
    "local_image",
    "normalize_image",
    "plugin_wheels",
    "prepare_build_context",
    "variant_tag",
]

#: Called with each line of build output.
ProgressFn = Callable[[str], None]

BASE_TAG: Final = "sealbench-base:bookworm"
#: The build stage's image: the base's Debian and Python plus binutils (``strip``, ``readelf``).
BUILD_TAG: Final = "sealbench-build:bookworm"
IMAGE_REPOSITORY: Final = "sealbench-eval"
DEBIAN_MIRROR: Final = "http://deb.debian.org/debian"
#: 1980-01-01T00:00:00Z: every file the build writes gets this time (the earliest a zip holds).
SOURCE_DATE_EPOCH: Final = 315532800
LABEL_ALLOW_ENV_OVERRIDE: Final = "tee.launch_policy.allow_env_override"
LABEL_LOG_REDIRECT: Final = "tee.launch_policy.log_redirect"
LABEL_TITLE: Final = "org.opencontainers.image.title"
#: The aggregator image (issue 27): the evaluation image's layers under another configuration.
AGGREGATOR_REPOSITORY: Final = "sealbench-aggregate"
AGGREGATOR_TITLE: Final = "sealbench aggregator"
#: Its fixed command, an ENTRYPOINT (Confidential Space allows no command override).
AGGREGATOR_ENTRYPOINT: Final = ("python", "-m", "sealbench.enclave", "aggregate")
#: Seconds allowed for one call to the Docker engine's API (a build streams within it).
ENGINE_TIMEOUT_S: Final = 900
DEBOOTSTRAP_TIMEOUT_S: Final = 1200
WHEEL_TIMEOUT_S: Final = 900
_BASE_PACKAGES: Final = ("python3", "python3-venv", "ca-certificates")
_BUILD_PACKAGES: Final = (*_BASE_PACKAGES, "binutils")
#: What the image installs: the enclave and the Google Cloud libraries it uses (no Compute).
_EXTRAS: Final = "enclave,gcp-enclave"
#: The image's label listing the benchmark plug-ins installed beside sealbench.
LABEL_PLUGINS: Final = "org.sealbench.plugins"
#: Where the Confidential Space launcher mounts the NVIDIA driver's libraries in the container
#: (go-tpm-tools ``launcher``: ``/usr/local/nvidia/lib64``); the GPU image's ``LD_LIBRARY_PATH``.
NVIDIA_LIBRARY_PATH: Final = "/usr/local/nvidia/lib64"
#: The image's label naming its accelerator variant (``docker/Dockerfile``'s ``ACCELERATOR``).
LABEL_ACCELERATOR: Final = "sealbench.accelerator"
#: ``cpu``: onnxruntime; ``cuda``: onnxruntime-gpu (CUDAExecutionProvider on a confidential GPU).
Accelerator = Literal["cpu", "cuda"]
ACCELERATORS: Final[tuple[Accelerator, ...]] = ("cpu", "cuda")
#: ``<distribution>-<version>-<python>-<abi>-<platform>.whl`` (PEP 427 names, normalised).
_WHEEL_NAME: Final = re.compile(r"^([A-Za-z0-9_.]+)-([A-Za-z0-9_.!+]+)-[^/]+\.whl$")


class ImageBuildError(ClientError):
    default_hint = "read the build output above; 'sealbench image build -v' shows the details"


class EngineUnavailableError(ImageBuildError):
    exit_code = 3
    default_hint = (
        "start a Docker engine (for example 'apt-get install docker.io' then 'dockerd &' as "
        "root) or set DOCKER_HOST"
    )


class BaseImageError(ImageBuildError):
    default_hint = (
        "the offline base needs root, 'apt-get install debootstrap' and a reachable Debian "
        "mirror; or pass a base image that is already present"
    )


class WheelhouseError(ImageBuildError):
    default_hint = ("check that 'pip wheel .[enclave,gcp-enclave]' works in the checkout "
                    "(pip config, index)")


class AcceleratorMismatchError(ClientError):
    """The image's accelerator variant is not the one the run needs (a GPU run on a CPU image,
    a CPU run on a GPU image), or its label is not one this client knows."""

    exit_code = 2
    default_hint = (
        "build the matching variant with 'sealbench image build --accelerator cuda' (GPU runs) "
        "or without it (CPU runs), push it and name it with --image-reference (docs/image.md)"
    )


@dataclass(frozen=True)
class ImageBuildResult:
    """A built image. ``digest`` is what a benchmark names and what the Docker launcher
    attests: for a local build, the image ID (see the module docstring). For the evaluation
    image, ``aggregator`` is the aggregator image derived from it (None for the CUDA variant:
    the aggregator runs no model and is derived from the CPU image only); for the aggregator
    image, ``base_image`` is the evaluation image it was derived from."""

    image_id: Sha256Digest
    digest: Sha256Digest
    reference: str
    labels: Mapping[str, str]
    base_image: str
    aggregator: ImageBuildResult | None = None


def allow_env_override_value() -> str:
    """The value of the ``tee.launch_policy.allow_env_override`` label: the run-spec names."""
    return ",".join(ENV_OVERRIDE_NAMES)


def aggregator_allow_env_override_value() -> str:
    """The aggregator image's ``tee.launch_policy.allow_env_override``: its spec's names."""
    return ",".join(AGGREGATE_ENV_NAMES)


def variant_tag(tag: str, accelerator: Accelerator) -> str:
    """The tag of ``accelerator``'s variant: ``tag`` for the CPU image, ``tag-cuda`` for the
    GPU one (``latest-cuda``, ``<12 hex>-cuda``), so the two never overwrite each other."""
    return tag if accelerator == "cpu" else f"{tag}-{accelerator}"


def build_arguments(base_image: str, accelerator: Accelerator,
                    build_base: str | None = None) -> dict[str, str]:
    """The ``docker build`` arguments of ``docker/Dockerfile`` for ``accelerator``'s variant, the
    build stage on ``build_base`` (default ``base_image``: it must then have binutils);
    ``ValueError`` for an accelerator that is not one of :data:`ACCELERATORS`."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator must be one of {', '.join(ACCELERATORS)}, "
                         f"received {accelerator!r}")
    return {
        "BASE_IMAGE": base_image,
        "BUILD_IMAGE": build_base or base_image,
        "ALLOW_ENV_OVERRIDE": allow_env_override_value(),
        "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH),
        "ACCELERATOR": accelerator,
        # where the Confidential Space launcher mounts the NVIDIA driver's libraries on a GPU VM
        # (tee-install-gpu-driver); without it onnxruntime-gpu finds no libcuda and falls back
        # to the CPU
        "NVIDIA_LIBRARY_PATH": NVIDIA_LIBRARY_PATH if accelerator == "cuda" else "",
    }


def image_accelerator(reference: str, labels: Mapping[str, str]) -> Accelerator:
    """The variant the image ``reference`` with ``labels`` was built as: its
    :data:`LABEL_ACCELERATOR` label, ``cpu`` when absent (built before the label existed);
    :class:`AcceleratorMismatchError` for a value this client does not know."""
    value = labels.get(LABEL_ACCELERATOR, "cpu")
    if value not in ACCELERATORS:
        raise AcceleratorMismatchError(
            f"image {reference} has label {LABEL_ACCELERATOR}={value[:40]!r}, expected one of "
            f"{', '.join(ACCELERATORS)}")
    return value


def check_accelerator(reference: str, labels: Mapping[str, str], *, gpu: bool) -> None:
    """Refuse (:class:`AcceleratorMismatchError`) a GPU run (``gpu``: ``--accelerator``) on a
    CPU image and a CPU run on a GPU image: a CPU image would silently run on the VM's CPU, a
    GPU image on a machine without one would not find its CUDA libraries' device."""
    found = image_accelerator(reference, labels)
    if gpu and found != "cuda":
        raise AcceleratorMismatchError(
            f"a GPU run (--accelerator) needs the CUDA image, but {reference} is the {found} "
            f"variant ({LABEL_ACCELERATOR}={found})")
    if not gpu and found != "cpu":
        raise AcceleratorMismatchError(
            f"{reference} is the {found} variant ({LABEL_ACCELERATOR}={found}): run it with "
            "--accelerator on a confidential GPU VM, or name the CPU image for a CPU run")


def check_image_variant(client: DockerClient, reference: str, *, gpu: bool) -> bool:
    """:func:`check_accelerator` on the image ``reference`` when it is on the engine (a local
    build, or a pushed image built or pulled here); False when it is not, so nothing was
    checked (the run then reports which execution provider ran)."""
    labels = image_labels(client, reference)
    if labels is None:
        return False
    check_accelerator(reference, labels, gpu=gpu)
    return True


def image_labels(client: DockerClient, reference: str) -> Mapping[str, str] | None:
    """The labels of the image ``reference`` on the engine, or None when it is not there."""
    try:
        return MappingProxyType(dict(client.images.get(reference).labels or {}))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as exc:
        raise EngineUnavailableError(f"cannot inspect image {reference}: {exc}") from exc


def connect_engine(base_url: str | None = None, *, timeout: int = ENGINE_TIMEOUT_S) -> DockerClient:
    """A client of the Docker engine at ``base_url`` (default: ``DOCKER_HOST`` or the local
    socket), checked with a ping."""
    try:
        if base_url is None:
            client = docker.from_env(timeout=timeout)
        else:
            client = DockerClient(base_url=base_url, timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineUnavailableError(f"cannot reach a Docker engine: {exc}") from exc
    return client


def find_source_root(start: Path) -> Path:
    """The sealbench checkout at or above ``start`` (it holds ``docker/Dockerfile`` and the
    ``pyproject.toml`` of sealbench)."""
    for folder in (start.resolve(), *start.resolve().parents):
        pyproject = folder / "pyproject.toml"
        if (folder / "docker" / "Dockerfile").is_file() and pyproject.is_file():
            project = tomllib.loads(pyproject.read_text()).get("project", {})
            if project.get("name") == "sealbench":
                return folder
    raise ImageBuildError(
        f"no sealbench checkout (pyproject.toml + docker/Dockerfile) at or above {start}",
        hint="run the command inside a sealbench checkout or pass --source",
    )


def checkout_source() -> Path | None:
    """The checkout an image would be built from, as ``sealbench image build`` finds it: at or
    above the working directory, else at or above this module (an editable install). None when
    sealbench is installed without a checkout."""
    for start in (Path.cwd(), Path(__file__)):
        try:
            return find_source_root(start)
        except ImageBuildError:
            continue
    return None


def fresh_local_image(client: DockerClient, source: Path) -> ImageBuildResult:
    """:func:`local_image` ``sealbench-eval:latest``, or
    :class:`~sealbench.client.images.source.StaleImageError` unless it was built from the
    checkout ``source`` (its label records the digest of ``source``'s source manifest)."""
    found = local_image(client)
    check_built_from(f"{IMAGE_REPOSITORY}:latest", found.labels, source_digest(source))
    return found


def _present_image(client: DockerClient, wanted: str, what: str) -> Any:
    """The engine's image ``wanted`` (the SDK's ``Image``), or :class:`ImageBuildError` saying
    how to build ``what`` when it is absent."""
    try:
        return client.images.get(wanted)
    except docker.errors.ImageNotFound as exc:
        raise ImageBuildError(
            f"the {what} {wanted} is not present on the Docker engine",
            hint="build it with 'sealbench image build'",
        ) from exc
    except docker.errors.DockerException as exc:
        raise EngineUnavailableError(f"cannot inspect image {wanted}: {exc}") from exc


def local_image(client: DockerClient, reference: str | None = None) -> ImageBuildResult:
    """The evaluation image ``reference`` (default ``sealbench-eval:latest``) present on the
    engine, named as :func:`build_image` names it: ``sealbench-eval:<first 12 hex of the ID>``
    and its image ID as digest (``base_image`` is empty: the image does not record it)."""
    wanted = reference or f"{IMAGE_REPOSITORY}:latest"
    image = _present_image(client, wanted, "evaluation image")
    digest = parse_digest(str(image.id))
    labels = MappingProxyType(dict(image.labels or {}))
    tag = variant_tag(digest.removeprefix("sha256:")[:12], image_accelerator(wanted, labels))
    return _found(digest, f"{IMAGE_REPOSITORY}:{tag}", labels)


def _found(digest: Sha256Digest, reference: str, labels: Mapping[str, str]) -> ImageBuildResult:
    """A present image named as a build names it; ``base_image`` is empty: the image does not
    record it, only a build knows it."""
    return ImageBuildResult(image_id=digest, digest=digest, reference=reference, labels=labels,
                            base_image="")


def local_aggregator_image(client: DockerClient, reference: str | None = None) -> ImageBuildResult:
    """The aggregator image ``reference`` (default ``sealbench-aggregate:latest``) present on the
    engine, named as :func:`build_aggregator_image` names it (``sealbench-aggregate:<first 12
    hex of the ID>``, its image ID as digest); :class:`ImageBuildError` when the image there
    is not an aggregator image (another command or launch policy: the evaluation image, say)."""
    wanted = reference or f"{AGGREGATOR_REPOSITORY}:latest"
    image = _present_image(client, wanted, "aggregator image")
    labels = MappingProxyType(dict(image.labels or {}))
    entrypoint = tuple(image.attrs.get("Config", {}).get("Entrypoint") or ())
    allowed = labels.get(LABEL_ALLOW_ENV_OVERRIDE)
    if entrypoint != AGGREGATOR_ENTRYPOINT or allowed != aggregator_allow_env_override_value():
        raise ImageBuildError(
            f"image {wanted} is not an aggregator image: its command is "
            f"{' '.join(entrypoint)[:80]!r} and its {LABEL_ALLOW_ENV_OVERRIDE} "
            f"{(allowed or '')[:60]!r}; an aggregator's command is "
            f"{' '.join(AGGREGATOR_ENTRYPOINT)!r} and it allows exactly its spec's variables",
            hint=f"build it with 'sealbench image build' (tagged {AGGREGATOR_REPOSITORY}:latest)",
        )
    digest = parse_digest(str(image.id))
    return _found(digest, f"{AGGREGATOR_REPOSITORY}:{digest.removeprefix('sha256:')[:12]}",
                  labels)


# -- the base --------------------------------------------------------------------------------


def _image_id(client: DockerClient, reference: str) -> Sha256Digest | None:
    try:
        return Sha256Digest(str(client.images.get(reference).id))
    except docker.errors.ImageNotFound:
        return None


def _run(argv: list[str], timeout: float, error: type[ImageBuildError], **kw: Any) -> None:
    try:
        subprocess.run(argv, check=True, timeout=timeout, capture_output=True, **kw)  # noqa: S603
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()[-5:]
        raise error(f"{argv[0]} exited {exc.returncode}: {' | '.join(tail)}") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise error(f"{argv[0]} could not run: {exc}") from exc


def ensure_local_base(
    client: DockerClient,
    *,
    tag: str = BASE_TAG,
    mirror: str = DEBIAN_MIRROR,
    suite: str = "bookworm",
    work_dir: Path | None = None,
    on_progress: ProgressFn | None = None,
    packages: Sequence[str] = _BASE_PACKAGES,
) -> Sha256Digest:
    """The image ID of ``tag``, making it first (debootstrap + ``docker import``) if absent, with
    ``packages`` on top of minbase (the base's; :data:`BUILD_TAG` adds binutils)."""
    progress = on_progress or (lambda _line: None)
    existing = _image_id(client, tag)
    if existing is not None:
        progress(f"base image {tag} present ({existing[:19]}…), reused")
        return existing
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None or shutil.which("tar") is None:
        raise BaseImageError("debootstrap (and tar) are needed to make the offline base image")
    with tempfile.TemporaryDirectory(prefix="sealbench-base-", dir=work_dir) as tmp:
        rootfs, archive = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        progress(f"debootstrap {suite} (minbase + {', '.join(packages)}) from {mirror}")
        _run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(packages)}",
                suite,
                str(rootfs),
                mirror,
            ],
            DEBOOTSTRAP_TIMEOUT_S,
            BaseImageError,
        )
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        _run(
            ["tar", "--numeric-owner", "--sort=name", "-C", str(rootfs), "-cf", str(archive), "."],
            DEBOOTSTRAP_TIMEOUT_S,
            BaseImageError,
        )
        repository, _, version = tag.partition(":")
        progress(f"importing the base as {tag}")
        try:
            client.api.import_image_from_file(
                str(archive),
                repository=repository,
                tag=version or "latest",
                changes=["ENV LANG=C.UTF-8"],
            )
        except docker.errors.DockerException as exc:
            raise BaseImageError(f"docker import of the base failed: {exc}") from exc
    made = _image_id(client, tag)
    if made is None:
        raise BaseImageError(f"docker import reported success but {tag} is not present")
    return made


# -- the build context -----------------------------------------------------------------------


def _copy_sources(source: Path, dst: Path) -> None:
    """Copy exactly the files the source manifest covers (the image label names it)."""
    for rel, path in source_files(source):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def _clamp_mtimes(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            os.utime(Path(dirpath) / name, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
        os.utime(dirpath, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))


def plugin_wheels(
    plugins: Sequence[Path], wheels: Path, *, python: str = sys.executable
) -> tuple[str, ...]:
    """Put a wheel of each benchmark plug-in into ``wheels`` and return their requirements
    (``name==version``). A plug-in is a ``.whl`` file (copied) or a source folder with a
    ``pyproject.toml`` (a copy of it is built with ``pip wheel --no-deps``, so nothing is
    written into it). A plug-in's own dependencies must be sealbench's ``enclave``/``gcp``
    packages or be given as wheels here too: the image installs with no index."""
    requirements = []
    for plugin in plugins:
        if plugin.is_file() and plugin.suffix == ".whl":
            built = [wheels / plugin.name]
            shutil.copy2(plugin, built[0])
        elif (plugin / "pyproject.toml").is_file():
            with tempfile.TemporaryDirectory(prefix="sealbench-plugin-") as tmp:
                src = Path(tmp) / "src"
                shutil.copytree(plugin, src, ignore=shutil.ignore_patterns(
                    "build", "dist", "*.egg-info", "__pycache__", ".*"))
                out = Path(tmp) / "out"
                _run([python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                      "--no-deps", "--wheel-dir", str(out), str(src)], WHEEL_TIMEOUT_S,
                     WheelhouseError,
                     env={**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)})
                built = []
                for wheel in sorted(out.glob("*.whl")):
                    shutil.copy2(wheel, wheels / wheel.name)
                    built.append(wheels / wheel.name)
        else:
            raise WheelhouseError(f"benchmark plug-in {plugin} is neither a .whl file nor a "
                                  "folder with a pyproject.toml")
        if len(built) != 1 or not (match := _WHEEL_NAME.match(built[0].name)):
            raise WheelhouseError(f"benchmark plug-in {plugin} gave no single wheel "
                                  f"({[w.name for w in built]})")
        requirements.append(f"{match.group(1)}=={match.group(2)}")
    return tuple(requirements)


def prepare_build_context(
    source: Path,
    context: Path,
    *,
    python: str = sys.executable,
    plugins: Sequence[Path] = (),
) -> Path:
    """Write ``context/Dockerfile`` and ``context/wheels/`` (sealbench and every wheel of its
    ``enclave`` and ``gcp-enclave`` extras, built with ``python -m pip wheel``, and a wheel of each
    benchmark plug-in, :func:`plugin_wheels`; their requirements in ``context/plugins.txt``)
    and return ``context``."""
    wheels = context / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "docker" / "Dockerfile", context / "Dockerfile")
    with tempfile.TemporaryDirectory(prefix="sealbench-src-") as tmp:
        src = Path(tmp)
        _copy_sources(source, src)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
        _run(
            [
                python,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--disable-pip-version-check",
                "--wheel-dir",
                str(wheels),
                f"{src}[{_EXTRAS}]",
            ],
            WHEEL_TIMEOUT_S,
            WheelhouseError,
            env=env,
        )
    if not list(wheels.glob("sealbench-*.whl")):
        raise WheelhouseError("pip wheel finished without a sealbench wheel")
    requirements = plugin_wheels(plugins, wheels, python=python)
    (context / "plugins.txt").write_text("".join(f"{r}\n" for r in requirements))
    _clamp_mtimes(context)
    return context


# -- the normalized configuration ------------------------------------------------------------

_EPOCH_RFC3339: Final = "1980-01-01T00:00:00Z"
_RUNTIME_FIELDS: Final = (
    "User",
    "ExposedPorts",
    "Env",
    "Entrypoint",
    "Cmd",
    "Volumes",
    "WorkingDir",
    "Labels",
    "StopSignal",
)


def canonical_config(attrs: Mapping[str, Any], base_layers: int) -> bytes:
    """The image configuration the digest is taken over: the layers (by content digest) and
    the runtime settings of ``attrs`` (an engine's image inspection), with every creation time
    set to :data:`SOURCE_DATE_EPOCH` and nothing else (no build container ids, no builder
    history), as canonical JSON (sorted keys, no spaces)."""
    layers = list(attrs["RootFS"]["Layers"])
    runtime = {k: attrs["Config"][k] for k in _RUNTIME_FIELDS if attrs["Config"].get(k)}
    history = [
        {
            "created": _EPOCH_RFC3339,
            "created_by": "base image" if i < base_layers else "docker/Dockerfile",
        }
        for i in range(len(layers))
    ]
    config = {
        "architecture": attrs["Architecture"],
        "os": attrs["Os"],
        "created": _EPOCH_RFC3339,
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": layers},
        "history": history,
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _tar_member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), SOURCE_DATE_EPOCH, 0o644
    archive.addfile(info, io.BytesIO(data))


def normalize_image(client: DockerClient, image: str, tag: str, base_layers: int) -> Sha256Digest:
    """Load ``image``'s layers under :func:`canonical_config` as ``tag`` and return the new
    image ID. The builder stamps the time of each step into the configuration, so two builds
    of identical layers differ in ID; this one depends only on the layers and the runtime
    settings. Nothing is copied: the archive holds the configuration and a manifest, and the
    engine finds every layer already in its store."""
    attrs = client.images.get(image).attrs
    config = canonical_config(attrs, base_layers)
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [
        {
            "Config": config_name,
            "RepoTags": [tag],
            "Layers": [f"{d.removeprefix('sha256:')}/layer.tar" for d in attrs["RootFS"]["Layers"]],
        }
    ]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        _tar_member(archive, config_name, config)
        _tar_member(archive, "manifest.json", json.dumps(manifest).encode())
    loaded = client.images.load(buffer.getvalue())
    expected = "sha256:" + config_name.removesuffix(".json")
    if [str(i.id) for i in loaded] != [expected]:
        raise ImageBuildError(f"loading the normalized configuration gave {loaded}, not {expected}")
    return parse_digest(expected)


# -- the build ---------------------------------------------------------------------------------


def _stream(chunks: Iterator[dict[str, Any]], progress: ProgressFn) -> Sha256Digest | None:
    built: Sha256Digest | None = None
    for chunk in chunks:
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
            raise ImageBuildError(f"docker build failed: {str(detail).strip()}")
        for line in str(chunk.get("stream", "")).splitlines():
            if line.strip():
                progress(line.rstrip())
        aux = chunk.get("aux")
        if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
            built = Sha256Digest(aux["ID"])
    return built


def build_image(
    client: DockerClient,
    source: Path,
    *,
    base_image: str | None = None,
    repository: str = IMAGE_REPOSITORY,
    no_cache: bool = False,
    work_dir: Path | None = None,
    on_progress: ProgressFn | None = None,
    plugins: Sequence[Path] = (),
    accelerator: Accelerator = "cpu",
    build_base: str | None = None,
) -> ImageBuildResult:
    """Build ``source/docker/Dockerfile`` on ``base_image`` (default: the offline base, made by
    :func:`ensure_local_base` when absent) and tag it ``repository:<first 12 hex of the ID>`` and
    ``repository:latest``. Unchanged inputs give the same image ID (see ``docs/image.md``).
    ``accelerator`` ``cuda`` builds the GPU variant (onnxruntime-gpu; its wheels must be in the
    wheelhouse), labelled :data:`LABEL_ACCELERATOR` ``cuda`` and tagged with :func:`variant_tag`
    (``latest-cuda``, ``<12 hex>-cuda``): another image, with its own digest.
    The image's label :data:`LABEL_SOURCE_DIGEST` records the digest of ``source``'s source
    manifest, so that a later command can tell whether the image was built from a checkout.
    ``plugins`` (wheels or source folders of third-party benchmark plug-ins) are installed
    beside sealbench, so the image digest covers them; label :data:`LABEL_PLUGINS` lists them.
    The Dockerfile's build stage runs on ``build_base``: by default :data:`BUILD_TAG` (made by
    :func:`ensure_local_base` when absent) with the offline base, ``base_image`` itself with a
    given one (which then needs binutils)."""
    progress = on_progress or (lambda _line: None)
    latest = variant_tag("latest", accelerator)
    sources = source_digest(source)
    if base_image is None:
        ensure_local_base(client, work_dir=work_dir, on_progress=progress)
        base_image = BASE_TAG
        if build_base is None:
            ensure_local_base(client, tag=BUILD_TAG, work_dir=work_dir, on_progress=progress,
                              packages=_BUILD_PACKAGES)
            build_base = BUILD_TAG
    elif _image_id(client, base_image) is None:
        raise ImageBuildError(
            f"base image {base_image} is not present and no registry is used",
            hint=f"'docker pull {base_image}' where a registry is reachable, or omit the base",
        )
    with tempfile.TemporaryDirectory(prefix="sealbench-context-", dir=work_dir) as tmp:
        progress(f"building the wheelhouse (sealbench[{_EXTRAS}])")
        context = prepare_build_context(source, Path(tmp), plugins=plugins)
        installed = (context / "plugins.txt").read_text().split()
        build_labels: dict[str, str] = {LABEL_SOURCE_DIGEST: sources}
        if installed:
            build_labels[LABEL_PLUGINS] = " ".join(installed)
        progress(f"docker build on {base_image} ({accelerator})")
        try:
            chunks = client.api.build(
                path=str(context),
                dockerfile="Dockerfile",
                tag=f"{repository}:{latest}",
                buildargs=build_arguments(base_image, accelerator, build_base),
                labels=build_labels,
                nocache=no_cache,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            )
            built = _stream(chunks, progress)
            raw = client.images.get(built or f"{repository}:{latest}")
            base_layers = len(client.images.get(base_image).attrs["RootFS"]["Layers"])
            image_id = normalize_image(client, str(raw.id), f"{repository}:{latest}",
                                       base_layers)
            image = client.images.get(image_id)
        except docker.errors.DockerException as exc:
            raise ImageBuildError(f"docker build failed: {exc}") from exc
    reference = f"{repository}:{variant_tag(image_id.removeprefix('sha256:')[:12], accelerator)}"
    labels = MappingProxyType(dict(image.labels or {}))
    if image_accelerator(reference, labels) != accelerator:  # a Dockerfile without the ARG
        raise ImageBuildError(f"the built image is labelled {LABEL_ACCELERATOR}="
                              f"{labels.get(LABEL_ACCELERATOR)!r}, expected {accelerator!r}")
    image.tag(repository, tag=reference.rpartition(":")[2])
    progress(f"built {reference} {image_id}")
    aggregator = None
    if accelerator == "cpu":
        aggregator = build_aggregator_image(client, image_id, on_progress=progress)
    else:
        progress(f"no aggregator image for the {accelerator} variant: it runs no model, so it "
                 "is derived from the CPU image ('sealbench image build' builds both)")
    return ImageBuildResult(
        image_id=image_id,
        digest=image_id,
        reference=reference,
        labels=labels,
        base_image=base_image,
        aggregator=aggregator,
    )


# -- the aggregator image ----------------------------------------------------------------------

#: What ``FROM`` accepts here: an image ID or a reference (no space, no newline, no quote).
_IMAGE_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")


def aggregator_dockerfile(evaluation: str) -> str:
    """The aggregator image's Dockerfile: ``FROM`` the evaluation image ``evaluation`` (an image
    ID here; ``repo@sha256:…`` for a pushed one), its own launch policy
    (:func:`aggregator_allow_env_override_value`), title and command. Configuration only: it
    adds no layer, so the aggregator runs exactly the evaluation image's files."""
    if not _IMAGE_NAME.match(evaluation):
        raise ValueError(f"not an image ID or reference: {evaluation[:80]!r}")
    return (
        f"FROM {evaluation}\n"
        f'LABEL {LABEL_ALLOW_ENV_OVERRIDE}="{aggregator_allow_env_override_value()}" \\\n'
        f'      {LABEL_TITLE}="{AGGREGATOR_TITLE}"\n'
        f"ENTRYPOINT {json.dumps(list(AGGREGATOR_ENTRYPOINT))}\n"
    )


def _base_layers(image: Any) -> int:
    """How many of a normalized image's layers are its base's (:func:`canonical_config` names
    them ``base image`` in the history)."""
    count = sum(1 for entry in image.history() if entry.get("CreatedBy") == "base image")
    if not count:
        raise ImageBuildError(
            f"image {image.id} was not built by 'sealbench image build' (no normalized history)",
            hint="derive the aggregator from an evaluation image built here")
    return count


def build_aggregator_image(
    client: DockerClient,
    evaluation: str,
    *,
    repository: str = AGGREGATOR_REPOSITORY,
    on_progress: ProgressFn | None = None,
) -> ImageBuildResult:
    """Derive the aggregator image from the CPU evaluation image ``evaluation`` (on the engine)
    with :func:`aggregator_dockerfile`, normalize it (:func:`normalize_image`: its digest then
    depends only on the evaluation image's layers and the aggregator's configuration, so the
    same sources give the same aggregator digest) and tag it ``repository:latest`` and
    ``repository:<first 12 hex of the ID>``. A CUDA evaluation image is refused: the aggregator
    runs no model."""
    progress = on_progress or (lambda _line: None)
    source = _present_image(client, evaluation, "evaluation image")
    found = image_accelerator(evaluation, MappingProxyType(dict(source.labels or {})))
    if found != "cpu":
        raise ImageBuildError(
            f"the aggregator is derived from the CPU evaluation image, not {evaluation} ({found})",
            hint="build the CPU image with 'sealbench image build'")
    base_layers = _base_layers(source)
    dockerfile = aggregator_dockerfile(str(source.id)).encode()
    progress(f"deriving the aggregator image from {evaluation}")
    try:
        chunks = client.api.build(fileobj=io.BytesIO(dockerfile), tag=f"{repository}:latest",
                                  rm=True, forcerm=True, pull=False, decode=True)
        built = _stream(chunks, progress)
        raw = client.images.get(built or f"{repository}:latest")
        image_id = normalize_image(client, str(raw.id), f"{repository}:latest", base_layers)
        image = client.images.get(image_id)
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"docker build of the aggregator failed: {exc}") from exc
    tag = image_id.removeprefix("sha256:")[:12]
    image.tag(repository, tag=tag)
    progress(f"built {repository}:{tag} {image_id}")
    return ImageBuildResult(
        image_id=image_id,
        digest=image_id,
        reference=f"{repository}:{tag}",
        labels=MappingProxyType(dict(image.labels or {})),
        base_image=evaluation,
    )
