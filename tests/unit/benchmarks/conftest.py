"""Shared fixtures for the BraTS benchmark tests: a small grid, synthetic raw datasets and tiny
ONNX models built with ``onnx.helper`` (onnx is a test-only dependency here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealbench.benchmarks.brats import BRATS_2023_GLI, BratsContract
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case

SMALL_SHAPE = (64, 64, 48)


@pytest.fixture(scope="session")
def small_contract() -> BratsContract:
    return BRATS_2023_GLI.with_shape(SMALL_SHAPE)


@pytest.fixture
def raw_dataset(tmp_path: Path, small_contract: BratsContract) -> Callable[[list[int]], Path]:
    """Write synthetic cases for the given seeds under ``tmp_path/raw``; returns the folder."""

    def make(seeds: list[int]) -> Path:
        raw = tmp_path / "raw"
        for seed in seeds:
            write_case(generate_case(seed, SMALL_SHAPE, small_contract), raw, case_id_for(seed),
                       small_contract)
        return raw

    return make


def conv_model(in_channels: int = 4, out_classes: int = 4, *, opset: int = 17,
               spatial: tuple[object, object, object] = ("D", "H", "W"),
               n_inputs: int = 1) -> bytes:
    """A one-layer 1x1x1 convolution ONNX model with the given interface."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((out_classes, in_channels, 1, 1, 1)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                            ["N", in_channels, *spatial])]
    inputs += [helper.make_tensor_value_info(f"extra{i}", TensorProto.FLOAT, [1])
               for i in range(n_inputs - 1)]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["logits"], kernel_shape=[1, 1, 1])],
        "tiny", inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", out_classes, *spatial])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data


@pytest.fixture(scope="session")
def make_model() -> Callable[..., bytes]:
    """Factory of tiny ONNX models (:func:`conv_model`)."""
    return conv_model
