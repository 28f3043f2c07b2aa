"""ONNX Runtime inference: window tiling, Gaussian blending, whole-volume and sliding-window
passes agreeing, and output in the contract's label convention."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from sealbench.benchmarks.brats import BRATS2021_LABELS, BratsContract, Case, OnnxSegmenter
from sealbench.benchmarks.brats.inference import gaussian_importance, sliding_windows
from sealbench.benchmarks.brats.synthetic import generate_case


def _case(contract: BratsContract, seed: int = 1) -> Case:
    synthetic = generate_case(seed, contract.shape, contract)
    return Case(case_id="BraTS-GLI-00001-000", modalities=synthetic.modalities,
                affine=synthetic.affine, seg=None)


def test_windows_cover_the_volume_with_the_last_flush() -> None:
    windows = sliding_windows((100, 64, 40), (32, 32, 32), 0.5)
    covered = np.zeros((100, 64, 40), dtype=int)
    for w in windows:
        covered[w] += 1
        assert all(s.stop - s.start == 32 for s in w)
    assert covered.min() >= 1
    assert {w[0].stop for w in windows} >= {100}
    assert {w[2].start for w in windows} == {0, 8}


def test_gaussian_importance_peaks_in_the_centre() -> None:
    g = gaussian_importance((16, 16, 16))
    assert g.max() == pytest.approx(1.0) and g.min() >= 1e-3
    assert g[8, 8, 8] > g[4, 8, 8] > g[0, 0, 0] == pytest.approx(1e-3)


def test_pointwise_model_gives_the_same_labels_whole_or_sliding(
        make_model: Callable[..., bytes], small_contract: BratsContract) -> None:
    # A 1x1x1 convolution has no spatial context, so both passes must agree exactly.
    model = make_model()
    case = _case(small_contract)
    whole = OnnxSegmenter(model, small_contract, mode="whole", threads=1).segment(case)
    sliding = OnnxSegmenter(model, small_contract, mode="sliding", roi=(32, 32, 32),
                            threads=1).segment(case)
    assert whole.shape == small_contract.shape and whole.dtype == np.uint8
    assert np.array_equal(whole, sliding)


def test_labels_follow_the_contract_convention(make_model: Callable[..., bytes],
                                               small_contract: BratsContract) -> None:
    contract21 = small_contract.model_copy(update={"label_map": BRATS2021_LABELS})
    case = _case(small_contract)
    labels23 = OnnxSegmenter(make_model(), small_contract, threads=1).segment(case)
    labels21 = OnnxSegmenter(make_model(), contract21, threads=1).segment(case)
    assert set(np.unique(labels21).tolist()) <= {0, 1, 2, 4}
    assert np.array_equal(BRATS2021_LABELS.to_class_indices(labels21), labels23)


def test_missing_modality_is_an_inference_error(make_model: Callable[..., bytes],
                                                small_contract: BratsContract) -> None:
    from sealbench.benchmarks.brats import InferenceError

    case = _case(small_contract)
    del case.modalities["t2f"]
    with pytest.raises(InferenceError, match="t2f"):
        OnnxSegmenter(make_model(), small_contract, threads=1).segment(case)


def test_small_components_are_removed_and_large_kept() -> None:
    from sealbench.benchmarks.brats.inference import remove_small_components

    classes = np.zeros((20, 20, 20), dtype=np.uint8)
    classes[2:8, 2:8, 2:8] = 2  # 216 voxels
    classes[4:6, 4:6, 4:6] = 3
    classes[15:17, 15:17, 15:17] = 1  # 8 voxels
    out = remove_small_components(classes.copy(), min_voxels=10)
    assert not out[15:17, 15:17, 15:17].any()
    assert np.array_equal(out[:10, :10, :10], classes[:10, :10, :10])
    assert np.array_equal(remove_small_components(classes.copy(), 0), classes)


def test_full_grid_slides_and_small_grids_run_whole(make_model: Callable[..., bytes],
                                                    small_contract: BratsContract) -> None:
    from sealbench.benchmarks.brats import BRATS_2023_GLI

    segmenter = OnnxSegmenter(make_model(), BRATS_2023_GLI, threads=1)
    assert segmenter.plan(BRATS_2023_GLI.shape) == "sliding"  # bounded memory at full size
    assert segmenter.plan(small_contract.shape) == "whole"
    assert OnnxSegmenter(make_model(), BRATS_2023_GLI, threads=1,
                         mode="whole").plan(BRATS_2023_GLI.shape) == "whole"
    # The default windows on the padded full grid (240x240x160): two per axis.
    assert len(sliding_windows((240, 240, 160), (128, 128, 128), 0.125)) == 8


def test_brain_box_bounds_the_non_zero_voxels() -> None:
    from sealbench.benchmarks.brats.inference import brain_box

    image = np.zeros((4, 30, 20, 10), dtype=np.float32)
    assert brain_box(image) is None
    image[2, 5, 7, 3] = 1.0
    image[0, 9, 2, 8] = -0.5
    assert brain_box(image) == (slice(5, 10), slice(2, 8), slice(3, 9))


def test_cropping_to_the_brain_changes_no_label_of_a_pointwise_model(
        make_model: Callable[..., bytes], small_contract: BratsContract) -> None:
    case = _case(small_contract)
    for name in case.modalities:  # a brain that fills only part of the grid
        case.modalities[name][:10] = 0
        case.modalities[name][:, -7:] = 0
    cropped = OnnxSegmenter(make_model(), small_contract, threads=1, postprocess=None)
    full = OnnxSegmenter(make_model(), small_contract, threads=1, postprocess=None, crop=False)
    labels = cropped.segment(case)
    assert labels.shape == small_contract.shape
    assert np.array_equal(labels, full.segment(case))
    assert not labels[:10].any() and not labels[:, -7:].any()


def test_an_empty_case_is_all_background(make_model: Callable[..., bytes],
                                         small_contract: BratsContract) -> None:
    case = _case(small_contract)
    for name in case.modalities:
        case.modalities[name][...] = 0
    labels = OnnxSegmenter(make_model(), small_contract, threads=1).segment(case)
    assert labels.shape == small_contract.shape and not labels.any()


def test_segmenter_keeps_no_cpu_arena_across_cases(small_contract: BratsContract) -> None:
    """ONNX Runtime's arena keeps the first case's blocks and grows for the next crop shape
    (1.9 GiB for 4 full-size cases); the segmenter runs without it, and the reference model's
    labels on cases of two crop shapes are the same as with it."""
    from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes

    model = load_model_bytes(load_definition().reference_model)
    lean = OnnxSegmenter(model, small_contract, threads=1)
    assert lean._session.get_session_options().enable_cpu_mem_arena is False
    arena = OnnxSegmenter(model, small_contract, threads=1, cpu_arena=True)
    assert arena._session.get_session_options().enable_cpu_mem_arena is True
    for seed in (3, 4):
        case = _case(small_contract, seed)
        assert np.array_equal(lean.segment(case), arena.segment(case))
