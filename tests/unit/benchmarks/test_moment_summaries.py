"""BraTS summaries carrying the headline's second moment (summary version 3, issue 41 part 3):
the 2023 and 2025 pins release it; version 2 summaries (no moment) stay readable with the
figures they were published with and pool beside version 3 ones; a release or summary that
misstates its moment (dropped, added, a smaller noise, of columns it does not hold) is
refused; an old release serialises byte for byte as before."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel
from sealbench.benchmarks.brats.metrics import BRATS_2023_GLI_METRICS
from sealbench.benchmarks.brats.plugin import BratsBenchmark
from sealbench.benchmarks.brats.plugin2025 import Brats2025Benchmark
from sealbench.benchmarks.brats.published import PublishedSummary, release_spec
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.contract.pin import BenchmarkPin


@pytest.fixture(scope="module")
def plugins() -> PluginRegistry:
    return PluginRegistry()


def _legacy(plugins: PluginRegistry) -> BratsBenchmark:
    plugin = plugins.load(BenchmarkPin.parse("brats-2023-gli/1"))
    assert isinstance(plugin, BratsBenchmark)
    return plugin


def _summary(rows: np.ndarray, spec: rel.ReleaseSpec, noise: rel.NoiseSource,
             ) -> PublishedSummary:
    made = rel.release(rows, spec, noise)
    return PublishedSummary(metrics_id="sealbench/brats-lesionwise", metrics_version=1,
                            n_cases=made.n_cases, release=made)


def _rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.beta(14, 1.6, (n, 3))
    rows[rng.random(n) < 0.1] = 0.0
    return rows


def test_the_2023_release_carries_the_headlines_second_moment(plugins: PluginRegistry) -> None:
    plugin = _legacy(plugins)
    spec = plugin.release_spec
    assert [(m.key, m.of) for m in spec.moments] == [("dice", ("dice:WT", "dice:TC", "dice:ET"))]
    assert spec.sensitivity == pytest.approx(2.0)  # three regions and the moment
    rows = _rows(40, 1)
    made = rel.release(rows, spec, rel.LocalExact())
    moment = made.moment("dice:WT", "dice:TC", "dice:ET")
    assert moment is not None
    assert moment.squares == pytest.approx(float((rows.mean(axis=1) ** 2).sum()))


def test_a_version_2_summary_reads_with_the_interval_it_was_published_with(
        plugins: PluginRegistry) -> None:
    plugin = _legacy(plugins)
    old_spec = replace(plugin.release_spec, moments=())
    old = _summary(_rows(30, 2), old_spec, rel.InsecureFixedNoise((0.3, -0.2, 0.1)))
    doc = old.to_json()
    assert doc["version"] == 2 and "moments" not in doc["release"]
    parsed = plugin.parse_summary(doc)
    assert parsed == old
    head = next(f for f in plugin.figures(parsed) if f.ref == api.MetricRef("dice"))
    plain = rel.pooled_mean([rel.ReleasedColumn(
        key="dice", low=0.0, high=1.0,
        sum=sum(c.sum for c in old.release.columns) / 3,
        sd=old.release.sigma * np.sqrt(3) / 3)], [30])
    assert (head.low, head.high) == pytest.approx((plain.low, plain.high))


def test_versions_2_and_3_pool_and_the_moment_is_used_only_when_every_site_has_it(
        plugins: PluginRegistry) -> None:
    exact = _legacy(plugins).exact_release()  # exact releases: the pin's -exact variant
    new = [_summary(_rows(600, k), exact.release_spec, rel.LocalExact()) for k in range(2)]
    old = _summary(_rows(600, 9), replace(exact.release_spec, moments=()), rel.LocalExact())
    both = exact.pool([new[0], old]).figures
    only_new = exact.pool(new).figures
    head = api.MetricRef("dice")
    width = {name: next(f.high - f.low for f in figs if f.ref == head)  # type: ignore[operator]
             for name, figs in (("both", both), ("new", only_new))}
    assert width["new"] < 0.85 * width["both"]
    for doc in (new[0].to_json(), old.to_json()):
        exact.parse_summary(doc)


def _tampered(doc: dict[str, Any], **release: Any) -> dict[str, Any]:
    return {**doc, "release": {**doc["release"], **release}}


def test_a_summary_that_drops_adds_or_shrinks_its_moment_is_refused(
        plugins: PluginRegistry) -> None:
    plugin = _legacy(plugins)
    made = _summary(_rows(20, 3), plugin.release_spec, rel.InsecureFixedNoise())
    doc = made.to_json()
    assert plugin.parse_summary(doc) == made
    moment = doc["release"]["moments"][0]
    attacks = [
        # the moment dropped but the version kept: not a version 3 release
        _tampered(doc, moments=[]),
        # dropped with the versions lowered: its sensitivity (and so sigma) is still the
        # moment's, so the document no longer adds up
        {**_tampered(doc, moments=[], version=1), "version": 2},
        # a smaller noise claimed on the moment (a narrower interval than the data allow)
        _tampered(doc, moments=[{**moment, "sd": moment["sd"] / 2}]),
        # a moment of columns the release does not hold
        _tampered(doc, moments=[{**moment, "of": ["dice:WT", "dice:XX"]}]),
        # a second moment the pin does not declare
        _tampered(doc, moments=[moment, {**moment, "key": "extra", "of": ["dice:WT"]}]),
        # the summary says version 2 over a release with the moment
        {**doc, "version": 2},
    ]
    for attack in attacks:
        with pytest.raises(api.SummaryError):
            plugin.parse_summary(attack)


def test_a_release_without_moments_serialises_as_version_1_did() -> None:
    spec = rel.ReleaseSpec((rel.Column("dice", 0.0, 1.0),), exact=True)
    doc = rel.release(np.array([[0.5], [0.25]]), spec, rel.LocalExact()).to_json()
    assert doc["version"] == 1 and "moments" not in doc
    with pytest.raises(rel.ReleaseError):
        rel.Release.from_json({**doc, "version": 2})


def test_a_spec_refuses_a_moment_of_columns_it_does_not_hold_or_of_mixed_bounds() -> None:
    with pytest.raises(ValueError, match="does not hold"):
        rel.ReleaseSpec((rel.Column("a", 0.0, 1.0),), moments=(rel.Moment("m", ("b",)),))
    with pytest.raises(ValueError, match="different bounds"):
        rel.ReleaseSpec((rel.Column("a", 0.0, 1.0), rel.Column("b", 0.0, 2.0)),
                        moments=(rel.Moment("m", ("a", "b")),))


def test_the_2025_pins_release_the_headlines_moment_per_group(plugins: PluginRegistry) -> None:
    for pin in ("brats-2025-gli/1", "brats-2025-met/1"):
        plugin = plugins.load(BenchmarkPin.parse(pin))
        assert isinstance(plugin, Brats2025Benchmark)
        groups = [g.name for g in plugin.scoring.groups]
        assert [m.of for m in plugin.release_spec.moments] == [(f"pq_dsc:{g}",) for g in groups]
        assert plugin.release_spec.sensitivity == pytest.approx(np.sqrt(4 * len(groups)))


def test_the_legacy_spec_function_is_the_plugins() -> None:
    assert release_spec(BRATS_2023_GLI_METRICS) == BratsBenchmark().release_spec


def test_a_2025_summary_without_moments_reads_and_pools_beside_one_with_them(
        plugins: PluginRegistry) -> None:
    plugin = plugins.load(BenchmarkPin.parse("brats-2025-met/1-exact"))
    assert isinstance(plugin, Brats2025Benchmark)
    k = len(plugin.scoring.groups)
    rng = np.random.default_rng(4)
    defined = (rng.random((40, k)) < 0.8).astype(float)
    rows = np.hstack([rng.beta(8, 2, (40, k)) * defined, rng.beta(6, 2, (40, k)) * defined,
                      defined])
    spec = plugin.release_spec
    docs = []
    for moments in (spec.moments, ()):
        made = rel.release(rows, replace(spec, moments=moments), rel.LocalExact())
        docs.append(PublishedSummary(metrics_id="sealbench/brats-2025", metrics_version=2,
                                     n_cases=40, release=made).to_json())
    assert [d["version"] for d in docs] == [3, 2]
    new, old = (plugin.parse_summary(d) for d in docs)
    head = api.MetricRef("pq_dsc")
    alone = next(f for f in plugin.pool([new, new]).figures if f.ref == head)
    mixed = next(f for f in plugin.pool([new, old]).figures if f.ref == head)
    assert alone.value == pytest.approx(mixed.value)  # the same means, exactly
    assert alone.low is not None and alone.high is not None
    assert mixed.low is not None and mixed.high is not None
    assert alone.high - alone.low < mixed.high - mixed.low  # the bound where one lacks it
