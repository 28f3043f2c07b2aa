"""The GPU variant of the evaluation image (issue 18), without Docker: ``build_image`` passes
``ACCELERATOR`` to ``docker/Dockerfile`` and tags the CUDA image ``-cuda`` (a fake engine
records the build calls; only the CPU image gets an aggregator image derived from it), and a
run is refused on the wrong variant: a GPU run on the CPU image, a CPU run on the CUDA image, an
image whose label this client does not know."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from sealbench.client.images import build as image_module
from sealbench.client.images.build import (
    LABEL_ACCELERATOR,
    AcceleratorMismatchError,
    build_arguments,
    build_image,
    check_accelerator,
    check_image_variant,
    local_image,
    variant_tag,
)
from sealbench.crypto.digest import sha256_digest

ROOT = Path(__file__).resolve().parents[3]
BASE = "sealbench-base:bookworm"


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str]
    tags: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=lambda: {"RootFS": {"Layers": ["l1"]}})

    def tag(self, repository: str, tag: str) -> None:
        self.tags.append(f"{repository}:{tag}")

    def history(self) -> list[dict[str, Any]]:
        return [{"CreatedBy": "docker/Dockerfile"}, {"CreatedBy": "base image"}]


@dataclass
class FakeImages:
    tagged: dict[str, FakeImage] = field(default_factory=dict)

    def get(self, reference: str) -> FakeImage:
        if reference not in self.tagged:
            raise docker.errors.ImageNotFound(f"no such image: {reference}")
        return self.tagged[reference]


@dataclass
class FakeApi:
    """``docker build`` as the Dockerfile does it: the image is labelled with ACCELERATOR."""

    images: FakeImages
    calls: list[dict[str, Any]] = field(default_factory=list)

    def build(self, **kw: Any) -> Iterator[dict[str, Any]]:
        self.calls.append(kw)
        if "fileobj" in kw:  # the aggregator's Dockerfile: FROM the evaluation image, 2 labels
            dockerfile = kw["fileobj"].getvalue().decode()
            parent = self.images.get(dockerfile.split()[1])
            entrypoint = json.loads(dockerfile.partition("ENTRYPOINT ")[2])
            built = FakeImage(str(sha256_digest(dockerfile.encode())), {
                **parent.labels, **dict(re.findall(r'([a-z._]+)="([^"]*)"', dockerfile))},
                attrs={**parent.attrs, "Config": {"Entrypoint": entrypoint}})
            self.images.tagged[built.id] = self.images.tagged[kw["tag"]] = built
            return iter([{"aux": {"ID": built.id}}])
        accelerator = kw["buildargs"].get("ACCELERATOR", "cpu")
        built = FakeImage(str(sha256_digest(accelerator.encode())),
                          {**kw["labels"], LABEL_ACCELERATOR: accelerator})
        self.images.tagged[built.id] = self.images.tagged[kw["tag"]] = built
        return iter([{"stream": "Step 1/1"}, {"aux": {"ID": built.id}}])


@dataclass
class FakeEngine:
    images: FakeImages = field(default_factory=FakeImages)
    api: FakeApi = field(init=False)

    def __post_init__(self) -> None:
        self.api = FakeApi(self.images)
        self.images.tagged[BASE] = FakeImage(str(sha256_digest(b"base")), {})


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    return fake_engine(monkeypatch)


def fake_engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    """A fake engine; the wheelhouse and the re-registration are not what is tested here."""

    def context(source: Path, dst: Path, *, plugins: Any = ()) -> Path:
        (dst / "plugins.txt").write_text("")
        return dst

    monkeypatch.setattr(image_module, "prepare_build_context", context)
    monkeypatch.setattr(image_module, "normalize_image",
                        lambda client, image, tag, base_layers: image)
    monkeypatch.setattr(image_module, "source_digest", lambda source: sha256_digest(b"src"))
    return FakeEngine()


@pytest.mark.parametrize("accelerator", ["cpu", "cuda"])
def test_build_passes_the_accelerator_and_tags_the_cuda_image_apart(
    engine: FakeEngine, tmp_path: Path, accelerator: Any
) -> None:
    built = build_image(engine, ROOT, base_image=BASE, work_dir=tmp_path,  # type: ignore[arg-type]
                        accelerator=accelerator)
    call = engine.api.calls[0]
    assert call["buildargs"]["ACCELERATOR"] == accelerator
    assert call["buildargs"]["BASE_IMAGE"] == BASE
    suffix = "-cuda" if accelerator == "cuda" else ""
    assert call["tag"] == f"sealbench-eval:latest{suffix}"
    short = built.digest.removeprefix("sha256:")[:12]
    assert built.reference == f"sealbench-eval:{short}{suffix}"
    assert engine.images.get(built.digest).tags == [built.reference]
    assert built.labels[LABEL_ACCELERATOR] == accelerator
    # what 'image ls'-style lookups call it afterwards
    assert local_image(engine, call["tag"]).reference == built.reference  # type: ignore[arg-type]
    # the aggregator runs no model: it is derived from the CPU image only
    if accelerator == "cpu":
        assert built.aggregator is not None and built.aggregator.base_image == built.digest
        assert engine.api.calls[1]["tag"] == "sealbench-aggregate:latest"
    else:
        assert built.aggregator is None and len(engine.api.calls) == 1


def test_cpu_and_cuda_builds_have_distinct_digests_and_tags(
    engine: FakeEngine, tmp_path: Path
) -> None:
    cpu = build_image(engine, ROOT, base_image=BASE, work_dir=tmp_path)  # type: ignore[arg-type]
    cuda = build_image(engine, ROOT, base_image=BASE, work_dir=tmp_path,  # type: ignore[arg-type]
                       accelerator="cuda")
    assert cpu.digest != cuda.digest and cpu.reference != cuda.reference
    assert engine.images.get("sealbench-eval:latest").id == cpu.digest  # not overwritten


def test_a_build_whose_label_does_not_match_is_refused(
    engine: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dockerfile that ignores ACCELERATOR (an old checkout) must not pass for the GPU image."""
    real = engine.api.build

    def ignoring(**kw: Any) -> Iterator[dict[str, Any]]:
        return real(**{**kw, "buildargs": {**kw["buildargs"], "ACCELERATOR": "cpu"}})

    monkeypatch.setattr(engine.api, "build", ignoring)
    with pytest.raises(image_module.ImageBuildError, match="expected 'cuda'"):
        build_image(engine, ROOT, base_image=BASE, work_dir=tmp_path,  # type: ignore[arg-type]
                    accelerator="cuda")


