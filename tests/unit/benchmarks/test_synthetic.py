"""The synthetic generator is deterministic and produces the variety the benchmark needs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from sealbench.benchmarks.brats import BratsContract
from sealbench.benchmarks.brats.synthetic import brats_affine, generate_case


def test_same_seed_same_case_other_seed_other_case(small_contract: BratsContract) -> None:
    a = generate_case(7, small_contract.shape, small_contract)
    b = generate_case(7, small_contract.shape, small_contract)
    c = generate_case(8, small_contract.shape, small_contract)
    assert np.array_equal(a.classes, b.classes)
    assert all(np.array_equal(a.modalities[m], b.modalities[m]) for m in a.modalities)
    assert not np.array_equal(a.modalities["t1n"], c.modalities["t1n"])


def test_foci_override_makes_a_tumour_free_case_of_any_seed(
        small_contract: BratsContract) -> None:
    drawn = generate_case(7, small_contract.shape, small_contract)
    healthy = generate_case(7, small_contract.shape, small_contract, foci=0)
    assert drawn.classes.any() and not healthy.classes.any() and healthy.n_lesions == 0
    assert np.array_equal(healthy.modalities["t1n"] != 0, drawn.modalities["t1n"] != 0)
    with pytest.raises(ValueError, match="foci"):
        generate_case(7, small_contract.shape, small_contract, foci=-1)


def test_cases_vary_like_the_benchmark_needs(small_contract: BratsContract) -> None:
    no_tumour = no_et = several = 0
    for seed in range(60):
        case = generate_case(seed, small_contract.shape, small_contract)
        brain = case.modalities["t1n"] != 0
        assert not (case.classes > 0)[~brain].any()  # tumour only inside the brain
        assert set(np.unique(case.classes)) <= {0, 1, 2, 3}
        if not case.classes.any():
            no_tumour += 1
            continue
        no_et += int(not (case.classes == 3).any())
        several += int(case.n_lesions > 1)
    assert no_tumour >= 1 and no_et >= 3 and several >= 3


def test_several_lesions_are_separate_at_full_size() -> None:
    case = generate_case(9)  # a seed with three lesions
    _, n = ndimage.label(case.classes > 0, structure=np.ones((3, 3, 3)))
    assert case.n_lesions == 3 and n >= 2


def test_modalities_have_their_own_contrast(small_contract: BratsContract) -> None:
    case = generate_case(2, small_contract.shape, small_contract)
    et, snfh = case.classes == 3, case.classes == 2
    assert et.any() and snfh.any()

    def rel(m: str, mask: np.ndarray) -> float:
        image = case.modalities[m]
        return float(image[mask].mean() / image[image != 0].mean())

    assert rel("t1c", et) > 1.3 * rel("t1n", et)  # enhancing rim bright after contrast
    assert rel("t2f", snfh) > 1.3 * rel("t1n", snfh)  # oedema bright on FLAIR


def test_affine_is_the_brats_orientation() -> None:
    affine = brats_affine((240, 240, 155), (1.0, 1.0, 1.0))
    expected = np.array([[-1, 0, 0, 0], [0, -1, 0, 239], [0, 0, 1, 0], [0, 0, 0, 1]], float)
    assert np.array_equal(affine, expected)
