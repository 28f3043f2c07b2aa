"""The thick-slice acquisition that trains the reference model for clinical protocols
(``thick_slices.py``): a 1 mm stack on the grid gives the block back, a constant stays constant
through any stack, and a thick stack blurs across its slices and not along them."""

from __future__ import annotations

import numpy as np

from sealbench.benchmarks.brats.thick_slices import (
    MARGIN,
    MAX_THICKNESS_MM,
    Acquisition,
    acquire_and_back,
    draw_acquisition,
)

SIDE = 24
AXIAL = np.eye(3)


def _inner(window: np.ndarray) -> np.ndarray:
    return window[MARGIN:-MARGIN, MARGIN:-MARGIN, MARGIN:-MARGIN]


def _slab(axis: int) -> np.ndarray:
    """A 2 mm slab across ``axis`` through the window's centre (a thin structure)."""
    window = np.zeros((SIDE + 2 * MARGIN,) * 3, dtype=np.float32)
    index = [slice(None)] * 3
    centre = (SIDE + 2 * MARGIN) // 2
    index[axis] = slice(centre - 1, centre + 1)
    window[tuple(index)] = 1.0
    return window


def test_a_1mm_stack_on_the_grid_gives_the_block_back() -> None:
    window = np.random.default_rng(0).random((SIDE + 2 * MARGIN,) * 3, dtype=np.float32)
    back = acquire_and_back(window, Acquisition(AXIAL, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)))
    assert back.shape == (SIDE,) * 3
    np.testing.assert_allclose(back, _inner(window), atol=1e-4)


def test_a_constant_stays_constant_through_any_stack() -> None:
    rng = np.random.default_rng(1)
    window = np.full((SIDE + 2 * MARGIN,) * 3, 2.5, dtype=np.float32)
    for _ in range(4):
        acquisition = draw_acquisition(rng)
        assert 1.0 <= acquisition.spacing[2] <= MAX_THICKNESS_MM
        np.testing.assert_allclose(acquire_and_back(window, acquisition, 2.5), 2.5, atol=1e-4)


def test_a_thick_stack_blurs_across_its_slices_only() -> None:
    thick = Acquisition(AXIAL, (1.0, 1.0, 3.0), (0.0, 0.0, 0.5))
    # A slab across z (the slice axis) is spread over several millimetres and loses its peak...
    across = acquire_and_back(_slab(2), thick)[SIDE // 2, SIDE // 2]
    assert across.max() < 0.8 and (across > 0.1).sum() > 2
    # ...one across x (in the slices' plane) keeps its 2 mm and its height.
    along = acquire_and_back(_slab(0), thick)[:, SIDE // 2, SIDE // 2]
    assert along.max() > 0.95 and (along > 0.5).sum() == 2
