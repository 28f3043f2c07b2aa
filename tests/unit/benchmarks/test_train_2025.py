"""The trainer on the 2025 tasks' cases: a 5-class U-Net (RC included) that the 2025 pins'
model contract accepts, and the held-out evaluation of such a model through the pin."""

from __future__ import annotations

import pytest

from sealbench.benchmarks import registry
from sealbench.benchmarks.brats.evaluate2025 import evaluate_2025
from sealbench.benchmarks.brats.model_contract import check_model_contract
from sealbench.benchmarks.brats.plugin2025 import Brats2025Benchmark
from sealbench.contract.pin import BenchmarkPin

pytest.importorskip("torch", reason="the train extra")

from sealbench.benchmarks.brats.train import TrainConfig, check_parity, train


@pytest.mark.parametrize(("task", "pin"), [("post-treatment", "brats-2025-gli/1-64x64x48"),
                                           ("metastases", "brats-2025-met/1-64x64x48")])
def test_five_class_model_trained_and_evaluated_on_the_pin(task: str, pin: str) -> None:
    cfg = TrainConfig(synthetic=task, grid=(64, 64, 48), crop=32, n_cases=1, steps=2,
                      channels=(4, 8), threads=1)
    assert cfg.n_classes == 5
    model = train(cfg)
    check_parity(model, cfg.channels)
    plugin = registry.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, Brats2025Benchmark)
    assert check_model_contract(model, plugin.contract).output_classes == 5
    figures = evaluate_2025({"tiny": model}, plugin, seed=5, n_cases=2, sites=2)["tiny"]
    assert figures["cases"] == 2 and figures["failures"] == 0
    assert set(figures["groups"]) == {g.name for g in plugin.scoring.groups}
    # each site's summary released with noise and pooled as the leaderboard pools them; the
    # exact pooling is the mean over cases of the per-case figures
    released = figures["released"]
    assert released["sites"] == 2 and set(released["private"]) == set(released["exact"])
    for group, means in figures["groups"].items():
        exact = released["exact"][f"dsc {group}"][0]
        assert means["nan"] or exact == pytest.approx(means["dsc"], abs=1e-4)


def test_a_2023_model_starts_a_2025_one_with_an_rc_row() -> None:
    """Fine-tuning the 4-class 2023 network for a 2025 task: every weight kept, the head
    widened by one RC row whose bias starts the class rare."""
    import numpy as np
    import onnx

    from sealbench.benchmarks.brats.train import params_from_onnx

    four = train(TrainConfig(synthetic="cartoon", grid=(32, 32, 32), crop=32, n_cases=1,
                             steps=1, channels=(4, 8), threads=1))
    widened = params_from_onnx(four, (4, 8), n_classes=5)
    original = {t.name: onnx.numpy_helper.to_array(t)
                for t in onnx.load_from_string(four).graph.initializer}
    assert widened["head.w"].shape[0] == 5 and widened["head.b"].shape[0] == 5
    for name, value in original.items():
        assert np.array_equal(widened[name].detach().numpy()[: value.shape[0]], value), name
    bias = widened["head.b"].detach().numpy()
    assert float(bias[4]) == pytest.approx(float(original["head.b"][0]) - 4.0)
    with pytest.raises(ValueError, match="can start a model of 4 or 5, not 6"):
        params_from_onnx(four, (4, 8), n_classes=6)
    tuned = train(TrainConfig(synthetic="metastases", grid=(64, 64, 48), crop=32, n_cases=1,
                              steps=1, channels=(4, 8), threads=1, init=four))
    check_parity(tuned, (4, 8))


def test_unknown_training_cases_refused() -> None:
    with pytest.raises(ValueError, match="post-treatment, metastases"):
        TrainConfig(synthetic="meningioma")
