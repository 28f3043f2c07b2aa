"""WDBC releases and what is computed from them (summary version 2): the score bins, known
answers without noise, the binning error on the demo sites, unbiased pooling and the coverage
of the pooled 95% intervals under OpenDP's noise, uninformative figures, and the summaries a
reader must refuse.

Known answers use ``InsecureFixedNoise()`` (the declared noise scale, no noise drawn) or
``LocalExact`` (an exact release); the statistical tests use ``OpenDPGaussian``, the enclave's
noise, so they are random: each states its false-failure rate under the measured behaviour."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks import release as rel
from sealbench.benchmarks.interface import MetricRef, SummaryError
from sealbench.benchmarks.wdbc import binned
from sealbench.benchmarks.wdbc import summary as s
from sealbench.benchmarks.wdbc.data import load_wdbc, split_cases
from sealbench.benchmarks.wdbc.metrics import auroc as exact_auroc
from sealbench.benchmarks.wdbc.metrics import wilson_interval
from sealbench.benchmarks.wdbc.plugin import PLUGIN

EXACT = replace(s.RELEASE_SPEC, exact=True)


@pytest.fixture(autouse=True)
def _quiet_insecure_noise(caplog: pytest.LogCaptureFixture) -> None:
    """InsecureFixedNoise warns on every release; hundreds of them would flood the log."""
    caplog.set_level(logging.ERROR, logger="sealbench.benchmarks")


def _site(rng: np.random.Generator, n: int, prevalence: float,
          shape: float = 5.0) -> list[s.WdbcCaseResult]:
    y = rng.random(n) < prevalence
    p = np.clip(np.where(y, rng.beta(shape, 2, n), rng.beta(2, shape, n)), 0, 1)
    return [s.WdbcCaseResult(case_id=f"c{i}", malignant=bool(y[i]), score=float(p[i]))
            for i in range(n)]


def _labels_scores(rows: Sequence[s.WdbcCaseResult]) -> tuple[np.ndarray, np.ndarray]:
    labelled = [r for r in rows if r.malignant is not None]
    return (np.array([bool(r.malignant) for r in labelled]),
            np.array([float(r.penalised_score() or 0.0) for r in labelled]))


def _exact_counts(rows: Sequence[s.WdbcCaseResult]) -> binned.Counts:
    """Cases per class and score bin, counted directly from the per-case results."""
    y, p = _labels_scores(rows)
    bins = np.array([binned.score_bin(x) for x in p], dtype=np.int64)
    return binned.Counts(
        tuple(float(v) for v in np.bincount(bins[y], minlength=binned.SCORE_BINS)),
        tuple(float(v) for v in np.bincount(bins[~y], minlength=binned.SCORE_BINS)), 0.0)


def _pooled(summaries: Sequence[s.WdbcSummary], spec: rel.ReleaseSpec = s.RELEASE_SPEC
            ) -> dict[str, Any]:
    return {f.ref.metric: f for f in s.pool(summaries, spec).figures}


# -- the bins --------------------------------------------------------------------------------------


def test_score_bins_are_equally_spaced_in_logit_with_an_edge_at_the_threshold() -> None:
    edges = np.array(binned.EDGES)
    assert len(edges) == binned.SCORE_BINS - 1 and np.all(np.diff(edges) > 0)
    np.testing.assert_allclose(np.log(edges / (1 - edges)), np.linspace(-8, 8, 19), atol=1e-12)
    assert binned.EDGES[binned.THRESHOLD_BIN - 1] == s.THRESHOLD == 0.5
    assert [binned.score_bin(x) for x in (0.0, 0.4999999, 0.5, 1.0)] == [0, 9, 10, 19]
    assert binned.score_bin(binned.EDGES[3]) == 4  # an edge opens its bin
    with pytest.raises(ValueError, match="not in"):
        binned.score_bin(1.5)
    assert s.SCORE_KEYS[:2] == ("m00", "m01") and s.SCORE_KEYS[20] == "b00"
    assert s.SCORE_KEYS[-1] == s.UNLABELLED and len(s.SCORE_KEYS) == 41


# -- known answers (no noise) -------------------------------------------------------------------


def test_a_hand_worked_release() -> None:
    """Malignant 0.9 (bin 12) and 0.6 (bin 10); benign 0.6 (bin 10), 0.1 (bin 7) and a failed
    one (penalised: scored 1, bin 19); one case never loaded (unlabelled). Of the 6 pairs,
    0.9 outranks 0.6 and 0.1 (2), 0.6 ties 0.6 (1/2) and outranks 0.1 (1): AUROC 3.5/6."""
    rows = [s.WdbcCaseResult(case_id="a", malignant=True, score=0.9),
            s.WdbcCaseResult(case_id="b", malignant=True, score=0.6),
            s.WdbcCaseResult(case_id="c", malignant=False, score=0.6),
            s.WdbcCaseResult(case_id="d", malignant=False, score=0.1),
            s.WdbcCaseResult(case_id="e", malignant=False, score=None, reason="no output"),
            s.WdbcCaseResult(case_id="f", malignant=None, score=None, reason="not loaded")]
    summary = s.summarise(rows, "wdbc/1", rel.InsecureFixedNoise())
    block = summary.release.category(s.SCORE)
    counts = {k: v for k, v in zip(block.keys, block.counts, strict=True) if v}
    assert counts == {"m12": 1.0, "m10": 1.0, "b10": 1.0, "b07": 1.0, "b19": 1.0,
                      "unlabelled": 1.0}
    # squared errors 0.01 + 0.16 + 0.36 + 0.01, the failed benign 1, the unlabelled 1
    assert summary.release.column(s.BRIER).sum == pytest.approx(2.54)
    counted = s.counts_of(summary.release)
    assert binned.auroc(counted).estimate == pytest.approx(3.5 / 6)
    assert binned.sensitivity(counted).estimate == 1.0
    assert binned.specificity(counted).estimate == pytest.approx(1 / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zero_noise_figures_equal_the_exact_binned_values(seed: int) -> None:
    """Exact releases: pooled cells are the union's, sensitivity and specificity are exact (0.5
    is a bin edge), the proportions' intervals are Wilson's, the Brier score is exact, and the
    AUROC is within its binning bound of the raw scores' AUROC."""
    rng = np.random.default_rng(seed)
    sites = [_site(rng, n, prev) for n, prev in ((12, 0.6), (150, 0.35), (700, 0.2))]
    summaries = [s.summarise(site, "wdbc/1", rel.LocalExact()) for site in sites]
    union = [r for site in sites for r in site]
    truth = _exact_counts(union)
    pooled_counts = sum((s.counts_of(x.release) for x in summaries[1:]),
                        s.counts_of(summaries[0].release))
    assert pooled_counts == truth
    figures = _pooled(summaries, EXACT)
    y, p = _labels_scores(union)
    called = p >= s.THRESHOLD
    wilson = wilson_interval(int((called & y).sum()), int(y.sum()))
    assert figures["sensitivity"].value == pytest.approx(wilson.value, abs=1e-12)
    assert (figures["sensitivity"].low, figures["sensitivity"].high) == pytest.approx(
        (wilson.ci_low, wilson.ci_high), abs=1e-12)
    assert figures["specificity"].value == pytest.approx(
        (~called & ~y).sum() / (~y).sum(), abs=1e-12)
    assert figures["brier"].value == pytest.approx(float(np.mean((p - y) ** 2)), abs=1e-12)
    bound = s.auroc_binning_bound(summaries, EXACT)
    auc = figures["auroc"].value
    assert 0 < bound < 0.05
    assert auc is not None and abs(auc - exact_auroc(y, p).value) <= bound + 1e-12
    low, high = figures["auroc"].low, figures["auroc"].high
    assert low is not None and high is not None and low < auc < high
    assert figures["n_cases"].value == sum(len(x) for x in sites)
    assert figures["ece"].value is None and figures["calibration_slope"].value is None


