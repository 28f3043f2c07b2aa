"""The reference model's training module: fine-tuning starts from an exported U-Net's own
weights, the declared post-processing lands in the ONNX metadata, and bad arguments are refused
before any case is generated (torch is in the dev extra; nothing here trains for long)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from sealbench.benchmarks.brats import BratsContract
from sealbench.benchmarks.brats.postprocess import METADATA_KEY, PostProcess
from sealbench.benchmarks.brats.synthetic import SyntheticCase, generate_case
from sealbench.benchmarks.brats.train import (
    TrainConfig,
    check_parity,
    export_onnx,
    init_params,
    main,
    params_from_onnx,
    train,
)

CHANNELS = (4, 8)


def _weights(model: bytes) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t)
            for t in onnx.load_from_string(model).graph.initializer}


def test_fine_tuning_starts_from_the_exported_weights() -> None:
    params = init_params(CHANNELS, torch.Generator().manual_seed(3))
    model = export_onnx(params, len(CHANNELS))
    again = export_onnx(params_from_onnx(model, CHANNELS), len(CHANNELS))
    first, second = _weights(model), _weights(again)
    assert first.keys() == second.keys()
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert check_parity(again, CHANNELS) <= 1e-5


def test_a_model_of_other_channels_is_refused() -> None:
    model = export_onnx(init_params(CHANNELS, torch.Generator().manual_seed(0)), len(CHANNELS))
    with pytest.raises(ValueError, match="not a U-Net with channels"):
        params_from_onnx(model, (8, 16))


def test_zero_steps_re_export_the_initial_model_with_its_declared_postprocessing() -> None:
    model = export_onnx(init_params(CHANNELS, torch.Generator().manual_seed(1)), len(CHANNELS))
    declared = PostProcess(min_component_mm3=200, et_min_mm3=50)
    out = train(TrainConfig(channels=CHANNELS, steps=0, init=model),
                metadata=declared.to_metadata())
    props = {p.key: p.value for p in onnx.load_from_string(out).metadata_props}
    assert PostProcess.model_validate_json(props[METADATA_KEY]) == declared
    first, second = _weights(model), _weights(out)
    assert all(np.array_equal(first[k], second[k]) for k in first)


def test_cli_declares_postprocessing_and_refuses_bad_arguments(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    initial = tmp_path / "initial.onnx"
    initial.write_bytes(export_onnx(init_params(CHANNELS, torch.Generator().manual_seed(2)),
                                    len(CHANNELS)))
    out = tmp_path / "declared.onnx"
    channels = [str(c) for c in CHANNELS]
    assert main(["--out", str(out), "--init", str(initial), "--steps", "0",
                 "--channels", *channels, "--postprocess",
                 '{"min_component_mm3": 100, "et_min_mm3": 25, "min_core_mm3": 50}']) == 0
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert PostProcess.model_validate_json(props[METADATA_KEY]) == PostProcess(
        min_component_mm3=100, et_min_mm3=25, min_core_mm3=50)
    for bad in (["--steps", "0"], ["--steps", "-1"],
                ["--init", str(initial), "--steps", "0", "--channels", *channels,
                 "--postprocess", '{"min_component_mm3": -5, "et_min_mm3": 0}']):
        with pytest.raises(SystemExit) as stopped:
            main(["--out", str(tmp_path / "never.onnx"), *bad])
        assert stopped.value.code == 2
    assert not (tmp_path / "never.onnx").exists()
    assert "--postprocess" in capsys.readouterr().err


def test_tumour_free_cases_join_the_training_set_with_their_own_seeds(
        monkeypatch: pytest.MonkeyPatch, small_contract: BratsContract) -> None:
    from sealbench.benchmarks.brats import train as train_module

    drawn: list[tuple[int, int | None]] = []

    def small_case(seed: int, *, foci: int | None = None) -> SyntheticCase:
        drawn.append((seed, foci))
        return generate_case(seed, small_contract.shape, small_contract, foci=foci)

    monkeypatch.setattr(train_module, "generate_case", small_case)
    cases = train_module._load_cases(TrainConfig(seed=2, n_cases=3, tumour_free=2))
    assert drawn == [(102_000, None), (102_001, None), (102_002, None),
                     (102_500, 0), (102_501, 0)]
    assert len(cases) == 5
    assert not any(classes.any() for _, classes, _ in cases[3:])
    with pytest.raises(ValueError, match="tumour-free"):
        TrainConfig(tumour_free=501)


def test_cli_refuses_a_negative_tumour_free_count(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--out", str(tmp_path / "never.onnx"), "--tumour-free", "-1"])
    assert stopped.value.code == 2
    assert not (tmp_path / "never.onnx").exists()


def test_thick_slice_crops_are_the_case_blurred_across_slices_and_zero_outside_the_brain(
        small_contract: BratsContract) -> None:
    """--thick-slices: a crop's sequences acquired through random thick stacks and back are
    still the case (close to the direct crop inside the brain), blurred (not equal to it), zero
    outside the brain, and the crop's labels are the direct ones."""
    from sealbench.benchmarks.brats import train as train_module

    case = generate_case(3, small_contract.shape, small_contract)
    image = train_module.normalise_modalities(case.modalities)
    zero = np.array([-float(np.asarray(m, np.float64)[image.any(axis=0)].mean())
                     / float(np.asarray(m, np.float64)[image.any(axis=0)].std())
                     for m in case.modalities.values()], dtype=np.float32)
    cases = [(image.astype(np.float16), case.classes.copy(), zero)]
    plain_rng, thick_rng = np.random.default_rng(5), np.random.default_rng(5)
    plain, plain_y = train_module._sample(cases, 32, plain_rng)
    thick, thick_y = train_module._sample(cases, 32, thick_rng, thick_slices=1.0)
    assert np.array_equal(plain_y, thick_y)
    brain = plain.any(axis=0)
    assert brain.mean() > 0.3 and not thick[:, ~brain].any()
    assert not np.array_equal(plain, thick)
    # On this small grid a 4.5 mm slice is a large blur (correlations 0.78-0.95 at this seed); a
    # crop misplaced or a stack mis-oriented would correlate near 0.
    for channel in range(4):
        inside = brain & ~np.isclose(plain[channel], 0.0)
        assert np.corrcoef(plain[channel][inside], thick[channel][inside])[0, 1] > 0.6
