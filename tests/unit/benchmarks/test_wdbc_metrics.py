"""WDBC metrics against references: scikit-learn for AUROC, Brier score and the logistic
recalibration fit, scipy's Wilson interval, a hand-worked DeLong example and a direct O(m·n)
DeLong from the definition (placement values), on random data with ties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest, rankdata
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, roc_auc_score

from sealbench.benchmarks.wdbc.metrics import (
    auroc,
    brier_score,
    calibration,
    confusion,
    midranks,
    wilson_interval,
)


def _delong_by_definition(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """AUC and its DeLong variance from the definition: psi(x, y) = 1, 1/2, 0."""
    pos, neg = p[y == 1], p[y == 0]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return float(psi.mean()), v10.var(ddof=1) / pos.size + v01.var(ddof=1) / neg.size


def test_delong_hand_worked_example() -> None:
    # Positives 0.8, 0.6; negatives 0.7, 0.2: 3 of 4 pairs ordered, V10 = (1, .5), V01 = (.5, 1),
    # S10 = S01 = 0.125, variance 0.125/2 + 0.125/2.
    result = auroc([1, 1, 0, 0], [0.8, 0.6, 0.7, 0.2])
    assert result.value == pytest.approx(0.75)
    assert result.std_error == pytest.approx(math.sqrt(0.125))
    assert result.ci_low == pytest.approx(0.75 - 1.959963984540054 * math.sqrt(0.125))
    assert result.ci_high == 1.0  # clipped


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 60), st.integers(2, 60), st.integers(3, 40))
def test_auroc_matches_sklearn_and_delong_matches_its_definition(
    seed: int, m: int, n: int, levels: int
) -> None:
    rng = np.random.default_rng(seed)
    # Scores on a coarse grid, so ties within and across classes are common.
    p = np.concatenate([rng.integers(0, levels, m) + 2, rng.integers(0, levels, n)]) / (levels + 2)
    y = np.concatenate([np.ones(m), np.zeros(n)])
    result = auroc(y, p)
    value, variance = _delong_by_definition(y, p)
    assert result.value == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert result.value == pytest.approx(value, abs=1e-12)
    assert result.std_error == pytest.approx(math.sqrt(variance), abs=1e-12)
    assert result.ci_low is not None and result.ci_high is not None
    assert 0.0 <= result.ci_low <= result.value <= result.ci_high <= 1.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=40))
def test_midranks_match_scipy(values: list[int]) -> None:
    x = np.array(values, dtype=np.float64) / 3
    np.testing.assert_array_equal(midranks(x), rankdata(x))


def test_auroc_undefined_without_both_classes() -> None:
    only_benign = auroc([0, 0, 0], [0.1, 0.2, 0.3])
    assert only_benign.value is None and only_benign.ci_low is None
    one_positive = auroc([1, 0, 0], [0.9, 0.2, 0.3])
    assert one_positive.value == 1.0 and one_positive.std_error is None


def test_perfect_separation_gives_a_point_interval() -> None:
    result = auroc([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1])
    assert (result.value, result.ci_low, result.ci_high, result.std_error) == (1.0, 1.0, 1.0, 0.0)


@pytest.mark.parametrize(("k", "n"), [(8, 10), (0, 7), (7, 7), (45, 212), (1, 1)])
def test_wilson_interval_matches_scipy(k: int, n: int) -> None:
    ours = wilson_interval(k, n)
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert ours.value == pytest.approx(k / n)
    assert ours.ci_low == pytest.approx(ref.low, abs=1e-12)
    assert ours.ci_high == pytest.approx(ref.high, abs=1e-12)


def test_sensitivity_specificity_at_the_threshold() -> None:
    y = [1, 1, 1, 0, 0, 0, 0]
    p = [0.9, 0.5, 0.49, 0.5, 0.2, 0.1, 0.0]
    c = confusion(y, p, 0.5)
    assert (c.tp, c.fn, c.fp, c.tn) == (2, 1, 1, 3)  # a score equal to the threshold is positive
    assert c.sensitivity.value == pytest.approx(2 / 3)
    assert c.specificity.value == pytest.approx(3 / 4)
    assert confusion([0, 0], [0.1, 0.2], 0.5).sensitivity.value is None


def test_brier_score_matches_sklearn() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(500)
    y = (rng.random(500) < p).astype(float)
    assert brier_score(y, p) == pytest.approx(brier_score_loss(y, p), abs=1e-15)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def test_calibration_slope_matches_an_unpenalised_logistic_fit() -> None:
    rng = np.random.default_rng(7)
    true = rng.uniform(0.02, 0.98, 4000)
    y = (rng.random(true.size) < true).astype(float)
    overconfident = _sigmoid(2.0 * np.log(true / (1 - true)))
    cal = calibration(y, overconfident)
    x = np.log(overconfident / (1 - overconfident)).reshape(-1, 1)
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(x, y)
    assert cal.slope == pytest.approx(float(ref.coef_[0, 0]), rel=1e-5)
    assert cal.slope == pytest.approx(0.5, abs=0.05)  # twice as confident as it should be
    well = calibration(y, true)
    assert well.slope == pytest.approx(1.0, abs=0.1)
    assert well.intercept == pytest.approx(0.0, abs=0.1)
    assert well.ece < 0.03 < cal.ece


@pytest.mark.parametrize("seed", range(40))
def test_confident_non_separable_scores_have_a_slope(seed: int) -> None:
    """Confident scores (logits out to ±14) with a few wrong labels: a full Newton step from
    slope 1 overshoots past the cap, and the undamped fit returned None for about a third of
    these though the maximum-likelihood slope exists; it must equal the reference fit's."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 60)
    scores = np.where(y == 1, rng.beta(8, 1, 60), rng.beta(1, 8, 60)) ** (3 if seed % 2 else 1)
    flipped = rng.choice(60, 3, replace=False)
    y[flipped] = 1 - y[flipped]
    cal = calibration(y, scores)
    x = np.log(np.clip(scores, 1e-6, 1 - 1e-6) / (1 - np.clip(scores, 1e-6, 1 - 1e-6)))
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(x.reshape(-1, 1), y)
    assert cal.slope is not None
    assert cal.slope == pytest.approx(float(ref.coef_[0, 0]), rel=1e-5, abs=1e-6)