def test_insecure_fixed_noise_gives_the_exact_cells_at_the_declared_scale() -> None:
    rows = _site(np.random.default_rng(3), 400, 0.4)
    summary = s.summarise(rows, "wdbc/1", rel.InsecureFixedNoise())
    counts = s.counts_of(summary.release)
    truth = _exact_counts(rows)
    assert (counts.malignant, counts.benign) == (truth.malignant, truth.benign)
    assert counts.variance == pytest.approx(s.RELEASE_SPEC.sigma ** 2)
    exact = binned.auroc(truth)
    noisy = binned.auroc(counts)
    assert noisy.estimate == exact.estimate  # same cells: the same figure ...
    assert noisy.noise_se > 0 and noisy.high - noisy.low > exact.high - exact.low  # ... wider


def test_site_weighting_is_by_cases_not_sites() -> None:
    rng = np.random.default_rng(9)
    small, large = _site(rng, 12, 0.5), _site(rng, 700, 0.5)
    summaries = [s.summarise(x, "wdbc/1", rel.LocalExact()) for x in (small, large)]
    y, p = _labels_scores(small + large)
    pooled = _pooled(summaries, EXACT)["brier"].value
    assert pooled == pytest.approx(float(np.mean((p - y) ** 2)), abs=1e-12)
    sites = [f.value for x in summaries for f in s.figures(x) if f.ref.metric == "brier"]
    assert pooled != pytest.approx(sum(sites) / 2, abs=1e-6)


