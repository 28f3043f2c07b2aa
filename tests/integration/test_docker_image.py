"""The evaluation image as Confidential Space sees it: its launch-policy labels let the operator
set exactly the run-spec variables and nothing else, it runs the enclave as a non-root user with
no bytecode to go stale, it records the source manifest of the checkout it was built from, and
rebuilding unchanged sources gives the same digest.

Needs a Docker engine: see ``conftest.py`` (it installs and starts one as root on Debian, and
fails loudly where it cannot)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sealbench.client.runs.image_build import (
    BASE_TAG,
    LABEL_ALLOW_ENV_OVERRIDE,
    LABEL_LOG_REDIRECT,
    LABEL_SOURCE_DIGEST,
    ImageBuildError,
    build_image,
    canonical_config,
    find_source_root,
    fresh_local_image,
)
from sealbench.client.runs.image_source import source_digest
from sealbench.contract.spec import ENV_OVERRIDE_NAMES

if TYPE_CHECKING:
    from docker import DockerClient

    from sealbench.client.runs.image_build import ImageBuildResult

pytestmark = pytest.mark.slow


def test_allow_env_override_label_is_exactly_the_run_spec(
    evaluation_image: ImageBuildResult,
) -> None:
    names = evaluation_image.labels[LABEL_ALLOW_ENV_OVERRIDE].split(",")
    assert tuple(names) == ENV_OVERRIDE_NAMES


def test_image_records_the_source_manifest_of_its_checkout(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, source_snapshot: Path
) -> None:
    assert evaluation_image.labels[LABEL_SOURCE_DIGEST] == source_digest(source_snapshot)
    assert fresh_local_image(docker_engine, source_snapshot).digest == evaluation_image.digest


def test_operator_cannot_override_the_command(evaluation_image: ImageBuildResult) -> None:
    assert not any("allow_cmd_override" in label for label in evaluation_image.labels)
    assert evaluation_image.labels[LABEL_LOG_REDIRECT] == "always"


def test_image_runs_the_enclave_as_non_root_without_bytecode(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult
) -> None:
    config = docker_engine.images.get(evaluation_image.image_id).attrs["Config"]
    assert config["Entrypoint"] == ["python", "-m", "sealbench.enclave"]
    assert config["User"] == "10001:10001"
    assert not config.get("Cmd")
    probe = (
        "import os, pathlib, sys, sealbench.enclave, onnxruntime, google.cloud.kms;"
        "pyc = [p for p in pathlib.Path(sys.prefix).rglob('*.pyc')];"
        "print(os.getuid(), sys.prefix, len(pyc), sys.version_info[:2])"
    )
    out = docker_engine.containers.run(
        evaluation_image.image_id,
        entrypoint=["python", "-c", probe],
        read_only=True,
        network_mode="none",
        remove=True,
    )
    uid, prefix, pyc, version = out.decode().strip().split(" ", 3)
    assert (uid, prefix, pyc, version) == ("10001", "/opt/sealbench", "0", "(3, 11)")


def test_image_digest_is_the_engine_image_id(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult
) -> None:
    image = docker_engine.images.get(evaluation_image.reference)
    assert evaluation_image.digest == evaluation_image.image_id == image.id
    assert evaluation_image.base_image == BASE_TAG


def test_rebuild_of_unchanged_sources_gives_the_same_digest(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, source_snapshot: Path
) -> None:
    again = build_image(docker_engine, source_snapshot)
    assert again.digest == evaluation_image.digest


def test_no_cache_rebuild_gives_the_same_digest(
    docker_engine: DockerClient, evaluation_image: ImageBuildResult, source_snapshot: Path
) -> None:
    """Every step runs again (new build containers, new times); the layers come out
    byte-identical and the normalized configuration, hence the digest, is the same."""
    fresh = build_image(docker_engine, source_snapshot, no_cache=True)
    assert fresh.digest == evaluation_image.digest
    layers = docker_engine.images.get(fresh.image_id).attrs["RootFS"]["Layers"]
    assert len(layers) == 2  # the base and the one layer sealbench adds


def _inspection(**config: object) -> dict[str, Any]:
    return {
        "Architecture": "amd64",
        "Os": "linux",
        "Created": "2026-12-02T10:00:00.123Z",
        "Container": "0123abcd",
        "RootFS": {"Type": "layers", "Layers": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]},
        "Config": {"Hostname": "0123abcd", "User": "10001:10001", "Labels": {"k": "v"}, **config},
    }


def test_digest_ignores_build_times_and_containers_but_not_settings() -> None:
    base = canonical_config(_inspection(), base_layers=1)
    later = _inspection()
    later.update(Created="2027-01-01T00:00:00Z", Container="ffff")
    later["Config"]["Hostname"] = "ffff"
    assert canonical_config(later, base_layers=1) == base
    assert canonical_config(_inspection(User="0:0"), base_layers=1) != base
    assert canonical_config(_inspection(Labels={"k": "w"}), base_layers=1) != base
    swapped = _inspection()
    swapped["RootFS"]["Layers"].reverse()
    assert canonical_config(swapped, base_layers=1) != base


def test_source_root_is_found_from_inside_the_checkout(source_snapshot: Path) -> None:
    assert find_source_root(source_snapshot / "client" / "launchers") == source_snapshot.resolve()
    with pytest.raises(ImageBuildError, match="no sealbench checkout"):
        find_source_root(source_snapshot.parent)
