"""The Laplace release (issue 41 part 2): pure ε at the L1 sensitivity, OpenDP's own map
checked, what a budget is charged, and a document that cannot claim less noise than it has."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sealbench.benchmarks.release import (
    Category,
    Column,
    InsecureFixedNoise,
    LocalExact,
    OpenDPGaussian,
    PrivacyLoss,
    Release,
    ReleaseError,
    ReleaseSpec,
    release,
)
from sealbench.benchmarks.seeded_noise import SeededDiscreteGaussian

SPEC = ReleaseSpec(columns=(Column("dice", 0.0, 1.0), Column("hd", 0.0, 10.0)),
                   categories=(Category("label", ("b", "m")),),
                   epsilon=0.5, mechanism="laplace")
ROWS = np.array([[0.5, 3.0, 1.0, 0.0]] * 6)


def test_laplace_scale_is_l1_sensitivity_over_epsilon() -> None:
    # two columns + one block: L1 sensitivity 2 + 2 = 4 = Δ2²
    assert SPEC.l1_sensitivity == pytest.approx(4.0)
    assert SPEC.scale == pytest.approx(4.0 / 0.5)
    assert SPEC.sigma == pytest.approx(math.sqrt(2) * 8.0)
    assert SPEC.half_width95 == pytest.approx(8.0 * math.log(20))  # ≈ 3·Δ1/ε
    assert SPEC.rho is None
    assert SPEC.loss == PrivacyLoss(laplace=(0.5,))


def test_opendp_laplace_map_is_checked_against_the_declared_epsilon() -> None:
    made = release(ROWS, SPEC, OpenDPGaussian())
    assert made.mechanism == "laplace" and made.library.startswith("opendp ")
    assert made.delta is None and made.rho is None
    assert made.loss == PrivacyLoss(laplace=(0.5,))
    assert made.matches(SPEC)
    with pytest.raises(ReleaseError, match="spends epsilon"):
        OpenDPGaussian().laplace([0.0, 1.0], scale=1.0, sensitivity=4.0, epsilon=0.5)


def test_laplace_noise_has_the_declared_spread() -> None:
    spec = ReleaseSpec(columns=(Column("x", 0.0, 1.0),), epsilon=1.0, mechanism="laplace")
    draws = np.array(OpenDPGaussian().laplace([0.0] * 20000, spec.scale, 1.0, 1.0))
    # Laplace(b = 1): mean |X| = b, P(|X| > b ln 20) = 5%
    assert np.mean(np.abs(draws)) == pytest.approx(1.0, rel=0.05)
    assert np.mean(np.abs(draws) > spec.half_width95) == pytest.approx(0.05, abs=0.01)


def test_keyed_discrete_laplace_is_repeatable_and_has_the_declared_spread() -> None:
    spec = ReleaseSpec(columns=(Column("x", 0.0, 1.0),), epsilon=1.0, mechanism="laplace")
    one = SeededDiscreteGaussian(b"k" * 32).laplace([0.0] * 4000, spec.scale, 1.0, 1.0)
    two = SeededDiscreteGaussian(b"k" * 32).laplace([0.0] * 4000, spec.scale, 1.0, 1.0)
    assert one == two
    assert float(np.mean(np.abs(one))) == pytest.approx(1.0, rel=0.08)
    made = release(ROWS, SPEC, SeededDiscreteGaussian(b"s" * 32))
    assert made.mechanism == "laplace" and made.loss == SPEC.loss


def test_keyed_laplace_refuses_a_scale_that_spends_more_than_declared() -> None:
    with pytest.raises(ValueError, match="does not deliver epsilon"):
        SeededDiscreteGaussian(b"k" * 32).laplace([0.0], scale=1.0, sensitivity=4.0,
                                                  epsilon=0.5)


def test_a_laplace_document_cannot_claim_less_noise_or_a_delta() -> None:
    doc = release(ROWS, SPEC, InsecureFixedNoise()).to_json()
    assert Release.from_json(doc).matches(SPEC)
    for tamper in ({"sigma": 1.0}, {"epsilon": 5.0}, {"delta": 1e-6}, {"rho": 0.1},
                   {"mechanism": "gaussian"}, {"mechanism": "exact"}):
        with pytest.raises(ReleaseError):
            Release.from_json({**doc, **tamper})


def test_a_laplace_release_is_not_read_as_a_gaussian_one() -> None:
    made = release(ROWS, SPEC, InsecureFixedNoise())
    gaussian = ReleaseSpec(columns=SPEC.columns, categories=SPEC.categories, epsilon=0.5)
    assert not made.matches(gaussian)
    assert not release(ROWS, gaussian, InsecureFixedNoise()).matches(SPEC)


def test_a_local_exact_laplace_release_is_exact_and_costs_nothing() -> None:
    made = release(ROWS, SPEC, LocalExact())
    assert made.exact and made.loss.empty and made.sigma == 0


def test_a_laplace_spec_needs_a_positive_epsilon_and_no_delta() -> None:
    pure = ReleaseSpec(columns=(Column("x", 0.0, 1.0),), epsilon=1.0, delta=0.0,
                       mechanism="laplace")
    assert pure.loss == PrivacyLoss(laplace=(1.0,))
    for epsilon in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            ReleaseSpec(columns=(Column("x", 0.0, 1.0),), epsilon=epsilon, mechanism="laplace")
    with pytest.raises(ValueError, match="unknown release mechanism"):
        ReleaseSpec(columns=(Column("x", 0.0, 1.0),), mechanism="cauchy")  # type: ignore[arg-type]