def test_reliability_table_counts_every_case_once() -> None:
    p = np.array([0.0, 0.05, 0.1, 0.55, 0.99, 1.0])
    y = np.array([0, 0, 1, 1, 1, 1])
    cal = calibration(y, p)
    assert sum(b.n for b in cal.bins) == p.size
    assert cal.bins[0].n == 2 and cal.bins[1].n == 1 and cal.bins[9].n == 2
    assert cal.bins[9].mean_score == pytest.approx(0.995) and cal.bins[9].observed == 1.0
    assert cal.bins[3].n == 0 and cal.bins[3].mean_score is None
    expected = (2 * 0.025 + 1 * 0.9 + 1 * 0.45 + 2 * 0.005) / 6
    assert cal.ece == pytest.approx(expected)


def test_separable_labels_have_no_slope() -> None:
    cal = calibration([0, 0, 1, 1], [0.1, 0.3, 0.6, 0.9])
    assert cal.slope is None
    assert calibration([1, 1], [0.4, 0.9]).intercept is None  # one class: nothing to fit


@pytest.mark.parametrize(
    ("labels", "scores", "message"),
    [
        ([0, 2], [0.1, 0.2], "labels must be 0"),
        ([0, 1], [0.1, float("nan")], "finite probabilities"),
        ([0, 1], [0.1, 1.5], "finite probabilities"),
        ([0, 1, 1], [0.1, 0.2], "3 labels but 2 scores"),
        ([], [], "no cases"),
    ],
)
def test_bad_input_is_refused(labels: list[float], scores: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        auroc(labels, scores)
