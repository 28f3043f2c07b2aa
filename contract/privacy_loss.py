"""Privacy loss: what a release costs and what a budget holds, composed tightly (issue 41).

Pure Python (``math`` only): the registry's ledger, the pool authorization's check inside the
aggregator and the release documents all read the same arithmetic.

**What a loss is.** A :class:`PrivacyLoss` is a Gaussian part and a tuple of Laplace parts:

- the Gaussian part is held as its zero-concentrated ``rho`` (``mu**2 / 2`` where ``mu = Δ/sigma``
  is the Gaussian mechanism's sensitivity in units of its noise). Gaussian mechanisms compose
  **exactly** as one Gaussian mechanism whose ``rho`` is the sum (``mu**2`` adds: Dong, Roth
  & Su 2019, Gaussian differential privacy, Corollary 3.3), so a ledger of Gaussian debits is
  the sum of their ``rho``, and its (ε, δ) is read off the **exact** privacy curve of one
  Gaussian mechanism (Balle & Wang 2018, Theorem 8)::

      δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2)

  (:func:`gaussian_delta`; :func:`gaussian_epsilon` inverts it by bisection, rounding up).
- each Laplace part is the pure ε of one Laplace mechanism (``b = Δ1/ε``).

**Reading (ε, δ).** :meth:`PrivacyLoss.epsilon_at` is, for a Gaussian-only loss, the exact
curve above. With Laplace parts it is the smaller of two sound bounds:

1. Rényi DP on a fixed grid of orders a (:data:`ORDERS`): the Gaussian contributes ``a·rho``
   (Mironov 2017, Prop. 7), each Laplace part Mironov's exact Rényi divergence of the Laplace
   mechanism (Prop. 6)::

      1/(a-1) · log( a/(2a-1)·e^{(a-1)ε} + (a-1)/(2a-1)·e^{-aε} )

   summed (RDP composes by addition), converted to (ε, δ) with the improved conversion of
   Canonne, Kamath & Steinke 2020 (Prop. 12) / Balle et al. 2020 (Theorem 21)::

      ε = rdp(a) + log((a-1)/a) - (log δ + log a)/(a-1)

   minimised over the grid;
2. basic composition: the sum of the Laplace ε's plus the Gaussian part's exact ε at δ.

Both are upper bounds of the true ε at δ, so their minimum is; ``tests/unit/contract/
test_privacy_loss.py`` checks every stated (ε, δ) against Google's dp-accounting (PLD).

**Budgets.** :meth:`PrivacyLoss.fits` says whether a loss stays within ``(ε_B, δ_B)``:
``epsilon_at(δ_B) <= ε_B`` (with a relative slack of :data:`SLACK`, so a budget set to exactly
``k`` releases holds all ``k``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ORDERS",
    "SLACK",
    "PrivacyLoss",
    "PrivacyLossError",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_rho",
    "laplace_rdp",
]

#: Relative slack of a spend over a budget: a budget set to exactly ``k`` releases (rounded
#: through ε and back) holds all ``k``; 1e-9 of a budget is no leak.
SLACK: Final = 1e-9
#: The Rényi orders a of the RDP bound: 1 + 2**(k/8), k = -48 .. 88 (from ~1.016 to ~2049).
ORDERS: Final[tuple[float, ...]] = tuple(1.0 + 2.0 ** (k / 8) for k in range(-48, 89))
_SQRT2: Final = math.sqrt(2.0)
_BISECTIONS: Final = 200


class PrivacyLossError(ValueError):
    """A privacy loss, (ε, δ) or budget that means nothing: negative, non-finite, δ outside
    (0, 1)."""


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise PrivacyLossError(f"need 0 < delta < 1, got {delta}")


def _upper_tail(x: float) -> float:
    """Φ(-x) = P[N(0,1) > x], through erfc (no cancellation in the tail)."""
    return 0.5 * math.erfc(x / _SQRT2)


def _log_upper_tail(x: float) -> float:
    """log Φ(-x), finite for every x a δ of interest can need (erfc underflows past x ≈ 38,
    where the asymptotic Mills ratio takes over)."""
    tail = _upper_tail(x)
    if tail > 0:
        return math.log(tail)
    # Φ(-x) = φ(x)/x · (1 - 1/x² + 3/x⁴ - ...) for large x
    return -x * x / 2 - math.log(x * math.sqrt(2 * math.pi)) + math.log1p(-1 / (x * x))


def gaussian_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of the Gaussian mechanism whose sensitivity is ``mu`` noise standard deviations:
    ``Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2)`` (Balle & Wang 2018, Theorem 8), exact."""
    if not (mu >= 0 and math.isfinite(mu)) or not (epsilon >= 0 and math.isfinite(epsilon)):
        raise PrivacyLossError(f"need mu >= 0 and epsilon >= 0, got {mu}, {epsilon}")
    if mu == 0:
        return 0.0
    a = epsilon / mu - mu / 2
    b = epsilon / mu + mu / 2
    first = _upper_tail(a)
    second = math.exp(epsilon + _log_upper_tail(b))
    return max(first - second, 0.0)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε (rounded up by bisection to ~1e-15 relative) at which the Gaussian
    mechanism of ``mu`` is (ε, δ)-DP: the inverse of :func:`gaussian_delta`."""
    _check_delta(delta)
    if not (mu >= 0 and math.isfinite(mu)):
        raise PrivacyLossError(f"need a finite mu >= 0, got {mu}")
    if mu == 0 or gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    rho = mu * mu / 2
    # the zCDP conversion is an upper bound (Bun & Steinke 2016, Prop. 1.3): δ(hi) <= δ
    high = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    while gaussian_delta(mu, high) > delta:  # floating point at the edge: widen
        high *= 2
    low = 0.0
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        if mid <= low or mid >= high:
            break
        if gaussian_delta(mu, mid) > delta:
            low = mid
        else:
            high = mid
    return high


def gaussian_rho(epsilon: float, delta: float) -> float:
    """The largest ``rho = mu**2/2`` whose Gaussian mechanism is (ε, δ)-DP on the exact curve
    (the analytic Gaussian mechanism: sigma = Δ/√(2·rho) is the smallest sigma meeting (ε, δ))."""
    _check_delta(delta)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise PrivacyLossError(f"need a finite epsilon > 0, got {epsilon}")
    # δ(ε) grows with mu; the zCDP conversion's rho is feasible, so start above it
    log = math.log(1 / delta)
    low = math.sqrt(2.0) * (math.sqrt(epsilon + log) - math.sqrt(log))
    if gaussian_delta(low, epsilon) > delta:  # cannot happen in exact arithmetic; be safe
        low = 0.0
    high = max(low, 1e-3) * 2
    while gaussian_delta(high, epsilon) <= delta:
        high *= 2
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        if mid <= low or mid >= high:
            break
        if gaussian_delta(mid, epsilon) <= delta:
            low = mid
        else:
            high = mid
    return low * low / 2


def laplace_rdp(alpha: float, epsilon: float) -> float:
    """The Rényi divergence of order ``alpha`` > 1 of the Laplace mechanism of pure
    ``epsilon`` (Mironov 2017, Prop. 6), computed in log space."""
    if not alpha > 1:
        raise PrivacyLossError(f"need a Rényi order > 1, got {alpha}")
    if epsilon == 0:
        return 0.0
    first = math.log(alpha / (2 * alpha - 1)) + (alpha - 1) * epsilon
    second = math.log((alpha - 1) / (2 * alpha - 1)) - alpha * epsilon
    top = max(first, second)
    total = top + math.log(math.exp(first - top) + math.exp(second - top))
    return min(total / (alpha - 1), epsilon)


def _rdp_epsilon(rho: float, laplace: tuple[float, ...], delta: float) -> float:
    best = math.inf
    log_delta = math.log(delta)
    counts = Counter(laplace)  # a ledger holds many debits of the same few epsilons
    for alpha in ORDERS:
        rdp = alpha * rho + math.fsum(n * laplace_rdp(alpha, e) for e, n in counts.items())
        eps = rdp + math.log((alpha - 1) / alpha) - (log_delta + math.log(alpha)) / (alpha - 1)
        best = min(best, eps)
    return max(best, 0.0)


def _finite_nonnegative(value: float, what: str) -> float:
    value = float(value)
    if not (value >= 0 and math.isfinite(value)):
        raise PrivacyLossError(f"{what} must be finite and >= 0, got {value}")
    return value


@dataclass(frozen=True)
class PrivacyLoss:
    """The privacy loss of one release or of a composition of releases (module docstring): a
    Gaussian part (``rho``, composing exactly by addition) and the pure ε of each Laplace
    mechanism (``laplace``). The empty loss (an exact release's cost) is ``PrivacyLoss()``."""

    rho: float = 0.0
    laplace: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _finite_nonnegative(self.rho, "a Gaussian rho")
        for eps in self.laplace:
            if not (eps > 0 and math.isfinite(eps)):
                raise PrivacyLossError(f"a Laplace epsilon must be finite and > 0, got {eps}")
        # canonical order, so equal compositions compare equal
        object.__setattr__(self, "laplace", tuple(sorted(float(e) for e in self.laplace)))
        object.__setattr__(self, "rho", float(self.rho))

    @classmethod
    def gaussian(cls, rho: float) -> PrivacyLoss:
        """One Gaussian mechanism (or a composition of them) of zCDP ``rho``."""
        return cls(rho=rho)

    @classmethod
    def gaussian_at(cls, epsilon: float, delta: float) -> PrivacyLoss:
        """The Gaussian mechanism calibrated to (ε, δ) on the exact curve."""
        return cls(rho=gaussian_rho(epsilon, delta))

    @classmethod
    def of_laplace(cls, epsilon: float) -> PrivacyLoss:
        """One Laplace mechanism of pure ``epsilon``."""
        return cls(laplace=(epsilon,))

    @classmethod
    def total(cls, losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
        """The composition of ``losses`` (the empty loss when there are none)."""
        rhos: list[float] = []
        laplace: list[float] = []
        for loss in losses:
            rhos.append(loss.rho)
            laplace.extend(loss.laplace)
        return cls(rho=math.fsum(rhos), laplace=tuple(laplace))

    def __add__(self, other: PrivacyLoss) -> PrivacyLoss:
        if not isinstance(other, PrivacyLoss):
            return NotImplemented
        return PrivacyLoss(rho=self.rho + other.rho, laplace=self.laplace + other.laplace)

    @property
    def empty(self) -> bool:
        """No privacy loss at all (exact releases only, or nothing)."""
        return self.rho == 0 and not self.laplace

    @property
    def mu(self) -> float:
        """The Gaussian part as μ-GDP: ``√(2·rho)``."""
        return math.sqrt(2 * self.rho)

    @property
    def laplace_epsilon(self) -> float:
        """The Laplace parts under basic composition (their sum)."""
        return math.fsum(self.laplace)

    def epsilon_at(self, delta: float) -> float:
        """The ε at which this loss is (ε, δ)-DP (module docstring): the exact Gaussian curve
        when there is no Laplace part, else the smaller of the RDP and the basic-composition
        bounds."""
        _check_delta(delta)
        gaussian = gaussian_epsilon(self.mu, delta)
        if not self.laplace:
            return gaussian
        basic = self.laplace_epsilon + gaussian
        return min(basic, _rdp_epsilon(self.rho, self.laplace, delta))

    def fits(self, budget_epsilon: float, budget_delta: float) -> bool:
        """Whether this loss stays within the budget (ε_B, δ_B) (with :data:`SLACK`)."""
        if not (budget_epsilon > 0 and math.isfinite(budget_epsilon)):
            raise PrivacyLossError(f"a budget's epsilon must be finite and > 0, "
                                   f"got {budget_epsilon}")
        if self.empty:
            return True
        return self.epsilon_at(budget_delta) <= budget_epsilon * (1 + SLACK)

    def text(self) -> str:
        """A short human description (``Gaussian rho 0.0276 + Laplace ε 0.5``)."""
        parts = []
        if self.rho:
            parts.append(f"Gaussian rho {self.rho:.6g}")
        if self.laplace:
            parts.append("Laplace epsilon " + " + ".join(f"{e:g}" for e in self.laplace))
        return " + ".join(parts) or "none"
