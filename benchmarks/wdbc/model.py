"""The WDBC model contract and its ONNX Runtime runner.

A model takes the raw features and returns class probabilities:

- one input, ``tensor(float)`` of shape ``[N, 30]`` (``N`` dynamic or 1; the features in
  :data:`.data.FEATURES` order, not normalised: the model carries its own scaling);
- an output named ``probabilities``, ``tensor(float)`` of shape ``[N, 2]``: P(benign),
  P(malignant); other outputs (skl2onnx's ``label``) are allowed and never computed;
- a default-domain opset in :data:`OPSETS`, at most :data:`MAX_MODEL_BYTES`;
- exactly its bytes: no tensor stored as external data, no operator outside the standard and
  ``ai.onnx.ml`` domains (:data:`DOMAINS`), anywhere in the model (refused by structure,
  :func:`sealbench.benchmarks.onnx_safety.check_self_contained`).

The runner loads the model from bytes in memory and predicts one case at a time. A case whose
inference fails or whose output is not a finite probability pair is not an error of the run:
:meth:`OnnxClassifier.predict` returns a :class:`Prediction` without a score and the reason,
which scoring turns into a penalised failure (the case's label is known there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from sealbench.benchmarks.interface import (
    ModelContract,
    ModelContractError,
    ModelReport,
    TensorSpec,
)
from sealbench.benchmarks.onnx_opsets import read_opsets
from sealbench.benchmarks.onnx_runtime import open_session, ort, run
from sealbench.benchmarks.onnx_safety import STANDARD_DOMAINS, UnsafeModelError

from .data import FEATURES, WdbcCase

__all__ = [
    "DOMAINS",
    "MAX_MODEL_BYTES",
    "MODEL_CONTRACT",
    "OPSETS",
    "OUTPUT_NAME",
    "OnnxClassifier",
    "Prediction",
    "check_model",
]

OPSETS: Final = (13, 21)
MAX_MODEL_BYTES: Final = 64 * 1024 * 1024
OUTPUT_NAME: Final = "probabilities"
#: The operator domains a classifier may use: standard ONNX and ONNX-ML (skl2onnx's).
DOMAINS: Final = STANDARD_DOMAINS | {"ai.onnx.ml"}
#: How far the two probabilities may sum from 1 (float32 softmax rounding).
_SUM_TOLERANCE: Final = 1e-3

MODEL_CONTRACT: Final = ModelContract(
    inputs=(TensorSpec(None, "float32", ("N", len(FEATURES))),),
    outputs=(TensorSpec(OUTPUT_NAME, "float32", ("N", 2)),),
    opsets=OPSETS,
    max_bytes=MAX_MODEL_BYTES,
    description=(
        f"an ONNX classifier: input float [N, {len(FEATURES)}] (the raw WDBC features in "
        f"order), output '{OUTPUT_NAME}' float [N, 2] (P(benign), P(malignant)), opset "
        f"{OPSETS[0]}..{OPSETS[1]}; skl2onnx with options={{'zipmap': False}} gives this"),
)


def _dim_ok(dim: object, wanted: int) -> bool:
    return dim == wanted


def _batch_ok(dim: object) -> bool:
    return dim is None or isinstance(dim, str) or dim == 1


def _session(model_bytes: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return open_session(model_bytes, options, domains=DOMAINS)


def _check(model_bytes: bytes) -> tuple[ModelReport, ort.InferenceSession]:
    if len(model_bytes) > MAX_MODEL_BYTES:
        raise ModelContractError(
            (f"model is {len(model_bytes)} bytes, over the {MAX_MODEL_BYTES}-byte cap",))
    try:
        opsets = read_opsets(model_bytes)
        session = _session(model_bytes)
    except UnsafeModelError:
        raise
    except Exception as exc:  # ORT and the protobuf reader fail with many exception types
        raise ModelContractError(("not a loadable ONNX model",)) from exc
    differences: list[str] = []
    opset = opsets.get("", 0)
    if not OPSETS[0] <= opset <= OPSETS[1]:
        differences.append(f"opset {opset}, expected {OPSETS[0]}..{OPSETS[1]}")
    inputs = session.get_inputs()
    if len(inputs) != 1:
        differences.append(f"{len(inputs)} inputs, expected 1 ([N, {len(FEATURES)}] features)")
    else:
        inp = inputs[0]
        if inp.type != "tensor(float)":
            differences.append(f"input type {inp.type}, expected tensor(float)")
        shape = list(inp.shape)
        if len(shape) != 2 or not _batch_ok(shape[0]) or not _dim_ok(shape[1], len(FEATURES)):
            differences.append(f"input shape {shape}, expected [N, {len(FEATURES)}]")
    outputs = {o.name: o for o in session.get_outputs()}
    out = outputs.get(OUTPUT_NAME)
    if out is None:
        differences.append(f"no output named '{OUTPUT_NAME}' (outputs: {sorted(outputs)})")
    else:
        if out.type != "tensor(float)":
            differences.append(f"output type {out.type}, expected tensor(float)")
        shape = list(out.shape)
        if len(shape) != 2 or not _batch_ok(shape[0]) or not _dim_ok(shape[1], 2):
            differences.append(f"output shape {shape}, expected [N, 2]")
    if differences:
        raise ModelContractError(tuple(differences))
    report = ModelReport(
        inputs=(TensorSpec(inputs[0].name, "float32", tuple(inputs[0].shape)),),
        outputs=(TensorSpec(OUTPUT_NAME, "float32", tuple(outputs[OUTPUT_NAME].shape)),),
        opset=opset,
    )
    return report, session


def check_model(model_bytes: bytes) -> ModelReport:
    """The model's report, or :class:`ModelContractError` listing every difference."""
    return _check(model_bytes)[0]


@dataclass(frozen=True)
class Prediction:
    """P(malignant) of one case, or why there is none."""

    score: float | None
    reason: str | None = None


class OnnxClassifier:
    """A checked model loaded in ONNX Runtime (from bytes, never from disk)."""

    def __init__(self, model_bytes: bytes) -> None:
        self.report, self._session = _check(model_bytes)
        self._input = str(self.report.inputs[0].name)  # ONNX Runtime names every input

    @property
    def providers(self) -> list[str]:
        """Execution providers in use, preferred first."""
        return list(self._session.get_providers())

    def predict(self, case: WdbcCase) -> Prediction:
        """P(malignant) of ``case``. Never raises: an ONNX Runtime failure or a malformed output
        is a :class:`Prediction` without score, so that scoring penalises the case with its
        label (an :class:`~sealbench.benchmarks.interface.InferenceError` would reach
        ``failure()``, which has no label to penalise with)."""
        row = np.asarray([case.features], dtype=np.float32)
        try:
            [out] = run(self._session, [OUTPUT_NAME], {self._input: row})
        except Exception as exc:  # noqa: BLE001 - ORT's own types; the reason says which
            return Prediction(None, f"ONNX Runtime failed: {type(exc).__name__}")
        probs = np.asarray(out)
        if probs.shape != (1, 2):
            return Prediction(None, f"output shape {list(probs.shape)}, expected [1, 2]")
        benign, malignant = float(probs[0, 0]), float(probs[0, 1])
        if not (math.isfinite(benign) and math.isfinite(malignant)):
            return Prediction(None, "output is not finite")
        if not (0.0 <= malignant <= 1.0 and 0.0 <= benign <= 1.0
                and abs(benign + malignant - 1.0) <= _SUM_TOLERANCE):
            return Prediction(None, "output is not a pair of probabilities summing to 1")
        return Prediction(malignant)