# -- the binning error on the demo sites -----------------------------------------------------------


@pytest.fixture(scope="module")
def demo_results() -> dict[str, list[list[s.WdbcCaseResult]]]:
    """Both shipped models' per-case results on the three demo sites (all their cases)."""
    sites = split_cases(load_wdbc()).sites
    out: dict[str, list[list[s.WdbcCaseResult]]] = {}
    for shipped in PLUGIN.shipped_models:
        runner = PLUGIN.load_model(PLUGIN.model_bytes(shipped.name))
        out[shipped.name] = [
            [r for r in (PLUGIN.score(c, runner.predict(c)) for c in cases)
             if isinstance(r, s.WdbcCaseResult)]
            for cases in sites.values()]
    return out


def _equal_width_auroc(y: np.ndarray, p: np.ndarray, bins: int = 20) -> float:
    index = np.minimum((p * bins).astype(int), bins - 1)
    pos = np.bincount(index[y], minlength=bins).astype(float)
    neg = np.bincount(index[~y], minlength=bins).astype(float)
    below = np.cumsum(neg) - neg
    return float(pos @ (below + neg / 2) / (pos.sum() * neg.sum()))


def test_binning_error_under_001_on_demo_sites(
        demo_results: dict[str, list[list[s.WdbcCaseResult]]]) -> None:
    """The logit-spaced bins move the AUROC of each demo site, and of all cases together, by
    at most 0.0016 for both shipped models (measured; the issue asks < 0.01), where 20
    equal-width bins moved it by up to 0.0127; each error is within the binning bound."""
    errors, old = [], []
    for sites in demo_results.values():
        for rows in (*sites, [r for site in sites for r in site]):
            y, p = _labels_scores(rows)
            exact = exact_auroc(y, p).value
            counts = _exact_counts(rows)
            value = binned.auroc(counts).estimate
            assert exact is not None and value is not None
            assert abs(value - exact) <= binned.auroc_binning_bound(counts) + 1e-12
            errors.append(abs(value - exact))
            old.append(abs(_equal_width_auroc(y, p) - exact))
    assert len(errors) == 8
    assert max(errors) < 0.002 < 0.01
    assert max(old) > 0.012  # what the old grid lost on the same sites


@pytest.mark.parametrize("noise", [rel.LocalExact(), rel.InsecureFixedNoise()],
                         ids=["exact-release", "no-noise-drawn"])
