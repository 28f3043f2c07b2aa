"""BraTS post-processing: component removal and ET->NETC relabelling, declared by the model in
its ONNX metadata, applied by the segmenter by default, tuned on a validation split."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest

from sealbench.benchmarks.brats import BratsContract, Case, ModelContractError, OnnxSegmenter
from sealbench.benchmarks.brats.postprocess import (
    DEFAULT_POSTPROCESS,
    METADATA_KEY,
    PostProcess,
    declared,
    tune,
)
from sealbench.benchmarks.brats.synthetic import generate_case


def _with_metadata(model: bytes, metadata: dict[str, str]) -> bytes:
    proto = onnx.load_from_string(model)
    onnx.helper.set_model_props(proto, metadata)
    data: bytes = proto.SerializeToString()
    return data


def _blob(classes: np.ndarray, at: tuple[int, int, int], size: int, label: int) -> None:
    x, y, z = at
    classes[x:x + size, y:y + size, z:z + size] = label


def test_small_components_go_by_volume_in_mm3() -> None:
    classes = np.zeros((30, 30, 30), dtype=np.uint8)
    _blob(classes, (2, 2, 2), 6, 2)  # 216 voxels
    _blob(classes, (20, 20, 20), 3, 2)  # 27 voxels
    one_mm = PostProcess(min_component_mm3=100, et_min_mm3=0).apply(classes.copy(), (1, 1, 1))
    assert not one_mm[20:23, 20:23, 20:23].any() and one_mm[2:8, 2:8, 2:8].all()
    # At 2 mm, 27 voxels are 216 mm3: kept.
    two_mm = PostProcess(min_component_mm3=100, et_min_mm3=0).apply(classes.copy(), (2, 2, 2))
    assert np.array_equal(two_mm, classes)


def test_small_et_becomes_netc_and_large_et_stays() -> None:
    classes = np.zeros((30, 30, 30), dtype=np.uint8)
    _blob(classes, (2, 2, 2), 10, 2)
    _blob(classes, (4, 4, 4), 2, 3)  # 8 mm3 of ET
    post = PostProcess(min_component_mm3=0, et_min_mm3=50)
    out = post.apply(classes.copy(), (1, 1, 1))
    assert not (out == 3).any() and (out[4:6, 4:6, 4:6] == 1).all()
    _blob(classes, (4, 4, 4), 4, 3)  # 64 mm3
    assert np.array_equal(post.apply(classes.copy(), (1, 1, 1)), classes)
    assert np.array_equal(PostProcess(min_component_mm3=0, et_min_mm3=0).apply(
        classes.copy(), (1, 1, 1)), classes)


def test_core_specks_in_the_oedema_become_oedema_and_small_et_components_netc() -> None:
    classes = np.zeros((40, 40, 40), dtype=np.uint8)
    _blob(classes, (2, 2, 2), 30, 2)  # oedema
    _blob(classes, (5, 5, 5), 10, 1)  # the core: 1000 voxels of NETC ...
    _blob(classes, (7, 7, 7), 4, 3)  # ... with 64 voxels of ET inside
    core = classes.copy()
    _blob(classes, (25, 25, 25), 2, 1)  # a stray 8-voxel NETC speck in the oedema
    _blob(classes, (25, 5, 25), 2, 3)  # a stray 8-voxel ET speck in the oedema
    post = PostProcess(min_component_mm3=0, et_min_mm3=0, min_core_mm3=20,
                       min_enhancing_mm3=20)
    out = post.apply(classes.copy(), (1, 1, 1))
    assert np.array_equal(out, core)  # both specks are oedema again; the core is untouched
    assert np.array_equal(out > 0, classes > 0)  # the whole tumour keeps its extent
    only_et = PostProcess(min_component_mm3=0, et_min_mm3=0, min_enhancing_mm3=20)
    out = only_et.apply(classes.copy(), (1, 1, 1))
    assert (out[25:27, 5:7, 25:27] == 1).all() and (out[25:27, 25:27, 25:27] == 1).all()


def test_declarations_without_the_component_steps_keep_their_meaning() -> None:
    old = declared({METADATA_KEY: '{"min_component_mm3": 100, "et_min_mm3": 50}'})
    assert old == PostProcess(min_component_mm3=100, et_min_mm3=50, min_core_mm3=0,
                              min_enhancing_mm3=0)
    full = PostProcess(min_component_mm3=1, et_min_mm3=2, min_core_mm3=3, min_enhancing_mm3=4)
    assert declared(full.to_metadata()) == full
    assert len(full.to_metadata()[METADATA_KEY]) < 256


@pytest.mark.parametrize("text", [
    '{"min_component_mm3": 100}',
    '{"min_component_mm3": 100, "et_min_mm3": 50, "run": "rm -rf"}',
    '{"min_component_mm3": -1, "et_min_mm3": 50}',
    '{"min_component_mm3": 100, "et_min_mm3": 1e9}',
    '{"min_component_mm3": "100", "et_min_mm3": 50}',
    '{"min_component_mm3": 1.5, "et_min_mm3": 50}',
    "not json",
    '{"min_component_mm3": 100, "et_min_mm3": 50' + " " * 300 + "}",
])
def test_malformed_declarations_are_contract_errors(text: str) -> None:
    with pytest.raises(ModelContractError, match=METADATA_KEY):
        declared({METADATA_KEY: text})


def test_declaration_round_trips_and_absence_means_default() -> None:
    post = PostProcess(min_component_mm3=300, et_min_mm3=0)
    assert declared(post.to_metadata()) == post
    assert declared({"other": "x"}) == DEFAULT_POSTPROCESS


def test_segmenter_applies_the_declared_pipeline_by_default(
        make_model: Callable[..., bytes], small_contract: BratsContract) -> None:
    synthetic = generate_case(1, small_contract.shape, small_contract)
    case = Case(case_id="BraTS-GLI-00001-000", modalities=synthetic.modalities,
                affine=synthetic.affine, seg=None)
    post = PostProcess(min_component_mm3=400, et_min_mm3=100_000)
    model = _with_metadata(make_model(), post.to_metadata())
    segmenter = OnnxSegmenter(model, small_contract, threads=1)
    assert segmenter.declared_postprocess == post and segmenter.postprocess == post
    raw = segmenter.segment_raw(case)
    labels = segmenter.segment(case)
    expected = small_contract.label_map.from_class_indices(post.apply(raw.copy(),
                                                                      small_contract.spacing_mm))
    assert np.array_equal(labels, expected)
    assert not (labels == small_contract.label_map.from_class_indices(
        np.full((1, 1, 1), 3, np.uint8))[0, 0, 0]).any()  # ET relabelled
    unprocessed = OnnxSegmenter(model, small_contract, threads=1, postprocess=None).segment(case)
    assert np.array_equal(unprocessed, small_contract.label_map.from_class_indices(raw))
    assert not np.array_equal(unprocessed, labels)
    # A model that declares nothing gets the default.
    assert OnnxSegmenter(make_model(), small_contract, threads=1).postprocess == \
        DEFAULT_POSTPROCESS


def test_a_bad_declaration_stops_the_segmenter(make_model: Callable[..., bytes],
                                               small_contract: BratsContract) -> None:
    model = _with_metadata(make_model(), {METADATA_KEY: '{"min_component_mm3": -5}'})
    with pytest.raises(ModelContractError):
        OnnxSegmenter(model, small_contract, threads=1)


def test_tune_removes_spurious_components_and_stray_et() -> None:
    truths, predictions = [], []
    for i in range(3):
        truth = np.zeros((40, 40, 40), dtype=np.uint8)
        _blob(truth, (5, 5, 5), 12, 2)  # 1728 voxels
        _blob(truth, (8, 8, 8), 6, 1)
        prediction = truth.copy()
        for at in ((25, 25, 25), (32, 25, 25), (25, 32, 25), (25, 25, 32 - i)):
            _blob(prediction, at, 3, 2)  # spurious 3x3x3 (27 mm3) components, apart
        if i:
            _blob(prediction, (10, 10, 10), 2, 3)  # 8 mm3 of ET where the truth has none
        truths.append(truth)
        predictions.append(prediction)
    chosen, score = tune(predictions, truths, (1.0, 1.0, 1.0),
                         component_grid=(0, 25, 50, 2000), enhancing_grid=(0,), core_grid=(0,),
                         et_grid=(0, 25))
    assert chosen == PostProcess(min_component_mm3=50, et_min_mm3=25)
    assert score == pytest.approx(1.0)
    # With the enhancing-component step on offer, it removes the stray ET first (tie-break:
    # the total-ET threshold then stays 0).
    chosen, score = tune(predictions, truths, (1.0, 1.0, 1.0),
                         component_grid=(0, 50), enhancing_grid=(0, 10), core_grid=(0, 10),
                         et_grid=(0, 25))
    assert chosen == PostProcess(min_component_mm3=50, et_min_mm3=0, min_enhancing_mm3=10)
    assert score == pytest.approx(1.0)
    with pytest.raises(ValueError):
        tune([], [], (1.0, 1.0, 1.0))


def test_evaluate_scores_new_anatomy_cases_with_the_declared_pipeline(
        make_model: Callable[..., bytes], small_contract: BratsContract) -> None:
    from sealbench.benchmarks.brats.evaluate import _line, evaluate_models

    post = PostProcess(min_component_mm3=0, et_min_mm3=0)
    model = _with_metadata(make_model(), post.to_metadata())
    on = evaluate_models({"tiny": model}, 2, seed=123, contract=small_contract, threads=1)
    off = evaluate_models({"tiny": model}, 2, seed=123, contract=small_contract, threads=1,
                          postprocess=False)
    summary, seconds = on["tiny"]
    assert summary.n_cases == 2 and seconds > 0
    # A model declaring no post-processing scores the same either way.
    assert summary == off["tiny"][0]
    line = _line("tiny", "lesion-wise Dice", summary, "lesion_dice")
    assert line.startswith("tiny lesion-wise Dice WT ") and " TC " in line and " ET " in line
    # Tumour-free cases join the same summary (seeds from S + 10000).
    with_free = evaluate_models({"tiny": model}, 2, seed=123, contract=small_contract,
                                threads=1, tumour_free=1)["tiny"][0]
    assert with_free.n_cases == 3
