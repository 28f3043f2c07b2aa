"""``sealbench model export`` and ``sealbench model check``: a model owner's PyTorch model to a
checked ONNX file (a thin shell over :mod:`sealbench.client.assets.model_export`, imported only when
a
command runs: it needs numpy and ONNX Runtime, which the ``client`` extra alone lacks)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated

import typer

from sealbench.client.assets import prepare as assets
from sealbench.client.cli.common import JsonOpt, emit_json, out
from sealbench.client.errors import ConfigError

if TYPE_CHECKING:
    from sealbench.client.assets.model_export import ModelCheck

__all__ = ["model_check", "model_export_command"]

FactoryOpt = Annotated[
    str | None,
    typer.Option("--factory", help="the PyTorch model's class or builder, module.path:Callable "
                 "(e.g. monai.networks.nets:SegResNet)"),
]
KwargsOpt = Annotated[
    str | None, typer.Option("--kwargs", help="JSON object of the factory's arguments"),
]
WeightsOpt = Annotated[
    Path | None,
    typer.Option("--weights", help="state dict saved with torch.save (read weights-only)"),
]
DefinitionOpt = Annotated[
    str | None,
    typer.Option(help="the model contract of this definition: one an installed plug-in ships "
                 "('sealbench benchmark definition ls') or a definition JSON file (required)"),
]
AtolOpt = Annotated[float, typer.Option(help="parity tolerance on the outputs (absolute)")]


def _library() -> ModuleType:
    try:
        from sealbench.client.assets import model_export
    except ImportError as exc:
        raise ConfigError(f"model export and check need {exc.name or 'ONNX Runtime'}",
                          hint="pip install 'sealbench[enclave]' (and 'sealbench[train]' to "
                          "export)") from exc
    return model_export


def _render(check: ModelCheck, as_json: bool, what: str) -> None:
    if as_json:
        emit_json(check.to_json())
        return
    shapes = ", ".join("x".join(str(n) for n in s[2:]) for s in check.run_shapes)
    out().print(f"{what}: meets the model contract (opset {check.report.opset}, "
                f"{check.bytes} bytes); ran at spatial sizes {shapes}")
    if check.parity is not None:
        p = check.parity
        out().print(f"parity with PyTorch on the {p.input}: largest difference "
                    f"{p.max_abs_diff:.2e} (allowed {p.tolerance:g}), arg-max agrees on "
                    f"{p.argmax_agreement:.2%} of voxels", markup=False)


def model_export_command(
    output: Annotated[Path, typer.Argument(help="where to write the ONNX model")],
    factory: FactoryOpt = None,
    kwargs: KwargsOpt = None,
    weights: WeightsOpt = None,
    definition: DefinitionOpt = None,
    opset: Annotated[int, typer.Option(help="ONNX opset")] = 18,
    atol: AtolOpt = 1e-3,
    as_json: JsonOpt = False,
) -> None:
    """Export a PyTorch model (torch in the train extra) to ONNX for the benchmark's model
    contract, check it and compare it with PyTorch; written only when every check passes."""
    if factory is None:
        raise ConfigError("--factory is required", hint="e.g. --factory "
                          "monai.networks.nets:SegResNet --kwargs '{\"in_channels\": 4, "
                          "\"out_channels\": 4}'")
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise ConfigError("model export needs PyTorch",
                          hint="pip install 'sealbench[train]'") from exc
    plugin = assets.plugin_of(None, definition)
    model_export = _library()
    module = model_export.load_torch_module(factory, model_export.parse_kwargs(kwargs), weights)
    check = model_export.export_module(module, plugin, output, opset=opset, atol=atol)
    _render(check, as_json, str(output))


def model_check(
    onnx: Annotated[Path, typer.Argument(help="the ONNX model file")],
    factory: FactoryOpt = None,
    kwargs: KwargsOpt = None,
    weights: WeightsOpt = None,
    definition: DefinitionOpt = None,
    atol: AtolOpt = 1e-3,
    as_json: JsonOpt = False,
) -> None:
    """Check an ONNX model against the benchmark's model contract and run it at two spatial
    sizes; with --factory (and --weights), also compare it with the PyTorch model."""
    plugin = assets.plugin_of(None, definition)
    try:
        with onnx.open("rb") as handle:
            data = handle.read(plugin.model_contract.max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {onnx}: {exc.strerror}") from exc
    model_export = _library()
    module = None
    if factory is not None:
        module = model_export.load_torch_module(factory, model_export.parse_kwargs(kwargs),
                                                weights)
    check = model_export.check_onnx(data, plugin, torch_module=module, atol=atol)
    _render(check, as_json, str(onnx))
