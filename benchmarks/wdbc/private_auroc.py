"""The pooled AUROC released on its own (issue 41, part 6): computed exactly inside the TEE over
every pooled case and released with pure-ε Laplace noise calibrated to its own sensitivity.

**Neighbouring.** As every release (:mod:`sealbench.benchmarks.release`): two datasets of the
same public size ``n`` that differ in one case, replaced by any other, whose class may differ,
so the class counts ``P`` (malignant) and ``N`` (benign) change too; they are private.

**Cases.** A case enters with its penalised score (:meth:`.summary.WdbcCaseResult.
penalised_score`: a failed case of known class the worst score of its class); a case whose
label is unknown (it could not be loaded) counts as a benign case scored 1, the worst a case
can do to the model (it outranks or ties every malignant one). So ``P + N = n`` always.

**The statistic.** With ``U`` the Mann-Whitney count over every (malignant, benign) pair (a tie
counting 1/2) and a public floor ``k`` (:func:`floor_of`: the plug-in's declared minimum class
share of the public ``n``, within ``1 <= k <= n/2``)::

    T(D) = 1/2 + (U - P·N/2) / (max(P, k) · max(N, k))

When both classes hold ``k`` cases or more, ``T`` **is** the AUROC ``U / (P·N)``. Below the
floor it is the AUROC of the dataset padded with ``k - P`` malignant (or ``k - N`` benign)
virtual cases that tie with every case: ``1/2 + (AUROC - 1/2)·(P/max(P,k))·(N/max(N,k))``,
the AUROC shrunk towards 1/2 (never past it).

**Theorem** (the sensitivity, :func:`sensitivity`). For ``n >= 2`` and ``1 <= k <= n/2``, over
all neighbouring datasets ``D, D'``::

    max |T(D) - T(D')| = Δ(n, k) = max(1/k, 1/(2k) + (k - 1)/(k·(n - k + 1)))

and both terms are attained. So ``Δ = 1/k`` whenever ``n >= 3k - 3`` (a declared share of at
most a third).

*Proof.* Write ``V = U - P·N/2 = Σ c`` over the real pairs with ``c = +1/2, 0, -1/2`` (the
malignant case above, tied with, below the benign one), so ``T = 1/2 + V/(P*·N*)`` with
``P* = max(P, k)``, ``N* = max(N, k)``.

1. *Same class.* Replacing a malignant case by another malignant one changes only its ``N``
   pairs, each ``c`` by at most 1: ``|ΔT| <= N/(P*·N*) <= 1/P* <= 1/k`` (``N <= N*``).
   Attained at ``P = k <= N``: the case moves from below every benign case to above.
   Benign likewise.
2. *Class change.* Let ``D0`` be the ``n - 1`` other cases (``P0``, ``N0``, ``V0``, ``|V0| <=
   P0·N0/2``), ``D = D0 + x`` with ``x`` malignant (``V = V0 + s``, ``|s| <= N0/2``) and
   ``D' = D0 + y`` with ``y`` benign (``V' = V0 + t``, ``|t| <= P0/2``). As ``P0 + N0 = n - 1
   >= 2k - 1``, at most one of ``P0, N0`` is below ``k``.

   a. ``P0, N0 >= k``: ``T`` is the AUROC ``A`` on both sides; with ``A0`` that of ``D0``,
      ``A(D) = (P0·A0 + a)/(P0 + 1)``, ``A(D') = (N0·A0 + b)/(N0 + 1)``, ``a, b`` in [0, 1],
      so ``A(D) - A(D') <= (1 - A0)/(P0 + 1) + A0/(N0 + 1) <= 1/(k + 1)``, and the other way
      likewise.
   b. ``P0 < k <= N0`` (so ``P* = k`` on both sides, ``N* = N0`` and ``N0 + 1``)::

        T(D) - T(D') = (V0 + s(N0 + 1) - t·N0) / (k·N0·(N0 + 1))

      whose absolute value is at most ``(P0·N0/2 + N0(N0 + 1)/2 + P0·N0/2)/(k·N0·(N0 + 1))
      = 1/(2k) + P0/(k·(N0 + 1))``; with ``N0 = n - 1 - P0`` this grows with ``P0``, so at
      most ``1/(2k) + (k - 1)/(k·(n - k + 1))``. Attained at ``P0 = k - 1``: every malignant
      case of ``D0`` above every benign one (``V0 = P0·N0/2``), ``x`` above every benign case
      (``s = N0/2``), ``y`` above every malignant one (``t = -P0/2``).
   c. ``N0 < k <= P0``: case b with the classes swapped and the scores negated (``V -> -V``).

   The maximum of 1 and 2 is ``Δ(n, k)``. ∎ ``tests/unit/benchmarks/test_wdbc_private_auroc.py``
   checks it by brute force: every pair of neighbouring datasets of up to 7 cases with scores
   on a three-level grid (ties included, both class changes), every floor: the largest change
   equals ``Δ(n, k)`` exactly.

**The release** (:func:`release_auroc`). ``S = T/Δ`` has sensitivity 1; it is floored onto the
release grid ``2**-GRID_BITS`` (for integers ``M``, ``a <= b + M`` implies ``floor(a) <=
floor(b) + M``, so flooring keeps the sensitivity at one grid unit count ``2**GRID_BITS``
exactly) and released as one bounded column ``auroc`` of a Laplace release (:data:`COLUMN`,
:func:`release_spec`) whose L1 sensitivity is 1: the column's per-case values are shares of
``S`` in [0, 1], each on the grid (they depend on the other cases, so the per-case clipping
argument does not apply: the theorem does, as for :func:`.summary.pair_shares`). The noise is
the plug-in's Laplace at ``ε_A`` (a pure-ε mechanism: OpenDP's Laplace, in the aggregator the
keyed discrete Laplace), of scale ``b = Δ/ε_A`` on ``T``.

**The figure** (:func:`auroc_figure`): ``T̂ = Δ·S̃``, shown clipped to [0, 1]. Its 95% interval
adds in quadrature the Laplace's 95% half-width ``b·ln 20`` and the sampling's ``1.96·√(A(1 -
A)/k)``, the Van Dantzig / Birnbaum-Klose bound on the variance of a Mann-Whitney AUROC with
``min(P, N) >= k`` cases in its smaller class, at ``A = T̂`` clipped. Shown (not None) when the
interval spans at most half the range, as every released figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from sealbench.benchmarks.interface import Figure, MetricRef
from sealbench.benchmarks.release import Z95

__all__ = [
    "LAPLACE_Z95",
    "AurocStatistic",
    "Floor",
    "auroc_interval",
    "figure",
    "floor_of",
    "sensitivity",
    "shares",
    "statistic",
]

#: The two-sided 95% half-width of Laplace noise in units of its scale: ``ln 20``.
LAPLACE_Z95: Final = math.log(20.0)


@dataclass(frozen=True)
class Floor:
    """The public floor ``k`` on each class's count, from the public case count ``n`` and the
    plug-in's declared minimum class share, and the statistic's sensitivity there."""

    n: int
    k: int

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"need n >= 1 cases, got {self.n}")
        if not 1 <= self.k <= max(1, self.n // 2):
            raise ValueError(f"the floor k={self.k} is not within 1..n/2 (n={self.n})")

    @property
    def sensitivity(self) -> Fraction:
        """Δ(n, k) of the module docstring's theorem, exactly."""
        return sensitivity(self.n, self.k)


