"""Exact dataset-level metrics of a binary diagnostic classifier (numpy only).

Every function takes the whole dataset's labels (1 = malignant, the positive class) and scores
(the model's probability of malignancy) and returns one value for the dataset; none of them
looks at a case alone. Nothing here is published: a WDBC summary is a differentially private
release (:mod:`.summary`) whose figures come from noisy score bins (:mod:`.binned`); these exact
values are the reference the released figures are measured against (binning error, coverage)
and what a hospital may compute on its own per-case results. What is computed:

- **AUROC** as the Mann-Whitney statistic with mid-ranks (ties count one half), and its 95%
  confidence interval by **DeLong's method** (DeLong, DeLong and Clarke-Pearson 1988, with the
  mid-rank algorithm of Sun and Xu 2014): variance ``S10/m + S01/n`` of the structural
  components, interval ``AUC ± 1.96·SE`` clipped to [0, 1], as pROC's ``ci.auc(method =
  "delong")`` reports it. Undefined (``None``) when a class is absent; the interval needs two
  cases of each class. At AUC 1 (or 0) the variance is 0 and the interval is a point, as in
  DeLong's method itself.
- **Sensitivity and specificity at the benchmark's fixed threshold** (a case is called
  malignant when its score is ``>= threshold``), with Wilson score 95% intervals, and the
  confusion counts.
- **Brier score**: mean of ``(score - label)²``.
- **Calibration**: a reliability table on a fixed grid of equal-width bins over [0, 1] (cases,
  mean score and observed malignant fraction per bin), the expected calibration error
  ``ECE = Σ n_b/N · |observed_b - mean score_b|``, and logistic recalibration: the slope ``b``
  of ``logit P(y) = a + b·logit(score)`` and the calibration-in-the-large intercept (``a`` with
  ``b`` fixed at 1), both by Newton's method with step halving on the log-likelihood; ``None`` when
  a class is absent or no finite fit exists within the slope cap (separable data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CALIBRATION_BINS",
    "Auroc",
    "Calibration",
    "CalibrationBin",
    "Confusion",
    "Proportion",
    "auroc",
    "brier_score",
    "calibration",
    "check_inputs",
    "confusion",
    "midranks",
    "wilson_interval",
]

FloatArray = npt.NDArray[np.float64]

#: z for a two-sided 95% interval.
Z95: Final = 1.959963984540054
#: Bins of the reliability table (equal width over [0, 1]).
CALIBRATION_BINS: Final = 10
#: Scores are clipped to [EPS, 1 - EPS] before a logit.
_EPS: Final = 1e-6
_NEWTON_STEPS: Final = 100
_NEWTON_TOL: Final = 1e-10
#: A fitted slope beyond this means the labels are (nearly) separable by the score: no finite
#: maximum-likelihood estimate, reported as None.
_MAX_SLOPE: Final = 50.0


def midranks(values: FloatArray) -> FloatArray:
    """Ranks 1..n of ``values``, ties getting the mean of their ranks (as
    ``scipy.stats.rankdata``; numpy only, because importing ``scipy.stats`` costs the enclave
    seconds of start-up)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    bounds = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1], [True])))
    mean_rank = (bounds[:-1] + 1 + bounds[1:]) / 2.0
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, np.diff(bounds))
    return ranks