def test_the_auroc_figure_carries_its_binning_error_per_site_and_pooled(
        demo_results: dict[str, list[list[s.WdbcCaseResult]]], noise: rel.NoiseSource) -> None:
    """The AUROC figure's ``bias`` bounds how far its binned value lies from the raw scores'
    AUROC, for each demo site and pooled over the three (cells summed), both shipped models: at
    most 0.0032 (measured; well under 0.01). The other figures are exact in method: no
    ``bias``. With the declared noise scale (none drawn) a site's AUROC is not informative, so
    not shown: its ``bias`` is still the binning error of the value the cells give."""
    spec = EXACT if isinstance(noise, rel.LocalExact) else s.RELEASE_SPEC
    seen = []
    for sites in demo_results.values():
        summaries = [s.summarise(rows, "wdbc/1", noise, spec) for rows in sites]
        shown = [(rows, s.figures(x)) for rows, x in zip(sites, summaries, strict=True)]
        shown.append(([r for rows in sites for r in rows], s.pool(summaries, spec).figures))
        for rows, figures in shown:
            y, p = _labels_scores(rows)
            exact = exact_auroc(y, p).value
            value = binned.auroc(_exact_counts(rows)).estimate
            auc = next(f for f in figures if f.ref.metric == "auroc")
            assert auc.value in (value, None) and (auc.value is not None) == (spec is EXACT)
            assert exact is not None and value is not None and auc.bias is not None
            assert abs(value - exact) <= auc.bias + 1e-12
            assert auc.bias == binned.auroc_binning_bound(_exact_counts(rows))
            assert all(f.bias is None for f in figures if f.ref.metric != "auroc")
            seen.append(auc.bias)
    assert len(seen) == 8 and 0 < max(seen) < 0.004 < 0.01


def test_under_noise_the_auroc_bias_is_an_estimate_that_mostly_overstates(
        demo_results: dict[str, list[list[s.WdbcCaseResult]]]) -> None:
    """Under OpenDP's noise (epsilon 1) the ``bias`` is estimated from noisy counts clipped at
    0 (no longer a bound): clipping turns the noise of near-empty cells into positive products,
    so on the demo sites it overstates the binning error (median about 0.02 per site and pooled,
    where the error is at most 0.0017). Measured over 1,000 releases of each model: below the
    error in 0.1% (logistic regression) and 0.3% (MLP) of releases, always a site's, never the
    pooled figure's. Here 40 releases of each model: at least 95% of the 160 estimates are at
    least the error they estimate (false failure far below 1e-6)."""
    spec = s.RELEASE_SPEC
    noise = rel.OpenDPGaussian()
    for sites in demo_results.values():
        errors = []
        for rows in (*sites, [r for site in sites for r in site]):
            y, p = _labels_scores(rows)
            value, exact = binned.auroc(_exact_counts(rows)).estimate, exact_auroc(y, p).value
            assert value is not None and exact is not None
            errors.append(abs(value - exact))
        contributions = [s.contributions(rows) for rows in sites]
        over = 0
        for _ in range(40):
            summaries = [s.WdbcSummary(plugin="wdbc/1", n_cases=x.n_cases, release=x)
                         for x in (rel.release(c, spec, noise) for c in contributions)]
            shown = [*(s.figures(x)[0] for x in summaries), s.pool(summaries, spec).figures[0]]
            biases = [f.bias for f in shown if f.ref.metric == "auroc" and f.bias is not None]
            assert len(biases) == 4
            over += sum(b >= e for b, e in zip(biases, errors, strict=True))
        assert over >= 0.95 * 160


# -- under OpenDP's noise ----------------------------------------------------------------------


