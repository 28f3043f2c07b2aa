"""WDBC's pooled release, version 3 (issue 41 part 6): the headline AUROC computed exactly over
every pooled case and released on its own by Laplace, the breakdown beside it. Read on the
demo's own sites at epsilon 1 with the aggregator's keyed noise; forged floors, budgets and
versions refused; version 2 pooled summaries still read."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks import pooling
from sealbench.benchmarks import release as rel
from sealbench.benchmarks.interface import Figure, SummaryError
from sealbench.benchmarks.seeded_noise import SeededDiscreteGaussian
from sealbench.benchmarks.wdbc import metrics
from sealbench.benchmarks.wdbc import private_auroc as pa
from sealbench.benchmarks.wdbc import summary as s
from sealbench.benchmarks.wdbc.data import load_wdbc, split_cases
from sealbench.benchmarks.wdbc.plugin import PLUGIN, WdbcBenchmark

WDBC: WdbcBenchmark = PLUGIN  # type: ignore[assignment]
#: The demo's hospitals are demo sites 0 and 1 (client/demo/flow.py, write_demo_dataset).
_DEMO_SITES = ("referral", "screening", "general")


@cache
def _demo_results() -> dict[str, tuple[s.WdbcCaseResult, ...]]:
    """Both shipped models scored on every held-out case of the demo's three sites."""
    sites = split_cases(load_wdbc()).sites
    cases = [c for name in _DEMO_SITES for c in sites[name]]
    out = {}
    for shipped in WDBC.shipped_models:
        runner = WDBC.load_model(WDBC.model_bytes(shipped.name))
        out[shipped.name] = tuple(WDBC.score(c, runner.predict(c)) for c in cases)
    return out


def _auroc(summary: s.WdbcSummary) -> Figure:
    return next(f for f in WDBC.figures(summary) if f.ref.metric == "auroc")


def _exact(results: tuple[s.WdbcCaseResult, ...]) -> float:
    value = metrics.auroc([bool(r.malignant) for r in results],
                          [r.penalised_score() for r in results]).value
    assert value is not None
    return value


def test_the_demo_sites_auroc_reads_at_epsilon_1_and_ranks_as_all_cases_do() -> None:
    """Every held-out case of the demo's three sites (398: 148 malignant), the pooled release
    at the pin's epsilon 1 (0.95 of it on the AUROC), 300 draws of the aggregator's keyed noise
    per model: both shown with a half-width (of the interval as shown, clipped to [0, 1]) of at
    most 0.05 in every draw, never ranked against the order of all cases together. (On the two
    sites the demo used first, 220 cases, k = 73: 89% of draws within 0.05.)"""
    results = _demo_results()
    assert {len(r) for r in results.values()} == {398}
    exact = {name: _exact(r) for name, r in results.items()}
    # noise-free, the headline is the exact AUROC, with a half-width within 0.05 unclipped
    floor = pa.floor_of(398, s.MIN_CLASS_SHARE)
    assert floor.k == 132 <= sum(bool(r.malignant) for r in results["wdbc_logreg"])
    scale = float(floor.sensitivity) / (s.RELEASE_SPEC.epsilon * s.AUROC_EPSILON_SHARE)
    for name, r in results.items():
        noiseless = _auroc(WDBC.pooled_summary(r, rel.LocalExact()))
        assert noiseless.value == pytest.approx(exact[name], abs=1e-12)
        centre, low, _ = pa.auroc_interval(exact[name], scale, floor)
        assert centre - low <= 0.05
    better, worse = sorted(exact, key=exact.__getitem__, reverse=True)
    draws, narrow, wrong = 300, 0, 0
    halves = []
    for i in range(draws):
        figures = {}
        for name, r in results.items():
            seed = hashlib.sha256(f"demo-draw-{i}-{name}".encode()).digest()
            figures[name] = _auroc(WDBC.pooled_summary(r, SeededDiscreteGaussian(seed)))
        assert all(f.value is not None for f in figures.values())  # shown, every draw
        half = [(f.high - f.low) / 2 for f in figures.values()]  # type: ignore[operator]
        halves += half
        narrow += max(half) <= 0.05
        # a wrong rank: the weaker model's interval entirely above the better one's
        wrong += figures[worse].low > figures[better].high  # type: ignore[operator]
    assert wrong == 0
    assert narrow == draws
    assert float(np.median(halves)) <= 0.035


