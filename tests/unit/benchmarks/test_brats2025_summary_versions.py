"""BraTS 2025 summaries across the change of averaging (issue 41 part 5): metric definition
version 2 releases a count of defined cases per group and publishes the official means;
version 1 summaries (an undefined group counted as 1) stay readable with the figures they were
published with; a board holding both pools them on version 1's scale; a summary that claims one
version with the other's release, another privacy loss, or missing counts is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel
from sealbench.benchmarks.brats.metrics import CaseFailure
from sealbench.benchmarks.brats.plugin2025 import Brats2025Benchmark
from sealbench.benchmarks.brats.published import PublishedSummary
from sealbench.benchmarks.brats.results2025 import (
    CaseScores2025,
    Metrics2025,
    release_spec,
    release_spec_v1,
)
from sealbench.benchmarks.brats.scoring2025 import GLI_2025, score_case
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.contract.pin import BenchmarkPin

GROUPS = [g.name for g in GLI_2025.groups]


@pytest.fixture(scope="module")
def plugins() -> PluginRegistry:
    return PluginRegistry()


def _plugin(plugins: PluginRegistry, pin: str) -> Brats2025Benchmark:
    plugin = plugins.load(BenchmarkPin.parse(pin))
    assert isinstance(plugin, Brats2025Benchmark)
    return plugin


def _results() -> list[CaseScores2025 | CaseFailure]:
    """Three cases: ET found at Dice 0.8, ET found exactly, and a failure; NETC, SNFH, RC
    undefined in the scored two."""
    truth = np.zeros((10, 10, 10), dtype=np.uint8)
    truth[2:5, 2:5, 2:5] = 3
    half = truth.copy()
    half[2, 2:5, 2:5] = 0
    return [CaseScores2025.from_official(c, "gli", score_case(p, truth, (1.0,) * 3, GLI_2025))
            for c, p in (("a", half), ("b", truth))] + [
        CaseFailure(case_id="c", reason="inference failed")]


def _v1_summary(rows: list[list[float]], spec: rel.ReleaseSpec, noise: rel.NoiseSource,
                ) -> dict[str, Any]:
    """A version 1 summary as the pins made it before (dsc and pq_dsc per group, undefined as
    1)."""
    made = rel.release(np.asarray(rows), spec, noise)
    return PublishedSummary(metrics_id="sealbench/brats-2025", metrics_version=1,
                            n_cases=made.n_cases, release=made).to_json()


def _v1_rows() -> list[list[float]]:
    # the same three cases under version 1: ET 0.8 / 1.0 / 0, every undefined group 1
    row_a = [1.0 if g != "et" and g not in ("tc", "wt") else 0.8 for g in GROUPS] * 2
    row_b = [1.0] * len(GROUPS) * 2
    return [row_a, row_b, [0.0] * len(GROUPS) * 2]


def test_version_2_release_counts_the_defined_cases_and_costs_their_sensitivity() -> None:
    spec = release_spec(GLI_2025)
    assert [c.key for c in spec.columns][-len(GROUPS):] == [f"defined:{g}" for g in GROUPS]
    # three columns per group and (summary version 3) the headline's second moment per group
    assert [m.key for m in spec.moments] == [f"pq_dsc:{g}" for g in GROUPS]
    assert spec.sensitivity == pytest.approx(np.sqrt(4 * len(GROUPS)))
    # more columns, same privacy loss: more noise per column than version 1's
    assert spec.sigma == pytest.approx(release_spec_v1(GLI_2025).sigma * np.sqrt(4 / 2))
    assert Metrics2025.of(GLI_2025).version == 2


def test_a_version_1_summary_reads_with_the_figures_it_was_published_with(
        plugins: PluginRegistry) -> None:
    plugin = _plugin(plugins, "brats-2025-gli/1-exact")
    old = plugin.parse_summary(_v1_summary(_v1_rows(), release_spec_v1(GLI_2025),
                                           rel.LocalExact()))
    shown = {str(f.ref): f.value for f in plugin.figures(old)}
    assert shown["dsc netc"] == pytest.approx(2 / 3)  # undefined counted as 1, the failure 0
    assert shown["dsc et"] == pytest.approx(1.8 / 3)
    new = plugin.summarise(_results(), rel.LocalExact())
    now = {str(f.ref): f.value for f in plugin.figures(new)}
    assert now["dsc et"] == pytest.approx(1.8 / 3)
    assert now["dsc netc"] == 0.0  # left out where undefined: only the failure is counted


def test_both_versions_pool_on_version_1s_scale_and_the_board_never_shrinks(
        plugins: PluginRegistry) -> None:
    plugin = _plugin(plugins, "brats-2025-gli/1-exact")
    old = plugin.parse_summary(_v1_summary(_v1_rows(), release_spec_v1(GLI_2025),
                                           rel.LocalExact()))
    new = plugin.summarise(_results(), rel.LocalExact())
    both = plugin.pool([old, new])
    assert (both.n_sites, both.n_cases) == (2, 6)
    shown = {str(f.ref): f.value for f in both.figures}
    assert shown["dsc netc"] == pytest.approx(4 / 6)  # the same cases, both as version 1
    assert shown["pq_dsc et"] == pytest.approx(3.6 / 6)
    v1_only = {str(f.ref): f.value for f in plugin.pool([old, old]).figures}
    assert shown == pytest.approx(v1_only)


@pytest.mark.parametrize("claim", ["v1 content as v2", "v2 content as v1", "counts dropped",
                                   "other epsilon"])
def test_a_summary_that_misstates_its_version_or_release_is_refused(
        plugins: PluginRegistry, claim: str) -> None:
    plugin = _plugin(plugins, "brats-2025-gli/1")
    noise = rel.InsecureFixedNoise()
    if claim == "v1 content as v2":
        doc = _v1_summary(_v1_rows(), release_spec_v1(GLI_2025), noise)
        doc["metrics_version"] = 2
    elif claim == "v2 content as v1":
        doc = plugin.summarise(_results(), noise).to_json()
        doc["metrics_version"] = 1
    elif claim == "counts dropped":  # version 2's sums without their counts, read as official
        doc = _v1_summary([[0.0] * len(GROUPS) * 2] * 3, release_spec_v1(GLI_2025), noise)
        doc["metrics_version"] = 2
    else:
        doc = _v1_summary(_v1_rows(), release_spec_v1(GLI_2025, epsilon=8.0), noise)
    with pytest.raises(api.SummaryError):
        plugin.parse_summary(doc)


def test_an_unknown_metric_version_is_refused(plugins: PluginRegistry) -> None:
    plugin = _plugin(plugins, "brats-2025-gli/1")
    doc = plugin.summarise(_results(), rel.InsecureFixedNoise()).to_json()
    doc["metrics_version"] = 3
    with pytest.raises(api.SummaryError, match="metrics"):
        plugin.parse_summary(doc)


def test_version_1_metric_definitions_still_parse_and_must_say_their_rule() -> None:
    v1 = Metrics2025.model_validate({**Metrics2025.of(GLI_2025).model_dump(mode="json"),
                                     "version": 1, "released_when_nothing_either_side": 1.0})
    assert v1.version == 1
    with pytest.raises(ValueError, match="version 1"):
        Metrics2025.model_validate({**Metrics2025.of(GLI_2025).model_dump(mode="json"),
                                    "released_when_nothing_either_side": 1.0})


def test_a_new_result_with_version_1s_release_is_refused_at_accept(
        plugins: PluginRegistry) -> None:
    """An enclave image of before (or an operator) submitting version 1's release under the
    pin: readable for the board, but the registry accepts only the release the pin declares
    now (version 2's, with the counts), so no new figure is averaged the old way."""
    from sealbench.server.errors import ResultRejectedError
    from sealbench.server.services.budgets import checked_release

    plugin = _plugin(plugins, "brats-2025-gli/1")
    old = plugin.parse_summary(_v1_summary(_v1_rows(), release_spec_v1(GLI_2025),
                                           rel.InsecureFixedNoise()))
    with pytest.raises(ResultRejectedError, match="not the one"):
        checked_release(plugin, old)
    assert checked_release(plugin, plugin.summarise(_results(), rel.InsecureFixedNoise()))