def test_pooled_auroc_is_unbiased_where_the_classes_outweigh_the_noise() -> None:
    """300 releases of three 4000-case sites (epsilon 1): the mean pooled cell is its true
    count (every cell at once: a chi-square of 40 standardised means) and the mean pooled AUROC
    is within 3 standard errors of the binned truth. The AUROC is a ratio of unbiased sums; its
    bias, of order (noise sd / class total)², is measured at 0.003 with three 1000-case sites
    and is a fifth of a standard error here (false failure about 0.5%). At the demo sites'
    size the ratio's denominator is noise-dominated (it has no finite mean): those figures are
    uninformative, never shown."""
    rng = np.random.default_rng(5)
    sites = [_site(rng, 4000, prev) for prev in (0.6, 0.15, 0.4)]
    rows = [s.contributions(site) for site in sites]
    truth = sum((_exact_counts(site) for site in sites[1:]), _exact_counts(sites[0]))
    target = binned.auroc(truth).estimate
    noise = rel.OpenDPGaussian()
    cells, estimates = [], []
    for _ in range(300):
        releases = [rel.release(r, s.RELEASE_SPEC, noise) for r in rows]
        counts = sum((s.counts_of(x) for x in releases[1:]), s.counts_of(releases[0]))
        cells.append(counts.malignant + counts.benign)
        estimates.append(binned.auroc(counts).estimate)
    sd = math.sqrt(3) * s.RELEASE_SPEC.sigma
    z = (np.mean(cells, axis=0) - np.array(truth.malignant + truth.benign)) / (sd / math.sqrt(300))
    assert float(np.sum(z ** 2)) < 80  # chi-square, 40 degrees of freedom: p = 2e-4
    values = np.array(estimates, dtype=np.float64)
    assert abs(values.mean() - target) < 3 * values.std(ddof=1) / math.sqrt(300)


def _truths(sites: Sequence[Sequence[s.WdbcCaseResult]]) -> dict[str, float]:
    rows = [r for site in sites for r in site]
    y, p = _labels_scores(rows)
    value = binned.auroc(_exact_counts(rows)).estimate
    assert value is not None
    return {"auroc": value, "sensitivity": float((p[y] >= s.THRESHOLD).mean()),
            "brier": float(np.mean((p - y) ** 2))}


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_pooled_intervals_cover_the_all_cases_binned_value(
        demo_results: dict[str, list[list[s.WdbcCaseResult]]], epsilon: float) -> None:
    """400 pooled releases of the three demo sites (both shipped models in turn, OpenDP's
    noise): the 95% interval of AUROC, sensitivity and Brier covers the all-cases binned value
    in >= 93% of runs where the figure is informative, and in >= 93% of all runs (an
    uninformative figure's interval is the whole range where none can be computed).

    At epsilon 1 (the default) the Brier score is informative in every run, the pooled AUROC in
    about 1 run in 10 and the sensitivity in 1 in 14 (the class totals, 148 malignant cases,
    are within 3 noise sd of 0): too few for a conditional rate, so those two are held to the
    all-runs coverage. At epsilon 4 every figure is informative. Measured over 2,000 runs per
    model: coverage 96-99% at epsilon 4, 96-100% at epsilon 1 (false failure about 0.2%)."""
    spec = s.release_spec(epsilon=epsilon)
    models = list(demo_results.values())
    rows = [[s.contributions(site) for site in sites] for sites in models]
    truths = [_truths(sites) for sites in models]
    noise = rel.OpenDPGaussian()
    runs = 400
    shown = dict.fromkeys(("auroc", "sensitivity", "brier"), 0)
    covered, covered_all = dict(shown), dict(shown)
    for run in range(runs):
        k = run % len(models)
        summaries = [s.WdbcSummary(plugin="wdbc/1", n_cases=x.n_cases, release=x)
                     for x in (rel.release(r, spec, noise) for r in rows[k])]
        for f in s.pool(summaries, spec).figures:
            key = f.ref.metric
            if key not in shown:
                continue
            assert f.low is not None and f.high is not None
            inside = f.low <= truths[k][key] <= f.high
            covered_all[key] += inside
            if f.value is not None:
                shown[key] += 1
                covered[key] += inside
    assert shown["brier"] == runs
    if epsilon > 1:
        assert min(shown.values()) >= 0.9 * runs
    for key in shown:
        assert covered_all[key] >= 0.93 * runs, (key, covered_all[key])
        if shown[key] >= 100:
            assert covered[key] >= 0.93 * shown[key], (key, covered[key], shown[key])


# -- uninformative figures, odd counts ---------------------------------------------------------