def test_build_arguments_and_tags() -> None:
    assert build_arguments(BASE, "cuda")["ACCELERATOR"] == "cuda"
    # the GPU image finds the driver's libraries where the launcher mounts them; the CPU one
    # sets no library path
    assert build_arguments(BASE, "cuda")["NVIDIA_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert build_arguments(BASE, "cpu")["NVIDIA_LIBRARY_PATH"] == ""
    assert build_arguments(BASE, "cpu")["ALLOW_ENV_OVERRIDE"]
    with pytest.raises(ValueError, match="cpu, cuda"):
        build_arguments(BASE, "rocm")  # type: ignore[arg-type]
    assert variant_tag("latest", "cpu") == "latest"
    assert variant_tag("0123456789ab", "cuda") == "0123456789ab-cuda"


def test_dockerfile_declares_what_the_build_passes() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    for name in build_arguments(BASE, "cuda"):
        assert f"ARG {name}" in text
    assert f'{LABEL_ACCELERATOR}="${{ACCELERATOR}}"' in text


@pytest.mark.parametrize(("labels", "gpu", "refused"), [
    ({LABEL_ACCELERATOR: "cuda"}, True, None),
    ({LABEL_ACCELERATOR: "cpu"}, False, None),
    ({}, False, None),  # built before the label: the CPU image
    ({LABEL_ACCELERATOR: "cpu"}, True, "needs the CUDA image"),
    ({}, True, "needs the CUDA image"),
    ({LABEL_ACCELERATOR: "cuda"}, False, "is the cuda variant"),
    ({LABEL_ACCELERATOR: "rocm"}, True, "expected one of cpu, cuda"),
])
def test_a_run_on_the_wrong_variant_is_refused(
    labels: dict[str, str], gpu: bool, refused: str | None
) -> None:
    if refused is None:
        check_accelerator("repo/eval@sha256:x", labels, gpu=gpu)
        return
    with pytest.raises(AcceleratorMismatchError, match=refused) as caught:
        check_accelerator("repo/eval@sha256:x", labels, gpu=gpu)
    assert "repo/eval@sha256:x" in str(caught.value)
    assert "sealbench image build --accelerator cuda" in (caught.value.hint or "")


def test_variant_is_checked_only_when_the_image_is_on_the_engine() -> None:
    engine = FakeEngine()
    assert check_image_variant(engine, "repo/eval@sha256:absent", gpu=True) is False  # type: ignore[arg-type]
    engine.images.tagged["repo/eval@sha256:cpu"] = FakeImage("sha256:c", {LABEL_ACCELERATOR: "cpu"})
    assert check_image_variant(engine, "repo/eval@sha256:cpu", gpu=False) is True  # type: ignore[arg-type]
    with pytest.raises(AcceleratorMismatchError):
        check_image_variant(engine, "repo/eval@sha256:cpu", gpu=True)  # type: ignore[arg-type]
