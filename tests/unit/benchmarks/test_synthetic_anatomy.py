"""The anatomy-based generator: real template anatomy, seeded, tumours with the structure the
benchmark needs (the PNGs in docs/img show what it looks like)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from sealbench.benchmarks.brats import BratsContract, anatomy
from sealbench.benchmarks.brats.anatomy import encode_png, generate_anatomy_case, preview_rgb

SEEDS = range(24)


@pytest.fixture(scope="module")
def cases(request: pytest.FixtureRequest) -> list[anatomy.SyntheticCase]:
    from sealbench.benchmarks.brats.contract import BRATS_2023_GLI

    contract = BRATS_2023_GLI.with_shape((64, 64, 48))
    return [generate_anatomy_case(seed, contract.shape, contract) for seed in SEEDS]


def test_same_seed_same_case_other_seed_other_case(small_contract: BratsContract) -> None:
    a = generate_anatomy_case(7, small_contract.shape, small_contract)
    b = generate_anatomy_case(7, small_contract.shape, small_contract)
    c = generate_anatomy_case(8, small_contract.shape, small_contract)
    assert np.array_equal(a.classes, b.classes)
    assert all(np.array_equal(a.modalities[m], b.modalities[m]) for m in a.modalities)
    assert not np.array_equal(a.modalities["t1n"] != 0, c.modalities["t1n"] != 0)  # anatomy too


def test_cases_vary_like_the_benchmark_needs(cases: list[anatomy.SyntheticCase]) -> None:
    no_tumour = no_et = several = 0
    for case in cases:
        brain = case.modalities["t1n"] != 0
        assert all(np.array_equal(m != 0, brain) for m in case.modalities.values())
        assert not (case.classes > 0)[~brain].any()
        assert set(np.unique(case.classes)) <= {0, 1, 2, 3}
        if not case.classes.any():
            no_tumour += 1
            continue
        no_et += int(not (case.classes == 3).any())
        components, n = ndimage.label(case.classes > 0, structure=np.ones((3, 3, 3)))
        several += int(n > 1)
        assert n <= case.n_lesions  # foci may touch; no stray islands:
        assert set(np.unique(components[case.classes % 2 == 1])) == set(range(1, n + 1))
    assert no_tumour >= 1 and no_et >= 3 and several >= 3


def test_brain_is_the_template_brain_shape(cases: list[anatomy.SyntheticCase]) -> None:
    for case in cases[:4]:
        brain = case.modalities["t1n"] != 0
        filled = ndimage.binary_fill_holes(brain)
        extent = np.ptp(np.argwhere(brain), axis=0) + 1
        # Longer front-to-back than left-to-right (a real brain), and one solid piece.
        assert extent[1] > 1.1 * extent[0]
        assert ndimage.label(brain)[1] <= 3 and filled.sum() < 1.05 * brain.sum()


def test_tissue_contrast_is_anatomical(cases: list[anatomy.SyntheticCase]) -> None:
    case = next(c for c in cases if (c.classes == 3).any() and (c.classes == 1).any())
    t1n, t1c, t2w, t2f = (case.modalities[m] for m in ("t1n", "t1c", "t2w", "t2f"))
    healthy = (t1n != 0) & (case.classes == 0)

    def rel(image: np.ndarray, mask: np.ndarray) -> float:
        return float(image[mask].mean() / image[healthy].mean())

    # T1: white matter (bright in T1) is dark in T2, grey matter in between: across healthy
    # voxels, T1 and T2 intensities are anti-correlated.
    assert np.corrcoef(t1n[healthy], t2w[healthy])[0, 1] < -0.3
    et, snfh, ncr = case.classes == 3, case.classes == 2, case.classes == 1
    assert rel(t1c, et) > 1.3 * rel(t1n, et)  # enhancing rim bright after contrast
    assert rel(t2f, snfh) > 1.3 * rel(t1n, snfh)  # oedema bright on FLAIR
    assert rel(t1c, ncr) < rel(t1c, et)  # necrosis does not enhance


def test_enhancing_rim_surrounds_the_necrosis(cases: list[anatomy.SyntheticCase]) -> None:
    case = next(c for c in cases if (c.classes == 3).sum() > 100 and (c.classes == 1).sum() > 100)
    ncr = case.classes == 1
    shell = ndimage.binary_dilation(ncr) & ~ncr
    # The necrosis borders the rim (or the brain edge), not the oedema directly, mostly.
    assert (case.classes[shell] == 3).mean() > 0.7


def test_missing_nilearn_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    anatomy.load_template.cache_clear()
    monkeypatch.setattr(anatomy.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match=r"sealbench\[datasets\]"):
        anatomy.load_template()
    monkeypatch.undo()
    anatomy.load_template.cache_clear()


def test_preview_png_is_a_valid_png(cases: list[anatomy.SyntheticCase]) -> None:
    rgb = preview_rgb(cases[0])
    data = encode_png(rgb)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (height, width) == rgb.shape[:2]
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4:idat])
    raw = zlib.decompress(data[idat + 4:idat + 4 + length])
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, 1 + width * 3)
    assert np.array_equal(rows[:, 1:].reshape(rgb.shape), rgb)


def test_foci_override_keeps_the_seeds_anatomy(small_contract: BratsContract) -> None:
    drawn = generate_anatomy_case(11, small_contract.shape, small_contract)
    healthy = generate_anatomy_case(11, small_contract.shape, small_contract, foci=0)
    two = generate_anatomy_case(11, small_contract.shape, small_contract, foci=2)
    assert drawn.classes.any() and not healthy.classes.any() and healthy.n_lesions == 0
    assert two.n_lesions == 2
    # Same seed, same brain: only the tumours differ.
    assert np.array_equal(healthy.modalities["t1n"] != 0, drawn.modalities["t1n"] != 0)
    with pytest.raises(ValueError, match="foci"):
        generate_anatomy_case(11, small_contract.shape, small_contract, foci=-1)


def test_mass_effect_pushes_tissue_away_from_the_core_and_the_skull_holds() -> None:
    shape = (41, 41, 41)
    classes = np.zeros(shape, dtype=np.uint8)
    x, y, z = np.indices(shape)
    classes[(x - 20) ** 2 + (y - 20) ** 2 + (z - 20) ** 2 <= 5 ** 2] = 1
    brain = np.zeros(shape, dtype=bool)
    brain[2:-2, 2:-2, 2:-2] = True
    ramp = x.astype(np.float32)
    maps = {"t1": ramp, "gm": ramp / 40, "wm": 1 - ramp / 40, "mask": brain.astype(np.float32)}
    moved = anatomy._mass_effect(np.random.default_rng(0), classes, brain, maps, voxel_mm=1.0)
    assert moved["mask"] is maps["mask"]  # the brain's outline does not move
    line = moved["t1"][:, 20, 20]
    # Along +x the tissue seen at each point came from nearer the core (value below its own
    # x), along -x likewise from nearer (above); still increasing: one-to-one, no folding.
    assert (line[26:32] < ramp[26:32, 20, 20] - 0.5).all()
    assert (line[9:15] > ramp[9:15, 20, 20] + 0.5).all()
    assert (np.diff(line[2:-2]) > 0).all()
    assert line[20] == pytest.approx(20.0, abs=1e-3)  # the centre stays
    # At the brain's edge the displacement has faded to nothing.
    assert moved["t1"][2, 20, 20] == pytest.approx(2.0, abs=1e-3)
    assert moved["t1"][-3, 20, 20] == pytest.approx(38.0, abs=1e-3)


def test_mass_effect_is_optional_and_changes_only_the_healthy_tissue(
        small_contract: BratsContract) -> None:
    plain = generate_anatomy_case(11, small_contract.shape, small_contract)
    pushed = generate_anatomy_case(11, small_contract.shape, small_contract, mass_effect=True)
    assert plain.classes.any()
    assert np.array_equal(plain.classes, pushed.classes)
    for name in plain.modalities:
        assert np.array_equal(plain.modalities[name] != 0, pushed.modalities[name] != 0)
        assert not np.array_equal(plain.modalities[name], pushed.modalities[name])
    healthy = generate_anatomy_case(11, small_contract.shape, small_contract, foci=0)
    healthy_pushed = generate_anatomy_case(11, small_contract.shape, small_contract, foci=0,
                                           mass_effect=True)
    assert all(np.array_equal(healthy.modalities[m], healthy_pushed.modalities[m])
               for m in healthy.modalities)


def test_preview_cli_writes_a_png_per_seed(tmp_path: Path) -> None:
    assert anatomy.main([str(tmp_path), "5", "--mass-effect"]) == 0
    assert (tmp_path / "synthetic-anatomy-5-mass-effect.png").read_bytes()[:8] == \
        b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit) as stopped:
        anatomy.main([str(tmp_path)])
    assert stopped.value.code == 2