def test_figures_of_a_small_site_under_noise_are_uninformative_not_shown() -> None:
    """A 12-case site at epsilon 1: its class totals are within the noise (sd 41 cases), so
    AUROC, sensitivity and specificity have no value, only the whole range as interval, even
    when (InsecureFixedNoise) the noise drawn happens to be 0."""
    summary = s.summarise(_site(np.random.default_rng(2), 12, 0.5), "wdbc/1",
                          rel.InsecureFixedNoise())
    figures = {f.ref.metric: f for f in s.figures(summary)}
    for key in ("auroc", "sensitivity", "specificity"):
        assert figures[key].value is None and (figures[key].low, figures[key].high) == (0, 1)
    assert figures["n_cases"].value == 12


def test_estimators_stay_defined_on_negative_counts() -> None:
    zeros = (0.0,) * binned.SCORE_BINS
    negative = binned.Counts((-5.0, *zeros[1:]), (3.0, *zeros[1:]), 86.0)
    for estimate in (binned.auroc(negative), binned.sensitivity(negative)):
        assert estimate.estimate is None and (estimate.low, estimate.high) == (0.0, 1.0)
        assert estimate.figure(MetricRef("auroc")).value is None
    mixed = binned.Counts(tuple(float(v) for v in [-3] * 10 + [40] * 10),
                          tuple(float(v) for v in [60] * 10 + [-2] * 10), 1.0)
    for estimate in (binned.auroc(mixed), binned.sensitivity(mixed), binned.specificity(mixed)):
        assert estimate.estimate is not None and estimate.low is not None
        assert estimate.high is not None and 0.0 <= estimate.low <= estimate.high <= 1.0
    assert binned.auroc_binning_bound(negative) == 0.0


# -- what a reader refuses -------------------------------------------------------------------


def test_a_summary_of_another_epsilon_or_an_exact_one_is_refused() -> None:
    rows = _site(np.random.default_rng(4), 150, 0.4)
    raised = s.summarise(rows, "wdbc/1", rel.InsecureFixedNoise(), s.release_spec(epsilon=8))
    with pytest.raises(SummaryError, match=r"epsilon 1\.0"):
        PLUGIN.parse_summary(raised.to_json())
    exact = s.summarise(rows, "wdbc/1", rel.LocalExact())
    with pytest.raises(SummaryError, match="not the one declared"):
        PLUGIN.parse_summary(exact.to_json())
    fine = s.summarise(rows, "wdbc/1", rel.InsecureFixedNoise())
    with pytest.raises(ValueError, match="declared content"):
        PLUGIN.pool([PLUGIN.parse_summary(fine.to_json()), raised])


def test_a_version_1_summary_or_a_doctored_release_is_refused() -> None:
    doc = s.summarise(_site(np.random.default_rng(6), 60, 0.4), "wdbc/1",
                      rel.InsecureFixedNoise()).to_json()
    release = doc["release"]
    forged = [
        {**doc, "version": 1},
        {**doc, "n_cases": 61},
        {**doc, "threshold": 0.4},
        {**doc, "score_bins": "equal-20"},
        {**doc, "n_malignant": 24},
        {**doc, "release": {**release, "sigma": release["sigma"] / 10}},  # noise "turned down"
        {**doc, "release": {**release, "categories": [
            {**release["categories"][0], "keys": ["a", "b"], "counts": [1.0, 2.0]}]}},
    ]
    for bad in forged:
        with pytest.raises(SummaryError):
            PLUGIN.parse_summary(bad)


def test_the_summary_json_holds_no_exact_per_class_count() -> None:
    """What leaves the enclave: the pin, the public case count, the threshold, the bins'
    name and the release, whose every count is noisy (no integer survives OpenDP's noise)."""
    rows = _site(np.random.default_rng(8), 150, 0.4)
    doc = PLUGIN.summarise(rows, rel.OpenDPGaussian()).to_json()
    assert set(doc) == {"summary_id", "version", "plugin", "n_cases", "threshold",
                        "score_bins", "release"}
    assert doc["version"] == 2 and doc["n_cases"] == 150
    counts = doc["release"]["categories"][0]["counts"]
    assert len(counts) == 41 and not any(float(c).is_integer() for c in counts)
    assert not float(doc["release"]["columns"][0]["sum"]).is_integer()
    assert doc["release"]["epsilon"] == 1.0 and doc["release"]["mechanism"] == "gaussian"
    PLUGIN.parse_summary(doc)
