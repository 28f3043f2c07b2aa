"""Check a model owner's ONNX model against the data contract before anything runs.

The model must load in ONNX Runtime and have one float input ``[N, C, D, H, W]`` with
``C`` = the contract's modality count, one output ``[N, K, D, H, W]`` with ``K`` = the label
map's classes (background and each tissue in class-index order: 4, or 5 with the BraTS 2025
resection cavity), dynamic spatial axes (so that whole
volumes and any window fit), and a default-domain opset in :data:`SUPPORTED_OPSETS`. Every
mismatch is collected and reported together in :class:`ModelContractError`.

The opset is read from the ModelProto's ``opset_import`` field (number 8) with a minimal,
bounded protobuf reader (:mod:`sealbench.benchmarks.onnx_opsets`), so this check needs only
ONNX Runtime, not the ``onnx`` package. The model must be exactly its bytes: a tensor stored as
external data, or a node outside the standard ONNX domain (:data:`DOMAINS`), anywhere in it, is
refused by structure before ONNX Runtime sees it
(:func:`sealbench.benchmarks.onnx_safety.check_self_contained`, an
:class:`~sealbench.benchmarks.onnx_safety.UnsafeModelError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sealbench.benchmarks.onnx_opsets import read_opsets
from sealbench.benchmarks.onnx_runtime import open_session, ort
from sealbench.benchmarks.onnx_safety import STANDARD_DOMAINS, UnsafeModelError

from .contract import BratsContract
from .errors import ModelContractError

__all__ = ["DOMAINS", "N_CLASSES", "SUPPORTED_OPSETS", "ModelContractReport",
           "check_model_contract", "read_opsets"]

#: The output classes of the BraTS 2023 label map (a contract's own: ``label_map.n_classes``).
N_CLASSES = 4
SUPPORTED_OPSETS = range(17, 22)
MAX_MODEL_BYTES = 512 * 1024 * 1024
#: The operator domains a segmentation model may use: standard ONNX only.
DOMAINS = STANDARD_DOMAINS


@dataclass(frozen=True)
class ModelContractReport:
    """What the check found in a conforming model."""

    input_name: str
    output_name: str
    input_channels: int
    output_classes: int
    opset: int
    dynamic_spatial_axes: bool


def _dynamic(dim: object) -> bool:
    return dim is None or isinstance(dim, str)


def check_model_contract(model_bytes: bytes, contract: BratsContract) -> ModelContractReport:
    """Return the model's :class:`ModelContractReport` or raise :class:`ModelContractError`
    listing every difference from the contract."""
    if len(model_bytes) > MAX_MODEL_BYTES:
        raise ModelContractError((f"model is {len(model_bytes)} bytes, over the "
                                  f"{MAX_MODEL_BYTES}-byte cap",))
    try:
        opsets = read_opsets(model_bytes)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = open_session(model_bytes, options, domains=DOMAINS)
    except UnsafeModelError:
        raise
    except Exception as exc:  # ORT and the protobuf reader fail with many exception types
        raise ModelContractError(("not a loadable ONNX model",)) from exc
    differences: list[str] = []
    opset = opsets.get("", 0)
    if opset not in SUPPORTED_OPSETS:
        differences.append(f"opset {opset}, expected {SUPPORTED_OPSETS.start}.."
                           f"{SUPPORTED_OPSETS.stop - 1}")
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or len(outputs) != 1:
        differences.append(f"{len(inputs)} inputs and {len(outputs)} outputs, expected 1 and 1")
        raise ModelContractError(tuple(differences))
    inp, out = inputs[0], outputs[0]
    channels = classes = -1
    dynamic = True
    for role, arg in (("input", inp), ("output", out)):
        shape = list(arg.shape)
        if arg.type != "tensor(float)":
            differences.append(f"{role} type {arg.type}, expected tensor(float)")
        if len(shape) != 5:
            differences.append(f"{role} rank {len(shape)}, expected 5 [N, C, D, H, W]")
            continue
        if not all(_dynamic(d) for d in shape[2:]):
            dynamic = False
            differences.append(f"{role} spatial axes {shape[2:]} are fixed, expected dynamic")
        size = shape[1] if isinstance(shape[1], int) else -1
        if role == "input":
            channels = size
            if size != len(contract.modalities):
                differences.append(f"input channels {shape[1]}, expected "
                                   f"{len(contract.modalities)} ({', '.join(contract.modalities)})")
        else:
            classes = size
            if size != contract.label_map.n_classes:
                differences.append(f"output classes {shape[1]}, expected "
                                   f"{contract.label_map.n_classes} "
                                   f"(background, {', '.join(contract.label_map.tissues)})")
    if differences:
        raise ModelContractError(tuple(differences))
    return ModelContractReport(input_name=inp.name, output_name=out.name,
                               input_channels=channels, output_classes=classes, opset=opset,
                               dynamic_spatial_axes=dynamic)
