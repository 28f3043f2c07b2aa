"""A benchmark that pools in the TEE publishes no per-site release by default (issue 41, part
4): its pin ends in ``-pool`` (the owners' key-release conditions bind the pin, so neither a
hospital's operator nor the registry can turn per-site releases on after consent), the plug-in
of that pin pools exactly as the base pin does, and a run under it publishes a withheld summary
(rule ``pooled``) without drawing any noise: no per-site release exists to be charged."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.pooling import pooled_release_spec
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.results import public_summary
from sealbench.benchmarks.wdbc.data import load_wdbc
from sealbench.benchmarks.wdbc.model import Prediction
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.workload import WorkloadIdentity


@pytest.fixture(scope="module")
def plugins() -> PluginRegistry:
    return PluginRegistry()


@pytest.mark.parametrize("pin", ["wdbc/1-pool", "wdbc/1-exact-pool",
                                 "brats-2023-gli/1-pool", "brats-2023-gli/1-64x64x48-pool"])
def test_a_pool_pin_is_its_base_pin_without_per_site_releases(plugins: PluginRegistry,
                                                               pin: str) -> None:
    pooled = plugins.load(BenchmarkPin.parse(pin))
    base = plugins.load(BenchmarkPin.parse(pin.removesuffix(api.POOLED_ONLY_SUFFIX)))
    assert str(pooled.ref) == pin and plugins.load(BenchmarkPin.parse(pin)) is pooled
    assert not api.publishes_site_release(pooled) and api.publishes_site_release(base)
    # the pooled release (what the aggregator draws and the authorization debits) is the base's
    assert pooled_release_spec(pooled) == pooled_release_spec(base)
    assert pooled.release_spec == base.release_spec
    assert "POOLED ONLY" in pooled.description and "POOLED ONLY" not in base.description


@pytest.mark.parametrize("pin", ["wdbc/1-pool-pool", "wdbc/1-pool-exact", "nope/1-pool",
                                 "wdbc/2-pool"])
def test_no_pool_variant_of_what_is_not_a_pin(plugins: PluginRegistry, pin: str) -> None:
    with pytest.raises(api.PluginNotFoundError):
        plugins.load(BenchmarkPin.parse(pin))


class _NoDraw:
    """A noise source that fails the test if anything is drawn from it."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"noise drawn ({name}) under a pooled-only pin")


def _results(plugin: api.Benchmark, n: int) -> Sequence[api.CaseResult]:
    cases = load_wdbc()[:n]
    return [plugin.score(c, Prediction(0.8 if c.malignant else 0.2)) for c in cases]


def test_a_run_under_a_pool_pin_publishes_no_release_and_draws_no_noise(
        plugins: PluginRegistry) -> None:
    pooled = plugins.load(BenchmarkPin.parse("wdbc/1-pool"))
    results = _results(pooled, 60)
    aggregates, withheld = public_summary(pooled, results, _NoDraw())  # type: ignore[arg-type]
    assert aggregates == {} and withheld is not None
    assert (withheld.rule, withheld.n_cases, withheld.minimum) == (
        "pooled", 60, pooled.small_cell_minimum)
    # the base pin publishes its per-site release of the very same run
    base = plugins.load(BenchmarkPin.parse("wdbc/1"))
    from sealbench.benchmarks.release import OpenDPGaussian

    published, held = public_summary(base, _results(base, 60), OpenDPGaussian())
    assert held is None and published


def test_the_choice_is_part_of_the_uid_each_owner_grants() -> None:
    """A hospital's operator who launches the evaluation with the base pin (per-site releases)
    presents another workload uid than the one the owners granted for the benchmark's -pool pin:
    no key is released to it. The registry cannot change a benchmark's pin after creation."""
    digest = "sha256:" + "a" * 64
    fields = {"image_digest": digest, "data_digest": "sha256:" + "b" * 64,
              "model_digest": "sha256:" + "c" * 64, "recipient_digest": "sha256:" + "d" * 64,
              "benchmark_id": "7"}
    granted = WorkloadIdentity(**fields, metrics_version="wdbc/1-pool")  # type: ignore[arg-type]
    launched = WorkloadIdentity(**fields, metrics_version="wdbc/1")  # type: ignore[arg-type]
    assert granted.uid() != launched.uid() and granted.uid().endswith("::wdbc/1-pool")
