"""The BraTS 2025 generators (:mod:`sealbench.benchmarks.brats.tasks2025`): post-treatment cases
carry a resection cavity (label 4) with its rim and oedema and the cavity's fluid looks like
fluid; metastasis cases carry several separate lesions of varied size; a seed always gives the
same bytes; the cases prepare under the 2025 contracts; previews show the cavity."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage  # type: ignore[import-untyped]

from sealbench.benchmarks import registry
from sealbench.benchmarks.brats import BRATS_2023_GLI
from sealbench.benchmarks.brats.anatomy import encode_png, preview_rgb
from sealbench.benchmarks.brats.contract import BRATS_2025_GLI, BRATS_2025_MET, BratsContract
from sealbench.benchmarks.brats.evaluate import prepared_case
from sealbench.benchmarks.brats.plugin import BratsBenchmark
from sealbench.benchmarks.brats.tasks2025 import (
    Anatomy,
    generate_metastases_case,
    generate_post_treatment_case,
    main,
)
from sealbench.contract.pin import BenchmarkPin

SMALL = (64, 64, 48)
NETC, SNFH, ET, RC = 1, 2, 3, 4
ANATOMIES: list[Anatomy] = ["geometric", "template"]


def _anatomy(anatomy: Anatomy) -> Anatomy:
    if anatomy == "template":
        pytest.importorskip("nilearn", reason="the MNI template (datasets extra)")
    return anatomy


def _small(contract: BratsContract) -> BratsContract:
    return contract.model_copy(update={"shape": SMALL})


@pytest.mark.parametrize("anatomy", ANATOMIES)
def test_post_treatment_cases_hold_a_cavity_with_rim_and_oedema(anatomy: Anatomy) -> None:
    with_et = 0
    for seed in range(1, 5):
        case = generate_post_treatment_case(seed, SMALL, _small(BRATS_2025_GLI),
                                            anatomy=_anatomy(anatomy))
        labels = case.classes
        cavity = labels == RC
        assert cavity.any() and (labels == SNFH).any(), seed
        assert set(np.unique(labels).tolist()) <= {0, NETC, SNFH, ET, RC}
        around = ndimage.binary_dilation(cavity, iterations=2) & ~cavity
        assert np.isin(labels[around], (SNFH, ET, NETC)).mean() > 0.5, seed
        with_et += bool((labels == ET).any())
        t2, t1c, flair = (case.modalities[m] for m in ("t2w", "t1c", "t2f"))
        brain = (t2 > 0) & (labels == 0)
        # (small cavities on the small grid: partial volume with the rim and the oedema)
        assert t2[cavity].mean() > 1.5 * np.median(t2[brain]), "fluid is bright on T2"
        assert t1c[cavity].mean() < 0.8 * np.median(t1c[brain]), "fluid is dark on T1c"
        assert flair[cavity].mean() < 0.7 * flair[labels == SNFH].mean(), "suppressed fluid"
    assert with_et >= 3


@pytest.mark.parametrize("anatomy", ANATOMIES)
def test_metastases_are_several_separate_lesions_of_varied_size(anatomy: Anatomy) -> None:
    several, every = 0, []
    for seed in range(1, 6):
        case = generate_metastases_case(seed, SMALL, _small(BRATS_2025_MET),
                                        anatomy=_anatomy(anatomy))
        labels = case.classes
        assert not (labels == RC).any()
        core = (labels == NETC) | (labels == ET)
        found, n = ndimage.label(core, structure=np.ones((3, 3, 3), dtype=bool))
        assert n == case.n_lesions, seed  # every lesion separate from the others
        sizes = np.bincount(found.ravel())[1:]
        every += sizes.tolist()
        several += n >= 2
        if n >= 3:
            assert sizes.max() >= 4 * sizes.min(), (seed, sizes)
        assert (labels == SNFH).any()
    assert several >= 3
    assert max(every) >= 10 * min(every)


def test_large_metastases_ring_enhance() -> None:
    case = generate_metastases_case(4, BRATS_2025_MET.shape, BRATS_2025_MET, foci=2,
                                    anatomy="geometric")
    labels = case.classes
    found, n = ndimage.label((labels == NETC) | (labels == ET), np.ones((3, 3, 3), bool))
    assert n == 2
    largest = found == 1 + int(np.argmax(np.bincount(found.ravel())[1:]))
    assert (labels[largest] == NETC).any() and (labels[largest] == ET).any()
    inner = ndimage.binary_erosion(largest)
    assert (labels[largest & ~inner] == ET).mean() > 0.9, "the rim enhances"
    assert (labels[ndimage.binary_erosion(largest, iterations=3)] == NETC).mean() > 0.9


def test_tumour_free_cases_on_request() -> None:
    for generate in (generate_post_treatment_case, generate_metastases_case):
        case = generate(3, SMALL, _small(BRATS_2025_GLI), foci=0, anatomy="geometric")
        assert not case.classes.any() and case.n_lesions == 0


def test_a_2023_contract_refused() -> None:
    with pytest.raises(ValueError, match="resection cavity"):
        generate_post_treatment_case(1, SMALL, _small(BRATS_2023_GLI), anatomy="geometric")


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*.nii.gz")):
        h.update(path.relative_to(folder).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("pin", ["brats-2025-gli/1-64x64x48", "brats-2025-met/1-64x64x48"])
def test_demo_data_are_the_tasks_cases_and_the_same_seed_the_same_bytes(
        pin: str, tmp_path: Path) -> None:
    plugin = registry.load(BenchmarkPin.parse(pin))
    first = plugin.write_demo_dataset(tmp_path / "a", 3, seed=7)
    again = plugin.write_demo_dataset(tmp_path / "b", 3, seed=7)
    other = plugin.write_demo_dataset(tmp_path / "c", 3, seed=8)
    assert first == again
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") != _digest(tmp_path / "c")
    assert all(i.startswith("BraTS-GLI-" if "gli" in pin else "BraTS-MET-") for i in other)


@pytest.mark.parametrize(("pin", "generate", "expected"), [
    ("brats-2025-gli/1-64x64x48", generate_post_treatment_case, {SNFH, RC}),
    ("brats-2025-met/1-64x64x48", generate_metastases_case, {SNFH, ET}),
])
def test_cases_prepare_under_the_2025_contracts(pin: str, generate: object,
                                                expected: set[int]) -> None:
    plugin = registry.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, BratsBenchmark) and callable(generate)
    prefix = "BraTS-GLI" if "gli" in pin else "BraTS-MET"
    with tempfile.TemporaryDirectory() as work:
        for seed in (2, 5):
            made = generate(seed, plugin.contract.shape, plugin.contract, anatomy="geometric")
            case = prepared_case(made, f"{prefix}-{seed:05d}-000", plugin, Path(work))
            assert case.seg is not None
            assert expected <= set(np.unique(case.seg).tolist())
            assert case.seg.sum() > 0 and (case.seg > 0).sum() == (made.classes > 0).sum()


def test_preview_shows_the_cavity(tmp_path: Path) -> None:
    case = generate_post_treatment_case(1, SMALL, _small(BRATS_2025_GLI), anatomy="geometric")
    z = int(np.argwhere(case.classes == RC)[:, 2].mean())
    strip = preview_rgb(case, z)
    assert (strip.reshape(-1, 3) == (0, 0, 0)).all(axis=1).mean() < 0.95
    overlay = strip[:, -SMALL[0]:].astype(int)
    bluish = (overlay[..., 2] > overlay[..., 0] + 60).sum()
    assert bluish >= (case.classes[:, :, z] == RC).sum() // 2
    assert encode_png(strip).startswith(b"\x89PNG\r\n\x1a\n")
    assert main([str(tmp_path), "3", "--kind", "metastases", "--anatomy", "geometric"]) == 0
    assert (tmp_path / "synthetic-metastases-3.png").read_bytes().startswith(b"\x89PNG")