def check_inputs(labels: npt.ArrayLike, scores: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """``labels`` and ``scores`` as float arrays, or ``ValueError``: equal non-zero lengths,
    labels 0 or 1, scores finite and in [0, 1]."""
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    p = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.shape != p.shape:
        raise ValueError(f"{y.size} labels but {p.size} scores")
    if y.size == 0:
        raise ValueError("no cases")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 (benign) or 1 (malignant)")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError("scores must be finite probabilities in [0, 1]")
    return y, p


@dataclass(frozen=True)
class Auroc:
    """AUROC with its DeLong 95% interval (``None`` where undefined)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    std_error: float | None


def auroc(labels: npt.ArrayLike, scores: npt.ArrayLike) -> Auroc:
    """AUROC (mid-rank Mann-Whitney) and its DeLong 95% interval."""
    y, p = check_inputs(labels, scores)
    positives, negatives = p[y == 1], p[y == 0]
    m, n = positives.size, negatives.size
    if m == 0 or n == 0:
        return Auroc(None, None, None, None)
    ranks_pos = midranks(positives)
    ranks_neg = midranks(negatives)
    ranks_all = midranks(np.concatenate([positives, negatives]))
    # V10[i]: fraction of negatives a positive outranks (ties one half); V01[j] likewise.
    v10 = (ranks_all[:m] - ranks_pos) / n
    v01 = 1.0 - (ranks_all[m:] - ranks_neg) / m
    value = float(v10.mean())
    if m < 2 or n < 2:
        return Auroc(value, None, None, None)
    variance = float(np.var(v10, ddof=1)) / m + float(np.var(v01, ddof=1)) / n
    se = math.sqrt(max(variance, 0.0))
    return Auroc(value, max(0.0, value - Z95 * se), min(1.0, value + Z95 * se), se)


@dataclass(frozen=True)
class Proportion:
    """A proportion ``successes / trials`` and its Wilson 95% interval (``None`` at 0 trials)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    successes: int
    trials: int


def wilson_interval(successes: int, trials: int) -> Proportion:
    """Wilson score 95% interval of ``successes / trials``."""
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes out of {trials} trials")
    if trials == 0:
        return Proportion(None, None, None, 0, 0)
    phat = successes / trials
    z2 = Z95 * Z95
    centre = (phat + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z95 * math.sqrt(phat * (1 - phat) / trials + z2 / (4 * trials * trials)) / (
        1 + z2 / trials
    )
    return Proportion(phat, max(0.0, centre - half), min(1.0, centre + half), successes, trials)


@dataclass(frozen=True)
class Confusion:
    """Confusion counts at a threshold (a score ``>= threshold`` is called malignant)."""

    threshold: float
    tp: int
    fp: int
    tn: int
    fn: int

    @property
    def sensitivity(self) -> Proportion:
        return wilson_interval(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> Proportion:
        return wilson_interval(self.tn, self.tn + self.fp)


def confusion(labels: npt.ArrayLike, scores: npt.ArrayLike, threshold: float) -> Confusion:
    """Confusion counts at ``threshold``."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold {threshold} is not in [0, 1]")
    y, p = check_inputs(labels, scores)
    called = p >= threshold
    positive = y == 1
    return Confusion(
        threshold=threshold,
        tp=int(np.sum(called & positive)),
        fp=int(np.sum(called & ~positive)),
        tn=int(np.sum(~called & ~positive)),
        fn=int(np.sum(~called & positive)),
    )


def brier_score(labels: npt.ArrayLike, scores: npt.ArrayLike) -> float:
    """Mean squared difference between score and label."""
    y, p = check_inputs(labels, scores)
    return float(np.mean((p - y) ** 2))


@dataclass(frozen=True)
class CalibrationBin:
    """One bin ``[low, high)`` of the reliability table (the last bin includes 1)."""

    low: float
    high: float
    n: int
    mean_score: float | None
    observed: float | None


@dataclass(frozen=True)
class Calibration:
    """Reliability table, expected calibration error and logistic recalibration."""

    bins: tuple[CalibrationBin, ...]
    ece: float
    slope: float | None
    intercept: float | None


def _bin_index(p: FloatArray, bins: int) -> npt.NDArray[np.intp]:
    return np.minimum((p * bins).astype(np.intp), bins - 1)


def _logit(p: FloatArray) -> FloatArray:
    q = np.clip(p, _EPS, 1 - _EPS)
    return np.asarray(np.log(q / (1 - q)), dtype=np.float64)


def _log_likelihood(y: FloatArray, x: FloatArray, a: float, b: float) -> float:
    eta = a + b * x
    return float(np.sum(y * eta - np.logaddexp(0.0, eta)))


def _fit_logistic(y: FloatArray, x: FloatArray, *, fix_slope: bool) -> tuple[float, float] | None:
    """Maximum-likelihood ``(a, b)`` of ``P(y=1) = sigmoid(a + b·x)`` (``b`` = 1 if fixed), or
    None when there is no finite maximum within ``|b| <= _MAX_SLOPE`` (separable data).

    Newton's method with step halving: a full step from ``(0, 1)`` on confident scores (logits
    near ±14) overshoots far past the optimum, and undamped it left the cap on data that has
    a perfectly good fit. Each step is halved until the log-likelihood does not fall; the fit
    has converged when the full Newton step is below the tolerance, so on separable data,
    where the likelihood keeps rising towards an infinite slope, it never converges."""
    a, b = 0.0, 1.0
    current = _log_likelihood(y, x, a, b)
    for _ in range(_NEWTON_STEPS):
        mu = 1.0 / (1.0 + np.exp(-np.clip(a + b * x, -700, 700)))
        w = mu * (1 - mu)
        r = y - mu
        if fix_slope:
            hess = float(w.sum())
            if hess <= 0:
                return None
            step_a, step_b = float(r.sum()) / hess, 0.0
        else:
            grad = np.array([r.sum(), (r * x).sum()])
            hess_m = np.array([[w.sum(), (w * x).sum()], [(w * x).sum(), (w * x * x).sum()]])
            if abs(float(np.linalg.det(hess_m))) < 1e-300:
                return None
            step_a, step_b = (float(v) for v in np.linalg.solve(hess_m, grad))
        if abs(step_a) < _NEWTON_TOL and abs(step_b) < _NEWTON_TOL:
            return a, b
        scale = 1.0
        while True:
            next_a, next_b = a + scale * step_a, b + scale * step_b
            if math.isfinite(next_a) and math.isfinite(next_b) and abs(next_b) <= _MAX_SLOPE:
                proposed = _log_likelihood(y, x, next_a, next_b)
                if proposed >= current - 1e-12 * abs(current):
                    break
            scale /= 2
            if scale < 1e-12:
                return None
        a, b, current = next_a, next_b, proposed
    return None


def calibration(
    labels: npt.ArrayLike, scores: npt.ArrayLike, bins: int = CALIBRATION_BINS
) -> Calibration:
    """Reliability table over ``bins`` equal-width bins, ECE, calibration slope and intercept."""
    if bins < 1:
        raise ValueError("at least one bin")
    y, p = check_inputs(labels, scores)
    index = _bin_index(p, bins)
    table = []
    ece = 0.0
    for k in range(bins):
        members = index == k
        n = int(members.sum())
        low, high = k / bins, (k + 1) / bins
        if n == 0:
            table.append(CalibrationBin(low, high, 0, None, None))
            continue
        mean_score, observed = float(p[members].mean()), float(y[members].mean())
        ece += n / y.size * abs(observed - mean_score)
        table.append(CalibrationBin(low, high, n, mean_score, observed))
    slope = intercept = None
    if 0 < y.sum() < y.size:
        x = _logit(p)
        joint = _fit_logistic(y, x, fix_slope=False)
        large = _fit_logistic(y, x, fix_slope=True)
        slope = None if joint is None else joint[1]
        intercept = None if large is None else large[0]
    return Calibration(tuple(table), ece, slope, intercept)
