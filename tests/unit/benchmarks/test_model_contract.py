"""A model owner's ONNX that does not fit the contract is refused before anything runs, with an
error naming each difference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sealbench.benchmarks.brats import (
    BratsContract,
    ModelContractError,
    OnnxSegmenter,
    check_model_contract,
)
from sealbench.benchmarks.brats.model_contract import read_opsets


def test_conforming_model_passes(make_model: Callable[..., bytes],
                                small_contract: BratsContract) -> None:
    report = check_model_contract(make_model(), small_contract)
    assert (report.input_channels, report.output_classes, report.opset) == (4, 4, 17)
    assert report.dynamic_spatial_axes


@pytest.mark.parametrize("options, difference", [
    ({"in_channels": 3}, "input channels 3, expected 4 (t1n, t1c, t2w, t2f)"),
    ({"out_classes": 3}, "output classes 3, expected 4"),
    ({"opset": 13}, "opset 13, expected 17..21"),
    ({"spatial": (128, 128, 128)}, "spatial axes [128, 128, 128] are fixed"),
    ({"n_inputs": 2}, "2 inputs and 1 outputs"),
])
def test_mismatching_model_is_refused_naming_the_difference(
        options: dict[str, Any], difference: str, make_model: Callable[..., bytes],
        small_contract: BratsContract) -> None:
    with pytest.raises(ModelContractError) as info:
        check_model_contract(make_model(**options), small_contract)
    assert any(difference in d for d in info.value.differences), info.value.differences


def test_every_difference_is_reported_at_once(make_model: Callable[..., bytes],
                                              small_contract: BratsContract) -> None:
    with pytest.raises(ModelContractError) as info:
        check_model_contract(make_model(in_channels=2, out_classes=5, opset=12), small_contract)
    assert len(info.value.differences) == 3


def test_garbage_is_not_a_model(small_contract: BratsContract) -> None:
    with pytest.raises(ModelContractError, match="not a loadable ONNX model"):
        check_model_contract(b"\x08\x07garbage", small_contract)


def test_segmenter_refuses_a_mismatching_model(make_model: Callable[..., bytes],
                                               small_contract: BratsContract) -> None:
    with pytest.raises(ModelContractError, match="input channels"):
        OnnxSegmenter(make_model(in_channels=1), small_contract)


def test_opset_reader_matches_onnx(make_model: Callable[..., bytes]) -> None:
    assert read_opsets(make_model(opset=19)) == {"": 19}