def floor_of(n: int, min_class_share: Fraction | float) -> Floor:
    """The floor of ``n`` public cases at a declared minimum class share (in (0, 1/2]; a
    :class:`~fractions.Fraction` is taken exactly, a float as the binary value it is):
    ``k = floor(share·n)`` within ``1..n/2``."""
    if not 0 < min_class_share <= 0.5:
        raise ValueError(f"a minimum class share is in (0, 1/2], got {min_class_share}")
    if n < 1:
        raise ValueError(f"need n >= 1 cases, got {n}")
    k = math.floor(Fraction(min_class_share) * n)
    return Floor(n, min(max(k, 1), max(1, n // 2)))


def sensitivity(n: int, k: int) -> Fraction:
    """``Δ(n, k) = max(1/k, 1/(2k) + (k - 1)/(k·(n - k + 1)))`` (the module docstring's
    theorem), exactly."""
    if n < 1 or k < 1:
        raise ValueError(f"need n, k >= 1, got n={n}, k={k}")
    return max(Fraction(1, k), Fraction(1, 2 * k) + Fraction(k - 1, k * (n - k + 1)))


@dataclass(frozen=True)
class AurocStatistic:
    """The exact statistic over all cases: the class counts, twice the Mann-Whitney count
    (an integer: ties count 1/2), and ``T`` at the floor (module docstring)."""

    malignant: int
    benign: int
    twice_u: int
    floor: Floor

    @property
    def value(self) -> Fraction:
        """``T = 1/2 + (U - P·N/2)/(max(P, k)·max(N, k))``, exactly."""
        k = self.floor.k
        denominator = 2 * max(self.malignant, k) * max(self.benign, k)
        return Fraction(1, 2) + Fraction(self.twice_u - self.malignant * self.benign,
                                         denominator)

    @property
    def auroc(self) -> Fraction | None:
        """The plain AUROC ``U/(P·N)`` (None when a class is empty): what ``T`` equals when
        both classes reach the floor."""
        if self.malignant == 0 or self.benign == 0:
            return None
        return Fraction(self.twice_u, 2 * self.malignant * self.benign)


def statistic(labels: Sequence[bool], scores: Sequence[float], floor: Floor) -> AurocStatistic:
    """``T`` of cases given as (malignant?, score) in [0, 1] (unlabelled cases already counted
    as benign scored 1 by the caller), in ``O(n log n)``: each malignant case's benign cases
    below it and tied with it, by binary search."""
    import bisect

    if len(labels) != len(scores):
        raise ValueError(f"{len(labels)} labels but {len(scores)} scores")
    if len(labels) != floor.n:
        raise ValueError(f"the floor is of {floor.n} cases, received {len(labels)}")
    for score in scores:
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise ValueError("every score is a probability in [0, 1]")
    benign = sorted(s for s, m in zip(scores, labels, strict=True) if not m)
    twice_u = 0
    malignant = 0
    for score, is_malignant in zip(scores, labels, strict=True):
        if not is_malignant:
            continue
        malignant += 1
        below = bisect.bisect_left(benign, score)
        ties = bisect.bisect_right(benign, score) - below
        twice_u += 2 * below + ties
    return AurocStatistic(malignant, len(benign), twice_u, floor)


def auroc_interval(estimate: float, scale: float, floor: Floor) -> tuple[float, float, float]:
    """The shown value (``estimate`` clipped to [0, 1]) and its 95% interval, clipped: the
    Laplace's half-width ``scale·ln 20`` and the sampling's (the Birnbaum-Klose bound at
    ``min(P, N) >= k``) added in quadrature (module docstring)."""
    if not (math.isfinite(estimate) and scale >= 0 and math.isfinite(scale)):
        raise ValueError("need a finite estimate and scale")
    centre = min(max(estimate, 0.0), 1.0)
    sampling = Z95 * math.sqrt(centre * (1.0 - centre) / floor.k)
    half = math.hypot(LAPLACE_Z95 * scale, sampling)
    return centre, max(centre - half, 0.0), min(centre + half, 1.0)


def figure(ref: MetricRef, estimate: float, scale: float, floor: Floor, *,
           noisy: bool) -> Figure:
    """The shown figure of a released ``estimate`` of ``T`` (Laplace ``scale`` on ``T``):
    :func:`auroc_interval`'s value and interval; the value None (withheld, the interval kept
    to say why) when the release is ``noisy`` and the interval spans more than half the
    range. Exact in method (``bias`` None): ``T`` is the AUROC when both classes reach the
    floor, and below it every model on the same cases is shrunk towards 1/2 by the same factor
    (the class counts are the cases'), so their order stands."""
    value, low, high = auroc_interval(estimate, scale, floor)
    shown = value if not noisy or high - low <= 0.5 else None
    return Figure(ref, shown, low, high)


def shares(stat: AurocStatistic, grid_bits: int | None = None) -> list[float]:
    """Per case, its share of ``S = T/Δ``, each in [0, 1]: released as one bounded column, the
    sum is the statistic over its sensitivity. For a noise source that samples on the grid
    ``2**-grid_bits`` (the aggregator's), ``S`` is floored onto it and every share is on it, so
    the sum is ``floor(S·2**grid_bits)/2**grid_bits`` exactly (the module docstring: its
    sensitivity stays one grid unit count); for a continuous one (``None``), ``S/n`` each."""
    n = stat.floor.n
    if grid_bits is None:
        even = float(stat.value / stat.floor.sensitivity / n)
        return [even] * n
    if not 1 <= grid_bits <= 48:
        raise ValueError(f"a grid of 2**-{grid_bits} is outside 1..48 bits")
    scaled = stat.value / stat.floor.sensitivity
    units = math.floor(scaled * (1 << grid_bits))
    base, extra = divmod(units, n)
    unit = 1 << grid_bits
    if base + (1 if extra else 0) > unit:
        raise ValueError("a share exceeds 1 (the floor is not within n/2)")
    return [(base + (1 if i < extra else 0)) / unit for i in range(n)]
