"""Bring your own PyTorch model: export a ``torch.nn.Module`` (a MONAI network or any module) to
ONNX for a benchmark's model contract, and check an ONNX file before it is registered.

The check is the plug-in's own model-contract check (I/O names, types, channels, opset) plus
what only running the model shows: ONNX Runtime accepts inputs of two different spatial sizes
(the dynamic axes the sliding window needs really are dynamic, not merely declared so) and gives
an output of the contract's shape on each, and, when the PyTorch module is at hand, the two
agree within a tolerance on the same input (:class:`ParityReport`): a case of the plug-in's demo
data prepared as its runner feeds the model, when the plug-in provides one
(:class:`~sealbench.benchmarks.interface.ProvidesDemoModelInput`; BraTS: a small-grid synthetic
case, normalised and cropped as the segmenter does), else a synthetic noise input
(:func:`demo_input`); the report says which. An export is written to a
temporary file beside the target and renamed into place only once every check passed, so a
refused export leaves nothing behind.

torch is needed only to export or compare (the ``train``/``dev`` extras); checking an ONNX file
alone needs ONNX Runtime only. Every failure is a :class:`~sealbench.client.errors.ConfigError`
naming what was received and what was expected.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from sealbench.benchmarks.interface import (
    Benchmark,
    ModelContract,
    ModelContractError,
    ModelReport,
    ProvidesDemoModelInput,
)
from sealbench.client.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = [
    "CHECK_SHAPES",
    "DEFAULT_OPSET",
    "ModelCheck",
    "ParityReport",
    "check_onnx",
    "demo_input",
    "export_module",
    "io_names",
    "load_torch_module",
    "parity_input",
]

#: The opset an export uses unless told otherwise (inside BraTS's 17..21).
DEFAULT_OPSET: Final = 18
#: Spatial sizes the check runs the model at: two different ones, neither a cube, so that a
#: graph with a fixed size baked into a reshape fails here and not in the enclave.
CHECK_SHAPES: Final[tuple[tuple[int, int, int], ...]] = ((32, 32, 32), (48, 32, 64))
_FACTORY: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ParityReport:
    """ONNX Runtime against PyTorch on one input: the largest absolute difference of the outputs,
    the tolerance it was held to, and the share of voxels whose arg-max class agrees."""

    shape: tuple[int, ...]
    max_abs_diff: float
    tolerance: float
    argmax_agreement: float
    #: Which input: the plug-in's demo case (named) or the synthetic noise input.
    input: str = "synthetic random input"


@dataclass(frozen=True)
class ModelCheck:
    """What :func:`check_onnx` found in a model that passed."""

    report: ModelReport
    bytes: int
    run_shapes: tuple[tuple[int, ...], ...]
    parity: ParityReport | None

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "opset": self.report.opset, "details": self.report.details,
                "run_shapes": [list(s) for s in self.run_shapes],
                "parity": None if self.parity is None else {
                    "shape": list(self.parity.shape),
                    "max_abs_diff": self.parity.max_abs_diff,
                    "tolerance": self.parity.tolerance,
                    "argmax_agreement": self.parity.argmax_agreement,
                    "input": self.parity.input}}


def _spec_channels(contract: ModelContract) -> tuple[int, int]:
    if len(contract.inputs) != 1 or len(contract.outputs) != 1:
        raise ConfigError("model export supports benchmarks with one input and one output, "
                          f"this one has {len(contract.inputs)} and {len(contract.outputs)}")
    ins, outs = contract.inputs[0].shape, contract.outputs[0].shape
    if len(ins) != 5 or len(outs) != 5 or not isinstance(ins[1], int) \
            or not isinstance(outs[1], int):
        raise ConfigError("model export supports [N, C, D, H, W] volumes; the contract asks for "
                          f"input {ins} and output {outs}")
    return ins[1], outs[1]


def io_names(contract: ModelContract) -> tuple[str, str, dict[str, dict[int, str]]]:
    """Input name, output name and the ``dynamic_axes`` for :func:`torch.onnx.export`: every axis
    the contract names (a string) or leaves open (``None``) is dynamic."""
    _spec_channels(contract)
    names = []
    axes: dict[str, dict[int, str]] = {}
    for spec, default in ((contract.inputs[0], "image"), (contract.outputs[0], "logits")):
        name = spec.name or default
        names.append(name)
        axes[name] = {i: (d if isinstance(d, str) else f"{name}_{i}")
                      for i, d in enumerate(spec.shape) if not isinstance(d, int)}
    return names[0], names[1], axes


def demo_input(contract: ModelContract, spatial: Sequence[int], seed: int = 0) -> FloatArray:
    """A deterministic input of the contract's channel count: z-scored noise with a brighter
    ellipsoid, roughly what a normalised scan looks like to the first layers."""
    channels, _ = _spec_channels(contract)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, channels, *spatial), dtype=np.float32) * 0.3
    grid = np.meshgrid(*[np.linspace(-1.0, 1.0, n, dtype=np.float32) for n in spatial],
                       indexing="ij")
    blob = sum(g * g for g in grid) < 0.3
    x[:, :, blob] += 1.5
    return x


def parity_input(plugin: Benchmark, spatial: Sequence[int]) -> tuple[FloatArray, str]:
    """The input ONNX and PyTorch are compared on, and what it is: the plug-in's demo case when
    it provides one (and it has the contract's channel count), else :func:`demo_input` on
    ``spatial``."""
    contract = plugin.model_contract
    channels, _ = _spec_channels(contract)
    if isinstance(plugin, ProvidesDemoModelInput):
        demo = plugin.demo_model_input()
        array = np.ascontiguousarray(demo.array, dtype=np.float32)
        if array.ndim == 5 and array.shape[:2] == (1, channels):
            return array, demo.description
    return demo_input(contract, spatial), "synthetic random input"


def load_torch_module(factory: str, kwargs: Mapping[str, Any] | None = None,
                      weights: Path | None = None) -> torch.nn.Module:
    """Build ``module:Callable(**kwargs)`` (``monai.networks.nets:SegResNet``, or the owner's own
    class) and load ``weights`` (a state dict saved with ``torch.save``, read with
    ``weights_only=True`` so a weights file cannot run code), in eval mode."""
    import torch

    if not _FACTORY.match(factory):
        raise ConfigError(f"--factory must be module.path:Callable, received {factory!r}")
    module_name, attr = factory.split(":")
    try:
        built = getattr(importlib.import_module(module_name), attr)(**dict(kwargs or {}))
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {factory}: {exc}") from exc
    except TypeError as exc:
        raise ConfigError(f"{factory} refused the arguments {sorted(kwargs or {})}: {exc}") \
            from exc
    if not isinstance(built, torch.nn.Module):
        raise ConfigError(f"{factory} returned a {type(built).__name__}, "
                          "expected a torch.nn.Module")
    if weights is not None:
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise ConfigError(f"cannot read weights from {weights}: {first}",
                              hint="save the state dict (module.state_dict()), tensors only"
                              ) from exc
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        if not isinstance(state, dict):
            raise ConfigError(f"{weights} holds a {type(state).__name__}, expected a state dict")
        try:
            built.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(f"{weights} does not fit {factory}: {first}") from exc
    return built.eval()


def _ort_session(model_bytes: bytes) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _torch_forward(module: torch.nn.Module, x: FloatArray) -> FloatArray:
    import torch

    with torch.inference_mode():
        out = module(torch.from_numpy(x))
    if not isinstance(out, torch.Tensor):  # deep-supervision lists: the first is the full scale
        out = out[0]
    return np.asarray(out.detach().cpu().numpy(), dtype=np.float32)


def check_onnx(model_bytes: bytes, plugin: Benchmark, *,
               torch_module: torch.nn.Module | None = None, atol: float = 1e-3,
               rtol: float = 1e-3,
               shapes: Sequence[tuple[int, int, int]] = CHECK_SHAPES) -> ModelCheck:
    """Check ``model_bytes`` against ``plugin``'s model contract, run it at each of ``shapes``
    and, with ``torch_module``, compare it with PyTorch on :func:`parity_input` (the plug-in's
    demo case, else noise of the first shape; ``|onnx - torch| <= atol + rtol * |torch|``
    everywhere). Returns the :class:`ModelCheck` or raises ``ConfigError``."""
    contract = plugin.model_contract
    hint = f"export {contract.hint()}"
    try:
        report = plugin.check_model(model_bytes)
    except ModelContractError as exc:
        raise ConfigError(f"the model does not meet the benchmark's model contract: {exc}",
                          hint=hint) from exc
    _, classes = _spec_channels(contract)
    input_name = report.inputs[0].name or str(report.details.get("input", ""))
    try:
        session = _ort_session(model_bytes)
    except Exception as exc:  # ORT raises its own untyped errors
        raise ConfigError("ONNX Runtime could not load the model") from exc
    input_name = session.get_inputs()[0].name
    run_shapes: list[tuple[int, ...]] = []
    parity: ParityReport | None = None
    for index, spatial in enumerate(shapes):
        x = demo_input(contract, spatial, seed=index)
        try:
            (y,) = session.run(None, {input_name: x})
        except Exception as exc:  # ORT raises its own untyped errors
            raise ConfigError(f"ONNX Runtime could not run the model on an input of shape "
                              f"{x.shape}: the spatial axes may not really be dynamic "
                              f"({str(exc).splitlines()[0][:200]})", hint=hint) from exc
        expected = (1, classes, *spatial)
        if tuple(y.shape) != expected:
            raise ConfigError(f"on an input of shape {x.shape} the model gave {tuple(y.shape)}, "
                              f"expected {expected}", hint=hint)
        run_shapes.append(tuple(x.shape))
    if torch_module is not None:
        x, described = parity_input(plugin, shapes[0])
        try:
            (y,) = session.run(None, {input_name: x})
        except Exception as exc:  # ORT raises its own untyped errors
            raise ConfigError(f"ONNX Runtime could not run the model on the {described} "
                              f"({str(exc).splitlines()[0][:200]})", hint=hint) from exc
        ref = _torch_forward(torch_module, x)
        if ref.shape != y.shape:
            raise ConfigError(f"PyTorch gave {ref.shape} and ONNX Runtime {y.shape} on the "
                              f"same input ({described})")
        diff = np.abs(y.astype(np.float32) - ref)
        bound = atol + rtol * np.abs(ref)
        max_diff = float(diff.max())
        agreement = float((y.argmax(axis=1) == ref.argmax(axis=1)).mean())
        parity = ParityReport(tuple(x.shape), max_diff, atol, agreement, described)
        if not np.isfinite(y).all() or bool((diff > bound).any()):
            raise ConfigError(
                f"ONNX Runtime and PyTorch disagree on the {described}: largest difference "
                f"{max_diff:.3g}, allowed {atol:g} + {rtol:g}*|value|; {agreement:.2%} of "
                "voxels agree on the class", hint="export in eval mode with the opset the "
                "benchmark names; check for operators ONNX does not support exactly")
    return ModelCheck(report, len(model_bytes), tuple(run_shapes), parity)


def export_module(module: torch.nn.Module, plugin: Benchmark, out: Path, *,
                  opset: int = DEFAULT_OPSET, atol: float = 1e-3,
                  rtol: float = 1e-3) -> ModelCheck:
    """Export ``module`` to ``out`` as ONNX for ``plugin``'s contract (dynamic batch and spatial
    axes, the contract's I/O names), check it with :func:`check_onnx` including parity with
    ``module``, and only then move it into place. Raises ``ConfigError``; nothing is left at
    ``out`` (or beside it) when it does."""
    import torch

    contract = plugin.model_contract
    low, high = contract.opsets
    if not low <= opset <= high:
        raise ConfigError(f"opset {opset} is outside the benchmark's {low}..{high}")
    input_name, output_name, axes = io_names(contract)
    module = module.eval()
    example = torch.from_numpy(demo_input(contract, CHECK_SHAPES[0]))
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            with torch.inference_mode():
                torch.onnx.export(module, (example,), str(tmp), input_names=[input_name],
                                  output_names=[output_name], dynamic_axes=axes,
                                  opset_version=opset, do_constant_folding=True, dynamo=False)
        except Exception as exc:  # the exporter raises many types for unsupported graphs
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(f"torch.onnx.export failed: {first}",
                              hint="see docs/model-export.md for what exports") from exc
        data = tmp.read_bytes()
        if len(data) > contract.max_bytes:
            raise ConfigError(f"the export is {len(data)} bytes, over the benchmark's "
                              f"{contract.max_bytes}-byte cap")
        check = check_onnx(data, plugin, torch_module=module, atol=atol, rtol=rtol)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return check


def parse_kwargs(text: str | None) -> dict[str, Any]:
    """The ``--kwargs`` JSON object (``{}`` when absent)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--kwargs is not JSON: {exc.msg} at character {exc.pos}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"--kwargs must be a JSON object, received {type(value).__name__}")
    return value
