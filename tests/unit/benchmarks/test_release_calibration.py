"""The exact calibration (issue 41 part 2): a release declared at (ε, δ) gets the analytic
Gaussian's sigma; releases stored before it (calibrated by the zCDP conversion) still parse,
costing their own rho; a document whose ε is neither refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sealbench.benchmarks.release import (
    Column,
    InsecureFixedNoise,
    Release,
    ReleaseError,
    ReleaseSpec,
    epsilon_of,
    release,
    rho_of,
)
from sealbench.contract.privacy_loss import PrivacyLoss, gaussian_delta

SPEC = ReleaseSpec(columns=(Column("dice:WT", 0.0, 1.0), Column("dice:TC", 0.0, 1.0)))
ROWS = np.array([[0.9, 0.8], [0.7, 0.6], [0.8, 0.9]])


def _legacy(doc: dict[str, object]) -> dict[str, object]:
    """The same release as the first calibration made it: rho by Bun & Steinke's inverse."""
    log = math.log(1 / 1e-6)
    rho = (math.sqrt(1.0 + log) - math.sqrt(log)) ** 2
    sigma = SPEC.sensitivity / math.sqrt(2 * rho)
    columns = [{**c, "sd": sigma * (c["high"] - c["low"])}  # type: ignore[index, operator]
               for c in doc["columns"]]  # type: ignore[attr-defined]
    return {**doc, "rho": rho, "sigma": sigma, "columns": columns}


def test_new_release_sits_on_the_exact_curve() -> None:
    made = release(ROWS, SPEC, InsecureFixedNoise())
    assert made.rho == pytest.approx(rho_of(1.0, 1e-6))
    mu = made.sensitivity / made.sigma
    assert gaussian_delta(mu, 1.0) <= 1e-6 < gaussian_delta(mu * (1 + 1e-6), 1.0)
    assert made.sigma == pytest.approx(0.7897 * _legacy(made.to_json())["sigma"], rel=1e-3)


def test_a_release_of_the_first_calibration_still_parses_and_costs_its_rho() -> None:
    doc = _legacy(release(ROWS, SPEC, InsecureFixedNoise()).to_json())
    old = Release.from_json(doc)
    assert old.matches(SPEC)
    assert old.loss == PrivacyLoss.gaussian(float(doc["rho"]))  # type: ignore[arg-type]
    assert epsilon_of(old.rho or 0.0, 1e-6) < 0.78  # truly (0.776, 1e-6): stated 1 is a bound


def test_a_release_stating_an_epsilon_no_calibration_gives_refused() -> None:
    doc = release(ROWS, SPEC, InsecureFixedNoise()).to_json()
    for epsilon in (0.9, 1.1, 5.0):
        with pytest.raises(ReleaseError):
            Release.from_json({**doc, "epsilon": epsilon})
    with pytest.raises(ReleaseError):  # the old rho with less noise than it needs
        Release.from_json({**_legacy(doc), "epsilon": 0.5})
