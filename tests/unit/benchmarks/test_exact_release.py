"""Exact (non-private) releases are a variant of a plug-in's pin (``<version>-exact``), never
its default: the registry of plug-ins binds them, each variant reads only its own releases, and
the figures of an exact release are the cases' exact values."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import LocalExact, OpenDPGaussian
from sealbench.benchmarks.wdbc.data import load_wdbc
from sealbench.benchmarks.wdbc.model import Prediction
from sealbench.contract.pin import BenchmarkPin


@pytest.fixture(scope="module")
def plugins() -> PluginRegistry:
    return PluginRegistry()


@pytest.mark.parametrize("pin", ["wdbc/1-exact", "brats-2023-gli/1-exact",
                                 "brats-2023-gli/1-64x64x48-exact"])
def test_an_exact_pin_binds_an_exact_release_of_the_same_content(
    plugins: PluginRegistry, pin: str
) -> None:
    exact = plugins.load(BenchmarkPin.parse(pin))
    private = plugins.load(BenchmarkPin.parse(pin.removesuffix(api.EXACT_SUFFIX)))
    assert str(exact.ref) == pin and exact.release_spec.exact
    assert not private.release_spec.exact and private.release_spec.epsilon == 1.0
    assert exact.release_spec.columns == private.release_spec.columns
    assert exact.release_spec.categories == private.release_spec.categories
    assert "EXACT RELEASE" in exact.description and "EXACT" not in private.description
    assert plugins.load(BenchmarkPin.parse(pin)) is exact  # bound once


@pytest.mark.parametrize("pin", ["wdbc/1-exact-exact", "wdbc/2-exact", "nope/1-exact"])
def test_no_exact_variant_of_what_is_not_a_private_pin(plugins: PluginRegistry,
                                                       pin: str) -> None:
    with pytest.raises(api.PluginNotFoundError):
        plugins.load(BenchmarkPin.parse(pin))


def test_each_variant_reads_only_its_own_releases(plugins: PluginRegistry) -> None:
    exact = plugins.load(BenchmarkPin.parse("wdbc/1-exact"))
    private = plugins.load(BenchmarkPin.parse("wdbc/1"))
    cases = load_wdbc()[:150]
    rng = np.random.default_rng(3)
    scores = np.clip([(0.8 if c.malignant else 0.2) + rng.normal(0, 0.25) for c in cases], 0, 1)
    results = [exact.score(c, Prediction(float(p))) for c, p in zip(cases, scores, strict=True)]
    # the enclave's noise source: an exact pin adds none, whatever source it is handed
    published = exact.summarise(results, OpenDPGaussian())
    noisy = private.summarise(results, OpenDPGaussian())
    assert exact.parse_summary(published.to_json()) == published
    for reader, foreign in ((private, published), (exact, noisy)):
        with pytest.raises(api.SummaryError):
            reader.parse_summary(foreign.to_json())
    shown = {f.ref.metric: f for f in exact.figures(published)}
    y = np.array([c.malignant for c in cases])
    auc = shown["auroc"]
    assert auc.value is not None and auc.bias is not None  # read from score bins
    assert abs(auc.value - roc_auc_score(y, scores)) <= auc.bias + 1e-12
    assert exact.figures(exact.summarise(results, LocalExact())) == exact.figures(published)
