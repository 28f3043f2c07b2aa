"""Every stated (ε, δ) checked by an independent accountant (issue 41 part 2).

Google's dp-accounting PLD accountant is the referee: for each release and each composition a
budget may hold (1..50 releases; Gaussian, Laplace and mixed; ε 0.25-8; δ 1e-5..1e-9) its ε at
δ must not exceed ours, so nothing we state is looser than the truth; for Gaussian-only losses
it must also be within 1% of ours, so the calibration is tight.

Tolerance: the PLD accountant is *pessimistic*: it rounds each privacy-loss value up to its grid
of width ``DV`` before composing, so its ε at δ over-states the true ε by at most ``k·DV`` for
``k`` composed mechanisms (each loss rounded up by at most DV, the composed loss by the sum) and
never under-states it. "PLD <= ours + k·DV" therefore fails whenever ours is below the truth by
more than nothing at all.
"""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from sealbench.contract.privacy_loss import (
    PrivacyLoss,
    PrivacyLossError,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_rho,
    laplace_rdp,
)

DV = 1e-3
EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DELTAS = (1e-5, 1e-7, 1e-9)
COUNTS = (1, 3, 10, 50)


def _pld(events: list[tuple[object, int]], delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=DV)
    for event, count in events:
        acc.compose(event, count)  # type: ignore[arg-type]
    return float(acc.get_epsilon(delta))


def _gaussian_event(rho: float) -> object:
    return dp_event.GaussianDpEvent(1 / math.sqrt(2 * rho))  # noise multiplier at Δ = 1


def _laplace_event(epsilon: float) -> object:
    return dp_event.LaplaceDpEvent(1 / epsilon)  # scale at Δ1 = 1


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_gaussian_releases_and_budgets_are_sound_and_tight(epsilon: float) -> None:
    for delta in DELTAS:
        rho = gaussian_rho(epsilon, delta)
        for k in COUNTS:
            ours = PrivacyLoss.total([PrivacyLoss.gaussian(rho)] * k).epsilon_at(delta)
            if k == 1:
                assert ours <= epsilon * (1 + 1e-12)
            theirs = _pld([(_gaussian_event(rho), k)], delta)
            assert theirs <= ours + k * DV, (epsilon, delta, k, theirs, ours)
            assert theirs >= ours * 0.99, (epsilon, delta, k, theirs, ours)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_laplace_releases_and_budgets_are_sound(epsilon: float) -> None:
    for delta in DELTAS:
        for k in COUNTS:
            ours = PrivacyLoss(laplace=(epsilon,) * k).epsilon_at(delta)
            assert ours <= k * epsilon * (1 + 1e-12)  # never worse than basic composition
            theirs = _pld([(_laplace_event(epsilon), k)], delta)
            assert theirs <= ours + k * DV, (epsilon, delta, k, theirs, ours)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_mixed_releases_and_budgets_are_sound(epsilon: float) -> None:
    """A plug-in that splits a release: Laplace ε/2 for a headline, a Gaussian at (ε/2, δ) for
    the breakdown; k such releases."""
    for delta in DELTAS:
        rho = gaussian_rho(epsilon / 2, delta)
        one = PrivacyLoss.gaussian(rho) + PrivacyLoss.of_laplace(epsilon / 2)
        for k in COUNTS:
            ours = PrivacyLoss.total([one] * k).epsilon_at(delta)
            if k == 1:
                assert ours <= epsilon * (1 + 1e-12)
            theirs = _pld([(_gaussian_event(rho), k), (_laplace_event(epsilon / 2), k)], delta)
            assert theirs <= ours + 2 * k * DV, (epsilon, delta, k, theirs, ours)


@pytest.mark.parametrize(("release", "budget"), [
    (PrivacyLoss.gaussian(gaussian_rho(1.0, 1e-6)), (10.0, 1e-6)),
    (PrivacyLoss.gaussian(gaussian_rho(0.5, 1e-7)), (4.0, 1e-7)),
    (PrivacyLoss.of_laplace(0.5), (10.0, 1e-6)),
    (PrivacyLoss.of_laplace(1.0) + PrivacyLoss.gaussian(gaussian_rho(1.0, 1e-6)),
     (8.0, 1e-6)),
])
def test_a_budget_holds_what_the_independent_accountant_allows(
        release: PrivacyLoss, budget: tuple[float, float]) -> None:
    epsilon_b, delta_b = budget
    k = 0
    while PrivacyLoss.total([release] * (k + 1)).fits(epsilon_b, delta_b):
        k += 1
    assert 1 <= k < 500
    events: list[tuple[object, int]] = []
    if release.rho:
        events.append((_gaussian_event(release.rho), k))
    for eps in release.laplace:
        events.append((_laplace_event(eps), k))
    assert _pld(events, delta_b) <= epsilon_b + len(events) * k * DV
    if not release.laplace:  # tight: one more release would overspend by the referee too
        more = [(_gaussian_event(release.rho), k + 1)]
        assert _pld(more, delta_b) > epsilon_b * 0.99


