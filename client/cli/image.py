"""``sealbench image build``: the evaluation image (docker/Dockerfile) and the aggregator image
derived from it (issue 27), built locally. The launchers behind ``sealbench run --tee`` are the
library's (:mod:`sealbench.client.runs.launchers.for_profile`).

Docker-dependent modules are imported only when the command runs: without the ``docker`` extra
the other commands work, and this one says to install ``sealbench[docker]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sealbench.client.cli.common import JsonOpt, emit_json, out, progress_bar
from sealbench.client.errors import ConfigError
from sealbench.client.images import pinned

__all__ = ["image_app", "image_build"]

image_app = typer.Typer(help="The evaluation image (docker/Dockerfile) and the aggregator image "
                        "derived from it: build them locally.")

def _default_source() -> Path:
    image_module = pinned.docker_image_module()
    try:
        return Path(image_module.find_source_root(Path.cwd()))
    except image_module.ImageBuildError:
        return Path(image_module.find_source_root(Path(__file__)))


@image_app.command("build")
def image_build(
    base_image: Annotated[
        str | None,
        typer.Option(help="base image already on the engine (default: the offline Debian base)"),
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="rebuild every step")] = False,
    source: Annotated[
        Path | None, typer.Option(help="sealbench checkout to build from (default: found)")
    ] = None,
    accelerator: Annotated[
        str, typer.Option(help="cpu (onnxruntime) or cuda (onnxruntime-gpu, for runs with "
                          "--accelerator on a confidential GPU; tagged -cuda, its own digest)")
    ] = "cpu",
    json_out: JsonOpt = False,
) -> Any:
    """Build the evaluation image with the local Docker engine, then the aggregator image
    derived from it (the same layers; its command is 'python -m sealbench.enclave aggregate'
    and its launch policy the aggregator's; CPU only: it runs no model), and print each one's
    reference and digest (the image ID: what a Docker-backed benchmark pins, with
    --aggregator-digest for the aggregator, and the launcher attests)."""
    if accelerator not in ("cpu", "cuda"):
        raise ConfigError(f"--accelerator must be cpu or cuda, not {accelerator!r}")
    image_module = pinned.docker_image_module()
    root = image_module.find_source_root(source) if source else _default_source()
    engine = image_module.connect_engine()
    with progress_bar(transient=True) as bar:
        task = bar.add_task("building the evaluation image", total=None)

        def show(line: str) -> None:
            bar.console.print(line, markup=False, highlight=False)
            bar.update(task, description=line[:60])

        built = image_module.build_image(
            engine, root, base_image=base_image, no_cache=no_cache, on_progress=show,
            accelerator=accelerator,
        )
    aggregator = built.aggregator
    if json_out:
        emit_json({"reference": built.reference, "digest": built.digest,
                   "labels": dict(built.labels), "base_image": built.base_image,
                   "aggregator_reference": aggregator.reference if aggregator else None,
                   "aggregator_digest": aggregator.digest if aggregator else None})
    else:
        out().print(f"image {built.reference}\ndigest {built.digest}")
        if aggregator is not None:
            out().print(f"aggregator {aggregator.reference}\naggregator digest "
                        f"{aggregator.digest}")
        else:
            out().print(f"aggregator: none for --accelerator {accelerator} (it runs no model; "
                        "'sealbench image build' derives it from the CPU image)")
    return built


