"""Segmentation inference behind the :class:`Segmenter` interface, with ONNX Runtime.

:class:`OnnxSegmenter` loads a model from bytes in memory (weights are never written to disk),
checks it against the contract, z-scores the case's modalities inside the brain mask
(idempotent, so prepared cases pass through unchanged), crops to the brain's bounding box (as
nnU-Net crops to the non-zero region: outside it every input is 0 and every label background),
pads each axis to a multiple of ``size_divisor`` and runs either one whole-volume pass (when the
padded crop has at most ``max_whole_voxels`` voxels, 6.0 M by default: a full-size brain,
about 160x192x160, in about 1.2 GiB peak for the reference) or a sliding window (larger crops,
or ``mode="sliding"``: 128³ windows at the default overlap 0.125) with Gaussian importance
weighting (sigma = 0.125 x ROI, weights clipped at 1e-3, last window flush with the border, as
MONAI and nnU-Net do); tests/perf/brats_memory_bench.py measures each. ONNX Runtime runs without
its CPU memory arena (``cpu_arena=False``): the arena keeps what each crop shape took, so the
peak grew case after case (tests/perf/enclave_bench.py compares both). The arg-max is then
post-processed as the model declares in its ONNX metadata (:mod:`.postprocess`: small-component
removal and ET->NETC relabelling; the standard default when it declares nothing;
``postprocess=None`` turns it off) and mapped to the contract's label values; the caller writes
the label map with the case's affine (:func:`.cases.encode_nifti`).
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from sealbench.benchmarks.onnx_runtime import open_session, ort, run

from .cases import Case
from .contract import BratsContract
from .errors import InferenceError
from .model_contract import DOMAINS, ModelContractReport, check_model_contract
from .normalise import normalise_modalities
from .postprocess import (
    DEFAULT_POSTPROCESS,
    METADATA_KEY,
    PostProcess,
    declared,
    remove_small_components,
)

__all__ = ["OnnxSegmenter", "Segmenter", "brain_box", "choose_providers", "gaussian_importance",
           "remove_small_components",
           "sliding_windows"]

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
Shape3 = tuple[int, int, int]


class Segmenter(Protocol):
    """Turns one case into a label map (uint8, the case's grid, the contract's labels)."""

    def segment(self, case: Case) -> npt.NDArray[np.uint8]:
        """Label map of ``case``."""
        ...


def gaussian_importance(roi: Shape3, sigma_scale: float = 0.125) -> FloatArray:
    """Separable Gaussian window of shape ``roi`` (max 1, clipped at 1e-3)."""
    axes = []
    for n in roi:
        centre = (n - 1) / 2.0
        x = np.arange(n, dtype=np.float64)
        axes.append(np.exp(-0.5 * ((x - centre) / (sigma_scale * n)) ** 2))
    window = axes[0][:, None, None] * axes[1][None, :, None] * axes[2][None, None, :]
    window /= window.max()
    clipped: FloatArray = np.maximum(window, 1e-3).astype(np.float32)
    return clipped


def sliding_windows(shape: Shape3, roi: Shape3, overlap: float) -> list[tuple[slice, ...]]:
    """Window slices covering ``shape`` with step ``roi*(1-overlap)``; the last window of each
    axis is flush with the border."""
    starts = []
    for n, r in zip(shape, roi, strict=True):
        if n <= r:
            starts.append([0])
            continue
        step = max(1, int(r * (1.0 - overlap)))
        axis = list(range(0, n - r, step))
        axis.append(n - r)
        starts.append(sorted(set(axis)))
    return [tuple(slice(s, s + r) for s, r in zip(start, roi, strict=True))
            for start in itertools.product(*starts)]


def _softmax(logits: FloatArray) -> FloatArray:
    shifted = logits - logits.max(axis=0, keepdims=True)
    np.exp(shifted, out=shifted)
    shifted /= shifted.sum(axis=0, keepdims=True)
    out: FloatArray = shifted
    return out


def choose_providers(available: list[str]) -> list[str]:
    """The execution providers to ask ONNX Runtime for, preferred first, given the ones it lists
    (``ort.get_available_providers()``): CUDA then CPU on the GPU image (onnxruntime-gpu), CPU
    alone otherwise. TensorRT and others are not used: their engines are built at run time."""
    if "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def brain_box(image: FloatArray) -> tuple[slice, slice, slice] | None:
    """The bounding box of the voxels where any channel of ``image`` ([C, X, Y, Z]) is non-zero,
    or ``None`` when there are none."""
    mask = np.any(image, axis=0)
    box = []
    for axis in (0, 1, 2):
        others = tuple(a for a in (0, 1, 2) if a != axis)
        hit = np.flatnonzero(np.any(mask, axis=others))
        if hit.size == 0:
            return None
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    return box[0], box[1], box[2]


class OnnxSegmenter:
    """A :class:`Segmenter` running an ONNX model with ONNX Runtime (CUDA when available)."""

    def __init__(self, model_bytes: bytes, contract: BratsContract, *,
                 mode: Literal["auto", "whole", "sliding"] = "auto",
                 roi: Shape3 = (128, 128, 128), overlap: float = 0.125, size_divisor: int = 16,
                 max_whole_voxels: int = 6_000_000, crop: bool = True,
                 postprocess: PostProcess | Literal["declared"] | None = "declared",
                 undeclared: PostProcess | None = DEFAULT_POSTPROCESS,
                 threads: int | None = None, providers: list[str] | None = None,
                 cpu_arena: bool = False) -> None:
        self.report: ModelContractReport = check_model_contract(model_bytes, contract)
        if not 0.0 <= overlap < 1.0:
            raise ValueError(f"overlap must be in [0, 1), received {overlap}")
        if any(r % size_divisor for r in roi):
            raise ValueError(f"roi {roi} must be a multiple of size_divisor {size_divisor}")
        self._contract = contract
        self._mode = mode
        self._roi = roi
        self._overlap = overlap
        self._divisor = size_divisor
        self._max_whole = max_whole_voxels
        self._crop = crop
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or min(os.cpu_count() or 1, 16)
        options.log_severity_level = 3
        # ONNX Runtime's CPU arena keeps every block it ever took and, as each case's crop has
        # another shape, takes new ones for the next case: 4 full-size cases peaked at
        # 1.9 GiB with it, about 1.1 GiB without, identical labels, ~5-15% more CPU
        # (tests/perf/enclave_bench.py measures both).
        options.enable_cpu_mem_arena = cpu_arena
        chosen = providers or choose_providers(list(ort.get_available_providers()))
        try:
            self._session = open_session(model_bytes, options, chosen, domains=DOMAINS)
        except Exception as exc:  # ORT raises its own untyped errors
            raise InferenceError("ONNX Runtime could not create a session") from exc
        logger.info("ONNX Runtime session on %s", self._session.get_providers()[0])
        metadata = dict(self._session.get_modelmeta().custom_metadata_map or {})
        #: The model's declared post-processing (applied unless ``postprocess`` overrides it);
        #: ``undeclared`` for a model that declares none (the 2025 pins: none, as the 2023
        #: default is tuned for four classes).
        self.declared_postprocess: PostProcess | None = (
            declared(metadata) if METADATA_KEY in metadata else undeclared)
        self.postprocess: PostProcess | None = (self.declared_postprocess
                                                if postprocess == "declared" else postprocess)

    @property
    def providers(self) -> list[str]:
        """Execution providers in use, preferred first."""
        return list(self._session.get_providers())

    def _run(self, x: FloatArray) -> FloatArray:
        try:
            (logits,) = run(self._session, [self.report.output_name],
                            {self.report.input_name: x[None]})
        except Exception as exc:  # ORT raises its own untyped errors
            raise InferenceError(f"inference failed on an input of shape {x.shape}") from exc
        return np.asarray(logits[0], dtype=np.float32)

    def _sliding(self, x: FloatArray) -> FloatArray:
        shape: Shape3 = (x.shape[1], x.shape[2], x.shape[3])
        roi: Shape3 = (min(self._roi[0], shape[0]), min(self._roi[1], shape[1]),
                       min(self._roi[2], shape[2]))
        importance = gaussian_importance(roi)
        total = np.zeros((self.report.output_classes, *shape), dtype=np.float32)
        weight = np.zeros(shape, dtype=np.float32)
        for window in sliding_windows(shape, roi, self._overlap):
            probs = _softmax(self._run(np.ascontiguousarray(x[(slice(None), *window)])))
            total[(slice(None), *window)] += probs * importance
            weight[window] += importance
        total /= weight
        return total

    def plan(self, shape: Shape3) -> Literal["whole", "sliding"]:
        """Whether a (cropped) volume of ``shape`` runs as one whole-volume pass or a sliding
        window."""
        if self._mode != "auto":
            return self._mode
        padded = [-(-n // self._divisor) * self._divisor for n in shape]
        return "whole" if int(np.prod(padded)) <= self._max_whole else "sliding"

    def segment_raw(self, case: Case, *, consume: bool = False) -> npt.NDArray[np.uint8]:
        """Arg-max class indices of ``case`` (0 background, 1 NETC, 2 SNFH, 3 ET), before any
        post-processing. With ``consume`` the case's volumes are dropped from
        ``case.modalities`` once normalised (scoring reads the truth alone): a full-size case's
        145 MB of float32 volumes are then not held beside the model's activations."""
        missing = [m for m in self._contract.modalities if m not in case.modalities]
        if missing:
            raise InferenceError(f"case lacks modalities {missing}")
        image = normalise_modalities({m: case.modalities[m] for m in self._contract.modalities})
        if consume:
            case.modalities.clear()
        full = image.shape[1:]
        classes: npt.NDArray[np.uint8] = np.zeros(full, dtype=np.uint8)
        box = brain_box(image) if self._crop else tuple(slice(0, n) for n in full)
        if box is None:  # an empty case: no brain, no tumour
            return classes
        cropped = image[(slice(None), *box)]
        del image
        shape = cropped.shape[1:]
        whole = self.plan((shape[0], shape[1], shape[2])) == "whole"
        padded = [-(-n // self._divisor) * self._divisor for n in shape]
        padded = [p if whole else max(p, r) for p, r in zip(padded, self._roi, strict=True)]
        pad = [(0, 0)] + [(0, p - n) for p, n in zip(padded, shape, strict=True)]
        x = np.pad(cropped, pad) if any(p for _, p in pad) else np.ascontiguousarray(cropped)
        del cropped
        scores = self._run(x) if whole else self._sliding(x)
        del x
        classes[box] = np.argmax(scores[:, : shape[0], : shape[1], : shape[2]], axis=0)
        return classes

    def finish(self, classes: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """Post-process raw class indices (in place) and map them to the contract's labels."""
        if self.postprocess is not None:
            self.postprocess.apply(classes, self._contract.spacing_mm)
        return self._contract.label_map.from_class_indices(classes)

    def segment(self, case: Case, *, consume: bool = False) -> npt.NDArray[np.uint8]:
        """Label map of ``case`` in the contract's convention (uint8, the case's grid), after the
        post-processing in force (the model's declared one by default); ``consume`` as
        :meth:`segment_raw`."""
        return self.finish(self.segment_raw(case, consume=consume))