def test_the_headline_is_the_auroc_over_all_cases_and_costs_its_share_of_the_pin() -> None:
    results = _demo_results()["wdbc_mlp"]
    summary = WDBC.pooled_summary(results, SeededDiscreteGaussian(b"\x01" * 32))
    assert summary.version == 3 and summary.auroc is not None
    headline, breakdown = summary.auroc, summary.release
    assert headline.mechanism == "laplace" and headline.library.startswith("sealbench")
    assert headline.epsilon == pytest.approx(0.95) and breakdown.epsilon == pytest.approx(0.05)
    total = headline.loss + breakdown.loss
    # what the pool was authorized to debit is what the summary's releases cost, both parts
    assert WDBC.pooled_release_spec.loss == total == pooling.summary_loss(summary)
    site = WDBC.summarise(results, rel.InsecureFixedNoise())
    assert pooling.summary_loss(site) == site.release.loss  # a site's: its one release
    assert total.epsilon_at(1e-6) <= 1.0 + 1e-9
    # the keyed noise is a function of the seed: a relaunch draws the same figure
    again = WDBC.pooled_summary(results, SeededDiscreteGaussian(b"\x01" * 32))
    assert again == summary
    assert WDBC.parse_pooled_summary(json.loads(json.dumps(summary.to_json()))) == summary


def test_below_the_floor_every_model_shrinks_alike_and_keeps_its_order() -> None:
    """A pool whose malignant class is under the declared third: T is each model's AUROC
    shrunk towards 1/2 by one factor (the cases' class counts), so the order stands."""
    rng = np.random.default_rng(7)
    labels = [True] * 20 + [False] * 100
    values = {}
    for strength in (0.5, 2.0):
        results = [s.WdbcCaseResult(case_id=f"c{i}", malignant=m,
                                    score=float(1 / (1 + np.exp(-(strength * (2 * m - 1)
                                                                  + rng.normal())))))
                   for i, m in enumerate(labels)]
        stat = s.auroc_statistic(results)
        assert stat.floor.k == 40 > stat.malignant
        auroc = float(stat.auroc or 0)
        assert float(stat.value) == pytest.approx(0.5 + (auroc - 0.5) * 20 / 40)
        values[strength] = (float(stat.value), auroc)
    assert values[2.0][0] > values[0.5][0] and values[2.0][1] > values[0.5][1]


def _doc(summary: s.WdbcSummary) -> dict[str, Any]:
    return json.loads(json.dumps(summary.to_json()))


def test_a_forged_floor_budget_or_version_is_refused() -> None:
    results = _demo_results()["wdbc_logreg"]
    summary = WDBC.pooled_summary(results, rel.InsecureFixedNoise())
    forged = _doc(summary)
    forged["auroc_floor"] = 10  # a smaller floor would claim a larger sensitivity's noise
    with pytest.raises(SummaryError):
        WDBC.parse_pooled_summary(forged)
    richer = s.auroc_release_spec(s.release_spec(epsilon=8))
    shares = np.asarray(pa.shares(s.auroc_statistic(results)))[:, None]
    forged = _doc(summary)
    forged["auroc"] = rel.release(shares, richer, rel.InsecureFixedNoise()).to_json()
    with pytest.raises(SummaryError, match="AUROC release"):
        WDBC.parse_pooled_summary(forged)  # the headline at another epsilon
    forged = _doc(summary)
    forged["auroc"] = rel.release(shares, s.auroc_release_spec(), rel.LocalExact()).to_json()
    with pytest.raises(SummaryError, match="AUROC release"):
        WDBC.parse_pooled_summary(forged)  # noise turned off
    forged = _doc(summary)
    del forged["auroc"], forged["auroc_floor"]
    with pytest.raises(SummaryError):
        WDBC.parse_pooled_summary(forged)  # version 3 without its headline
    forged["version"] = 2
    with pytest.raises(SummaryError):
        WDBC.parse_pooled_summary(forged)  # a version 3 breakdown passed off as version 2
    with pytest.raises(SummaryError):
        WDBC.parse_summary(_doc(summary))  # never a site's summary


def test_version_2_pooled_summaries_still_parse_and_read_their_pair_count() -> None:
    results = list(_demo_results()["wdbc_logreg"])
    rows = s.contributions(results)
    malignant = np.asarray([1.0 if r.malignant else 0.0 for r in results])
    with_pairs = np.concatenate(
        [rows[:, :1], s.pair_shares(results)[:, None], malignant[:, None], rows[:, 1:]], axis=1)
    legacy = s.WdbcSummary(plugin=str(WDBC.ref), n_cases=len(results),
                           release=rel.release(with_pairs, s.legacy_pooled_release_spec(),
                                               rel.InsecureFixedNoise()))
    doc = _doc(legacy)
    assert "auroc" not in doc and doc["version"] == 2  # as version 2 documents always were
    parsed = WDBC.parse_pooled_summary(doc)
    assert parsed == legacy
    assert _auroc(parsed).value == pytest.approx(_exact(tuple(results)), abs=1e-9)
