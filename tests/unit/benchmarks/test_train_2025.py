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
    figures = evaluate_2025({"tiny": model}, plugin, seed=5, n_cases=1)["tiny"]
    assert figures["cases"] == 1 and figures["failures"] == 0
    assert set(figures["groups"]) == {g.name for g in plugin.scoring.groups}


def test_unknown_training_cases_refused() -> None:
    with pytest.raises(ValueError, match="post-treatment, metastases"):
        TrainConfig(synthetic="meningioma")