def test_a_budget_of_10_holds_60_true_1_epsilon_releases_where_it_held_77_overstated_ones() -> None:
    """The trade the exact curve makes (docs/privacy.md "Accounting"): each release at a
    stated (1, 1e-6) now is truly (1, 1e-6)-DP with 0.79x the noise, so a budget of
    (10, 1e-6) holds 60 of them; the zCDP conversion held 77 releases that were each truly
    (0.776, 1e-6)-DP, i.e. stated more loss than they cost."""
    log = math.log(1e6)
    old_rho = (math.sqrt(1 + log) - math.sqrt(log)) ** 2
    old_budget = (math.sqrt(10 + log) - math.sqrt(log)) ** 2
    assert math.floor(old_budget / old_rho) == 77
    rho = gaussian_rho(1.0, 1e-6)
    count = 0
    while PrivacyLoss.gaussian((count + 1) * rho).fits(10.0, 1e-6):
        count += 1
    assert count == 60


def test_analytic_sigma_at_1_and_1e_6_is_a_fifth_below_the_zcdp_one() -> None:
    """docs/privacy.md "Accounting" quotes this ratio."""
    log = math.log(1e6)
    old_rho = (math.sqrt(1 + log) - math.sqrt(log)) ** 2
    ratio = math.sqrt(old_rho / gaussian_rho(1.0, 1e-6))  # sigma_new / sigma_old
    print(f"analytic sigma / zCDP sigma at (1, 1e-6): {ratio:.4f}")
    assert ratio == pytest.approx(0.7897, abs=1e-4)
    # and the old noise, read on the exact curve, was (0.776, 1e-6)-DP (issue 41)
    assert PrivacyLoss.gaussian(old_rho).epsilon_at(1e-6) == pytest.approx(0.7756, abs=1e-4)


def test_the_exact_curve_inverts_itself() -> None:
    for mu in (0.05, 0.3, 1.0, 4.0, 20.0):
        for delta in (1e-3, 1e-6, 1e-9, 1e-12):
            eps = gaussian_epsilon(mu, delta)
            assert gaussian_delta(mu, eps) <= delta
            if eps > 0:
                assert gaussian_delta(mu, eps * (1 - 1e-9)) > delta * (1 - 1e-6)


def test_laplace_rdp_matches_its_limits() -> None:
    # Rényi divergence grows with the order and stays below the pure epsilon
    values = [laplace_rdp(a, 1.0) for a in (1.01, 2.0, 10.0, 1000.0)]
    assert values == sorted(values) and values[-1] <= 1.0 and values[-1] > 0.99
    assert laplace_rdp(2.0, 0.0) == 0.0


def test_composition_is_order_free_and_empty_costs_nothing() -> None:
    a = PrivacyLoss.gaussian(0.01) + PrivacyLoss.of_laplace(0.5)
    b = PrivacyLoss.of_laplace(0.5) + PrivacyLoss.gaussian(0.01)
    assert a == b and PrivacyLoss().empty and PrivacyLoss().fits(1e-9, 1e-9)
    assert PrivacyLoss.total([]) == PrivacyLoss()


@pytest.mark.parametrize("bad", [
    lambda: PrivacyLoss(rho=-1.0),
    lambda: PrivacyLoss(rho=math.inf),
    lambda: PrivacyLoss(laplace=(0.0,)),
    lambda: PrivacyLoss(laplace=(math.nan,)),
    lambda: PrivacyLoss.gaussian(0.1).epsilon_at(0.0),
    lambda: PrivacyLoss.gaussian(0.1).epsilon_at(1.0),
    lambda: PrivacyLoss.gaussian(0.1).fits(-1.0, 1e-6),
    lambda: gaussian_rho(0.0, 1e-6),
    lambda: gaussian_rho(math.inf, 1e-6),
])
def test_meaningless_losses_and_budgets_are_refused(bad: object) -> None:
    with pytest.raises(PrivacyLossError):
        bad()  # type: ignore[operator]
