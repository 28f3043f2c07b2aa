"""Releases: the only door a figure takes out of a hospital's enclave (DESIGN, "Releases").

A **release** is a differentially private set of sums over a dataset's cases. A benchmark
plug-in declares what its release contains (:class:`ReleaseSpec`: bounded per-case values and
one-hot categories, and the privacy loss per release); it hands :func:`release` one row of
per-case contributions per case, and builds its public summary from the :class:`Release` alone,
so every figure it publishes is post-processing of the release and inherits its guarantee.

**Unit of privacy and neighbouring.** One case of a dataset. Two datasets are neighbours when
they differ in one case replaced by another (bounded DP): the case count ``n`` is public (it is
registered with the dataset), everything about any one case (its metrics, its label, its
presence rather than another patient's) is protected.

**Mechanism.** Bounded columns are clipped to ``[low, high]`` and scaled to ``[0, 1]``; one-hot
blocks hold one 1 per case. Replacing a case moves each bounded column's sum by at most 1 and a
one-hot block's counts by at most 1 in two cells, and each second moment (:class:`Moment`: a sum
of squared scaled values) by at most 1, so the L2 sensitivity of the vector of sums is
``Δ = √(bounded columns + moments + 2·blocks)`` and its L1 sensitivity ``Δ1 = Δ² = bounded
columns + moments + 2·blocks`` (each unit of the one is a unit of the other).
A plug-in declares one of two mechanisms per release (``ReleaseSpec.mechanism``):

- ``"gaussian"`` (the default) adds ``N(0, sigma²)`` to every sum, with the smallest sigma whose
  **exact** privacy curve meets the declared (ε, δ) (the analytic Gaussian mechanism, Balle &
  Wang 2018: :func:`rho_of`, ``sigma = Δ / √(2rho)``). Noise is drawn by OpenDP's
  ``make_gaussian`` (:class:`OpenDPGaussian`: exact, floating-point-safe sampling from the OS's
  randomness; no seed any party controls), fresh per release, and OpenDP's own privacy map is
  checked to give no more than the declared rho.
- ``"laplace"`` (pure ε, no δ) adds Laplace noise of scale ``b = Δ1/ε`` to every sum (OpenDP's
  ``make_laplace``, its map checked likewise). For one or a few figures it is the narrower: a
  95% half-width of ``b·ln 20 ≈ 3Δ1/ε`` where the Gaussian at δ = 1e-6 needs about 7-8Δ.

The sums are then scaled back, so a column's ``sd`` (the noise's standard deviation: ``sigma``,
or ``√2·b`` for Laplace) is ``sd·(high - low)`` in its own unit.

**Accounting** (:mod:`sealbench.contract.privacy_loss`). A release's cost is its
:class:`~sealbench.contract.privacy_loss.PrivacyLoss` (:attr:`Release.loss`): a Gaussian release
its zCDP ``rho = Δ²/(2sigma²)`` (Gaussians compose exactly by adding rho), a Laplace release its
pure ε. :func:`epsilon_of` reads rho on the exact Gaussian curve and :func:`rho_of` inverts it,
so a declared (ε, δ) per release is met exactly; budgets compose losses and read them back at
their δ on the same exact curve (with an RDP bound once Laplace parts are in). Releases of the
first calibration (through Bun & Steinke's looser zCDP conversion ``rho + 2√(rho·ln(1/δ))``)
state an ε at δ that is an upper bound of the exact one: they stay valid.

**Exact releases** (``ReleaseSpec.exact``) add no noise and state no ε: a benchmark may declare
one only as a labelled choice each data owner consents to.

The :class:`Release` document (``sealbench/dp-release`` version 1, or 2 when it holds moments;
canonical JSON inside a plug-in's summary)::

    format, version     "sealbench/dp-release", 1 (2: with moments)
    mechanism           "gaussian" (OpenDP make_gaussian), "laplace" (OpenDP make_laplace)
                        or "exact"
    neighbouring        "replace-one-case"
    n_cases             the case count (public)
    epsilon, delta      the privacy loss of this release (null for exact; delta null for
                        laplace: pure ε)
    rho                 a Gaussian release's loss in zCDP, what budgets compose (null otherwise)
    sensitivity         Δ, the L2 sensitivity of the scaled sums (Δ1 = Δ² the L1 one)
    sigma               the noise's standard deviation on each scaled sum (0 for exact; √2·b
                        for laplace, whose scale is b = Δ1/ε)
    columns             [{key, low, high, sum, sd}]: each bounded column's noisy sum of the
                        clipped values, in the value's unit, and its noise sd
    categories          [{keys, counts, sd}]: each one-hot block's noisy counts and noise sd
    moments             (version 2 only) [{key, of, low, high, squares, sd}]: each second
                        moment's noisy sum over cases of (v - low)², v the case's mean of the
                        columns ``of``, in the value's unit squared, and its noise sd
                        (sd·(high - low)²)

:func:`column_mean` and :func:`pooled_mean` turn releases into estimates whose 95% intervals
account for both sampling and release noise, the sampling term read from a second moment where
the release holds one (see their docstrings).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from sealbench.contract.privacy_loss import PrivacyLoss, PrivacyLossError, gaussian_rho

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_EPSILON",
    "Z95",
    "Category",
    "Column",
    "Estimate",
    "InsecureFixedNoise",
    "LocalExact",
    "Moment",
    "NoiseSource",
    "OpenDPGaussian",
    "PrivacyLoss",
    "Release",
    "ReleaseError",
    "ReleaseSpec",
    "ReleasedCategories",
    "ReleasedColumn",
    "ReleasedMoment",
    "average_of",
    "column_mean",
    "defined_value",
    "epsilon_of",
    "pooled_mean",
    "ratio_mean",
    "release",
    "rho_of",
]

#: The privacy loss of one release unless a plug-in declares another (docs/privacy.md says why).
DEFAULT_EPSILON: Final = 1.0
DEFAULT_DELTA: Final = 1e-6
#: z for a two-sided 95% interval.
Z95: Final = 1.959963984540054
_KEY: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_FROZEN = ConfigDict(frozen=True, extra="forbid")
_log = logging.getLogger("sealbench.benchmarks")


class ReleaseError(ValueError):
    """A release cannot be made or read: contributions that do not fit the spec, a malformed
    release document, or a noise source that does not deliver the declared privacy loss."""


# -- accounting ---------------------------------------------------------------------------------


def epsilon_of(rho: float, delta: float) -> float:
    """The ε at which the Gaussian mechanism of zCDP ``rho`` (``mu = √(2rho)`` noise standard
    deviations of sensitivity) is (ε, δ)-DP, on its exact privacy curve (Balle & Wang 2018;
    :func:`sealbench.contract.privacy_loss.gaussian_epsilon`)."""
    if not (rho >= 0 and math.isfinite(rho)) or not 0 < delta < 1:
        raise ValueError(f"need rho >= 0 and 0 < delta < 1, got rho={rho}, delta={delta}")
    return PrivacyLoss.gaussian(rho).epsilon_at(delta)


def rho_of(epsilon: float, delta: float) -> float:
    """The largest rho whose Gaussian mechanism is (ε, δ)-DP on the exact curve: the analytic
    Gaussian mechanism's calibration, ``sigma = Δ/√(2rho)`` the smallest sigma that meets
    (ε, δ) (:func:`sealbench.contract.privacy_loss.gaussian_rho`)."""
    if not (epsilon > 0 and math.isfinite(epsilon)) or not 0 < delta < 1:
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got {epsilon}, {delta}")
    try:
        return gaussian_rho(epsilon, delta)
    except PrivacyLossError as exc:  # pragma: no cover - validated above
        raise ValueError(str(exc)) from exc


# -- what a plug-in declares ----------------------------------------------------------------------


def _check_key(key: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"invalid release key {key!r}")


@dataclass(frozen=True)
class Column:
    """A bounded per-case value: each case's value is clipped to ``[low, high]``."""

    key: str
    low: float
    high: float

    def __post_init__(self) -> None:
        _check_key(self.key)
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"column {self.key}: need finite bounds low < high")


@dataclass(frozen=True)
class Category:
    """A one-hot block: each case falls in exactly one of ``keys`` (a class, a score bin)."""

    key: str
    keys: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_key(self.key)
        for key in self.keys:
            _check_key(key)
        if len(self.keys) < 2 or len(set(self.keys)) != len(self.keys):
            raise ValueError(f"category {self.key}: need two or more distinct keys")


@dataclass(frozen=True)
class Moment:
    """A private second moment: the sum over cases of the square of the mean of the bounded
    columns ``of`` (all clipped to the same bounds), scaled to [0, 1] as the columns are. One
    column (``of=("dice:WT",)``) gives that column's sum of squares; several give the squares of
    their per-case mean (a headline averaged over regions). It is one more unit of L2
    sensitivity, as a column is (a case's scaled square lies in [0, 1]): mark few, the headline
    figures whose sampling spread the estimates then read from the data (:func:`pooled_mean`)
    instead of bounding it at the worst case."""

    key: str
    of: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_key(self.key)
        if not self.of or len(set(self.of)) != len(self.of):
            raise ValueError(f"moment {self.key}: need one or more distinct columns")


@dataclass(frozen=True)
class ReleaseSpec:
    """What a plug-in's release contains and what one release may cost (ε, δ), part of the
    plug-in pin that the owners approve and the key-release condition binds; never an operator
    input. ``exact`` declares a non-private release (no noise; consented to, never a default).
    ``mechanism`` chooses the noise (module docstring): ``"gaussian"`` at (ε, δ), or
    ``"laplace"`` at pure ε (``delta`` is then unused)."""

    columns: tuple[Column, ...]
    categories: tuple[Category, ...] = ()
    #: Private second moments (:class:`Moment`), each one more unit of sensitivity.
    moments: tuple[Moment, ...] = ()
    epsilon: float = DEFAULT_EPSILON
    delta: float = DEFAULT_DELTA
    exact: bool = False
    mechanism: Literal["gaussian", "laplace"] = "gaussian"

    def __post_init__(self) -> None:
        if self.mechanism not in ("gaussian", "laplace"):
            raise ValueError(f"unknown release mechanism {self.mechanism!r}")
        keys = [c.key for c in self.columns] + [c.key for c in self.categories]
        if not keys or len(set(keys)) != len(keys):
            raise ValueError("a release needs distinct column and category keys (at least one)")
        bounds = {c.key: (c.low, c.high) for c in self.columns}
        if len({m.key for m in self.moments}) != len(self.moments):
            raise ValueError("a release needs distinct moment keys")
        for moment in self.moments:
            if any(k not in bounds for k in moment.of):
                raise ValueError(f"moment {moment.key}: of a column the release does not hold")
            if len({bounds[k] for k in moment.of}) != 1:
                raise ValueError(f"moment {moment.key}: its columns have different bounds")
        if not self.exact and self.mechanism == "laplace":
            if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
                raise ValueError(f"need a finite epsilon > 0, got {self.epsilon}")
        elif not self.exact:
            rho_of(self.epsilon, self.delta)  # validates ε and δ

    @property
    def width(self) -> int:
        """Contributions per case: one per bounded column, one per category key."""
        return len(self.columns) + sum(len(c.keys) for c in self.categories)

    @property
    def sensitivity(self) -> float:
        """Δ: the L2 sensitivity of the scaled sums to replacing one case."""
        return math.sqrt(len(self.columns) + len(self.moments) + 2 * len(self.categories))

    @property
    def l1_sensitivity(self) -> float:
        """Δ1: the L1 sensitivity of the scaled sums (each unit of Δ² is one unit of it)."""
        return self.sensitivity ** 2

    @property
    def rho(self) -> float | None:
        """A Gaussian release's zCDP rho; None for an exact or a Laplace release (whose cost is
        :attr:`loss`)."""
        if self.exact or self.mechanism != "gaussian":
            return None
        return rho_of(self.epsilon, self.delta)

    @property
    def loss(self) -> PrivacyLoss:
        """What one release costs a budget (nothing for an exact release)."""
        if self.exact:
            return PrivacyLoss()
        if self.mechanism == "laplace":
            return PrivacyLoss.of_laplace(self.epsilon)
        return PrivacyLoss.gaussian(rho_of(self.epsilon, self.delta))

    @property
    def scale(self) -> float:
        """The noise's own scale on each scaled sum: sigma for the Gaussian, ``b = Δ1/ε`` for
        Laplace (0 for an exact release)."""
        if self.exact:
            return 0.0
        if self.mechanism == "laplace":
            return self.l1_sensitivity / self.epsilon
        rho = rho_of(self.epsilon, self.delta)
        return self.sensitivity / math.sqrt(2 * rho)

    @property
    def sigma(self) -> float:
        """The noise's standard deviation on each scaled sum (0 for an exact release): sigma for
        the Gaussian, ``√2·b`` for Laplace."""
        if self.mechanism == "laplace" and not self.exact:
            return math.sqrt(2.0) * self.scale
        return self.scale

    @property
    def half_width95(self) -> float:
        """The 95% half-width of the noise alone on one scaled sum: ``1.96·sigma`` for the
        Gaussian, ``b·ln 20`` for Laplace (P(|L| > t) = e^(-t/b))."""
        if self.mechanism == "laplace" and not self.exact:
            return self.scale * math.log(20.0)
        return Z95 * self.scale


# -- noise --------------------------------------------------------------------------------------


class NoiseSource(Protocol):
    """Adds noise to each value and returns the noisy values: :meth:`gaussian` of standard
    deviation ``sigma`` (raising :class:`ReleaseError` when it cannot deliver ``rho``-zCDP at
    the L2 ``sensitivity``), :meth:`laplace` of scale ``scale`` (raising when it cannot deliver
    pure ``epsilon`` at the L1 ``sensitivity``)."""

    @property
    def name(self) -> str: ...

    def gaussian(self, values: Sequence[float], sigma: float, sensitivity: float,
                 rho: float) -> list[float]: ...

    def laplace(self, values: Sequence[float], scale: float, sensitivity: float,
                epsilon: float) -> list[float]: ...


class OpenDPGaussian:
    """OpenDP's Gaussian and Laplace mechanisms on a vector (``make_gaussian`` over an L2
    metric, ``make_laplace`` over an L1 metric): exact sampling from the OS's randomness,
    floating-point safe. It checks that OpenDP's own privacy map gives no more than the declared
    ``rho`` (or pure ``epsilon``) at ``sensitivity``."""

    @property
    def name(self) -> str:
        from importlib.metadata import version

        return f"opendp {version('opendp')}"

    def gaussian(self, values: Sequence[float], sigma: float, sensitivity: float,
                 rho: float) -> list[float]:
        from opendp.measurements import make_gaussian
        from opendp.metrics import l2_distance

        return _opendp_noise(values, make_gaussian, l2_distance, sigma, sensitivity, rho,
                             f"the Gaussian mechanism at sigma {sigma}", "rho")

    def laplace(self, values: Sequence[float], scale: float, sensitivity: float,
                epsilon: float) -> list[float]:
        from opendp.measurements import make_laplace
        from opendp.metrics import l1_distance

        return _opendp_noise(values, make_laplace, l1_distance, scale, sensitivity, epsilon,
                             f"the Laplace mechanism at scale {scale}", "epsilon")


def _opendp_noise(values: Sequence[float], make: Any, metric: Any, scale: float,
                  sensitivity: float, declared: float, what: str, unit: str) -> list[float]:
    """``values`` through OpenDP's vector mechanism ``make`` over ``metric`` at ``scale``,
    refused (:class:`ReleaseError`) when OpenDP's own privacy map spends more than
    ``declared`` (``unit``: rho for the Gaussian, epsilon for the Laplace) at
    ``sensitivity``."""
    # the modules themselves, not opendp.prelude (which imports its sklearn extras: ~5 s)
    from opendp.domains import atom_domain, vector_domain
    from opendp.mod import enable_features

    enable_features("contrib")
    domain = vector_domain(atom_domain(T=float, nan=False))
    meas = make(domain, metric(T=float), scale=float(scale))
    spent = float(meas.map(float(sensitivity)))
    if spent > declared * (1 + 1e-9):
        raise ReleaseError(f"{what} spends {unit} {spent}, more than the declared {declared}")
    noisy = meas([float(v) for v in values])
    return [float(v) for v in noisy]


class InsecureFixedNoise:
    """INSECURE: adds the given offsets (cycled; 0 by default) instead of random noise, so tests
    get known answers. A release made with it states the declared ε but protects nobody; it
    logs a warning and names itself in the release's ``library``."""

    def __init__(self, offsets: Sequence[float] = (0.0,)) -> None:
        if not offsets:
            raise ValueError("need at least one offset")
        self._offsets = tuple(float(v) for v in offsets)

    @property
    def name(self) -> str:
        return "INSECURE fixed noise"

    def gaussian(self, values: Sequence[float], sigma: float, sensitivity: float,
                 rho: float) -> list[float]:
        _log.warning("INSECURE: a release drew no random noise (InsecureFixedNoise)")
        return [float(v) + self._offsets[i % len(self._offsets)] for i, v in enumerate(values)]

    def laplace(self, values: Sequence[float], scale: float, sensitivity: float,
                epsilon: float) -> list[float]:
        return self.gaussian(values, scale, sensitivity, 0.0)


class LocalExact:
    """No noise, for figures that never leave the machine already holding the per-case results:
    the hospital's own view of its sealed results (``result open``) and checks on synthetic demo
    data. A release made with it is an **exact** release (``mechanism`` "exact"), which a private
    pin's ``parse_summary`` refuses: it can never pass for a private one."""

    @property
    def name(self) -> str:
        return "none (local, exact)"

    def gaussian(self, values: Sequence[float], sigma: float, sensitivity: float,
                 rho: float) -> list[float]:
        return [float(v) for v in values]

    def laplace(self, values: Sequence[float], scale: float, sensitivity: float,
                epsilon: float) -> list[float]:
        return [float(v) for v in values]


# -- the release document ------------------------------------------------------------------------


class ReleasedColumn(BaseModel):
    model_config = _FROZEN

    key: str
    low: float
    high: float
    sum: float
    sd: float = Field(ge=0)


class ReleasedCategories(BaseModel):
    model_config = _FROZEN

    key: str
    keys: tuple[str, ...]
    counts: tuple[float, ...]
    sd: float = Field(ge=0)

    @model_validator(mode="after")
    def _lengths(self) -> Self:
        if len(self.keys) != len(self.counts) or len(self.keys) < 2:
            raise ValueError("a category block needs one count per key (two or more)")
        return self


class ReleasedMoment(BaseModel):
    """A released second moment (:class:`Moment`): ``squares`` is the noisy sum over cases of
    ``(v - low)²``, ``v`` the case's mean of the columns ``of`` clipped to ``[low, high]``, in
    the value's unit squared; ``sd`` its noise's standard deviation, ``sigma·(high - low)²``."""

    model_config = _FROZEN

    key: str
    of: tuple[str, ...]
    low: float
    high: float
    squares: float
    sd: float = Field(ge=0)


class Release(BaseModel):
    """A differentially private (or declared exact) release of sums over a dataset's cases.
    Version 2 adds ``moments`` (private second moments); a release without them is version 1,
    byte for byte as before."""

    model_config = _FROZEN

    format: Literal["sealbench/dp-release"] = "sealbench/dp-release"
    version: Literal[1, 2] = 1
    mechanism: Literal["gaussian", "laplace", "exact"]
    library: str
    neighbouring: Literal["replace-one-case"] = "replace-one-case"
    n_cases: int = Field(ge=1)
    epsilon: float | None
    delta: float | None
    rho: float | None
    sensitivity: float = Field(gt=0)
    sigma: float = Field(ge=0)
    columns: tuple[ReleasedColumn, ...]
    categories: tuple[ReleasedCategories, ...] = ()
    moments: tuple[ReleasedMoment, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_moments(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A version 1 release serialises as it always did (no ``moments`` key)."""
        out: dict[str, Any] = handler(self)
        if not self.moments:
            out.pop("moments", None)
        return out

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.version == 2) != bool(self.moments):
            raise ValueError("a release holds moments exactly when it is version 2")
        values = [self.sensitivity, self.sigma]
        values += [v for m in self.moments for v in (m.low, m.high, m.squares, m.sd)]
        values += [v for c in self.columns for v in (c.low, c.high, c.sum, c.sd)]
        values += [v for c in self.categories for v in (*c.counts, c.sd)]
        values += [v for v in (self.epsilon, self.delta, self.rho) if v is not None]
        if not all(math.isfinite(v) for v in values):
            raise ValueError("a release holds a non-finite value")
        if self.mechanism == "exact":
            if (self.epsilon, self.delta, self.rho) != (None, None, None) or self.sigma != 0:
                raise ValueError("an exact release states no privacy loss and adds no noise")
        elif self.mechanism == "laplace":
            if (self.epsilon is None or not self.epsilon > 0 or self.delta is not None
                    or self.rho is not None):
                raise ValueError("a Laplace release states epsilon > 0 and no delta or rho")
            expected = math.sqrt(2.0) * self.sensitivity ** 2 / self.epsilon
            if not math.isclose(self.sigma, expected, rel_tol=1e-9):
                raise ValueError("sigma is not the Laplace noise's at the stated epsilon")
        else:
            if self.epsilon is None or self.delta is None or self.rho is None or self.sigma <= 0:
                raise ValueError("a private release states epsilon, delta, rho and sigma > 0")
            if not (self.rho > 0 and 0 < self.delta < 1):
                raise ValueError("a Gaussian release states rho > 0 and 0 < delta < 1")
            expected = self.sensitivity / math.sqrt(2 * self.rho)
            if not math.isclose(self.sigma, expected, rel_tol=1e-9):
                raise ValueError("sigma does not deliver the stated rho at the sensitivity")
            # epsilon is what rho gives at delta: on the exact curve (this calibration), or by
            # the first calibration's zCDP conversion, an upper bound of the exact one (releases
            # stored before issue 41 stay valid; their loss is still their rho)
            legacy = self.rho + 2 * math.sqrt(self.rho * math.log(1 / self.delta))
            if not (math.isclose(epsilon_of(self.rho, self.delta), self.epsilon, rel_tol=1e-9)
                    or math.isclose(legacy, self.epsilon, rel_tol=1e-9)):
                raise ValueError("epsilon is not what rho gives at delta")
        if not math.isclose(self.sensitivity,
                            math.sqrt(len(self.columns) + len(self.moments)
                                      + 2 * len(self.categories)),
                            rel_tol=1e-12):
            raise ValueError("the sensitivity does not match the release's content")
        for c in self.columns:
            if not c.low < c.high or not math.isclose(c.sd, self.sigma * (c.high - c.low),
                                                      rel_tol=1e-9, abs_tol=0.0):
                raise ValueError(f"column {c.key}: bounds or noise sd inconsistent")
        for block in self.categories:
            if not math.isclose(block.sd, self.sigma, rel_tol=1e-9, abs_tol=0.0):
                raise ValueError(f"category {block.key}: noise sd inconsistent")
        bounds = {c.key: (c.low, c.high) for c in self.columns}
        if len({m.key for m in self.moments}) != len(self.moments):
            raise ValueError("a release holds distinct moment keys")
        for m in self.moments:
            if (not m.of or len(set(m.of)) != len(m.of)
                    or any(bounds.get(k) != (m.low, m.high) for k in m.of)):
                raise ValueError(f"moment {m.key}: not of the release's columns at its bounds")
            if not math.isclose(m.sd, self.sigma * (m.high - m.low) ** 2, rel_tol=1e-9,
                                abs_tol=0.0):
                raise ValueError(f"moment {m.key}: noise sd inconsistent")
        return self

    @property
    def exact(self) -> bool:
        return self.mechanism == "exact"

    @property
    def loss(self) -> PrivacyLoss:
        """What this release costs a budget: its Gaussian rho, its Laplace ε, or nothing."""
        if self.mechanism == "gaussian" and self.rho is not None:
            return PrivacyLoss.gaussian(self.rho)
        if self.mechanism == "laplace" and self.epsilon is not None:
            return PrivacyLoss.of_laplace(self.epsilon)
        return PrivacyLoss()

    def column(self, key: str) -> ReleasedColumn:
        for c in self.columns:
            if c.key == key:
                return c
        raise KeyError(key)

    def moment(self, *of: str) -> ReleasedMoment | None:
        """The released second moment of the columns ``of`` (their per-case mean), None when
        the release holds none."""
        for m in self.moments:
            if m.of == of:
                return m
        return None

    def category(self, key: str) -> ReleasedCategories:
        for c in self.categories:
            if c.key == key:
                return c
        raise KeyError(key)

    def matches(self, spec: ReleaseSpec) -> bool:
        """Whether this release is of ``spec``'s content and privacy loss (what a reader checks
        before trusting it: a summary of another ε is refused)."""
        if (self.mechanism == "exact") != spec.exact:
            return False
        if not spec.exact and self.mechanism != spec.mechanism:
            return False
        if not spec.exact and not (
                self.epsilon is not None
                and math.isclose(self.epsilon, spec.epsilon, rel_tol=1e-9)
                and (spec.mechanism == "laplace" or (
                    self.delta is not None
                    and math.isclose(self.delta, spec.delta, rel_tol=1e-9)))):
            return False
        return ([(c.key, c.low, c.high) for c in self.columns]
                == [(c.key, c.low, c.high) for c in spec.columns]
                and [(c.key, c.keys) for c in self.categories]
                == [(c.key, c.keys) for c in spec.categories]
                and [(m.key, m.of) for m in self.moments]
                == [(m.key, m.of) for m in spec.moments])

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, doc: Any) -> Release:
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            raise ReleaseError(f"not a sealbench/dp-release version 1 document "
                               f"({exc.error_count()} errors)") from exc


# -- the mechanism --------------------------------------------------------------------------------


def _scaled(contributions: Any, spec: ReleaseSpec, grid_bits: int | None = None) -> Any:
    """Per-case rows scaled to [0, 1] per bounded column (clipped), one-hot blocks checked,
    each value rounded to a multiple of 2**-grid_bits when the noise source samples on a grid
    (its ``grid_bits``)."""
    import numpy as np  # the enclave's; readers of releases need no numpy

    rows = np.asarray(contributions, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != spec.width or rows.shape[0] < 1:
        raise ReleaseError(f"contributions must be (cases >= 1, {spec.width}); got "
                           f"{rows.shape}")
    out = np.empty_like(rows)
    for j, col in enumerate(spec.columns):
        values = rows[:, j]
        # a non-finite value is the worst end of the range (never dropped)
        values = np.where(np.isfinite(values), values, col.low)
        out[:, j] = (np.clip(values, col.low, col.high) - col.low) / (col.high - col.low)
    start = len(spec.columns)
    for block in spec.categories:
        part = rows[:, start:start + len(block.keys)]
        if not (np.isin(part, (0.0, 1.0)).all() and (part.sum(axis=1) == 1).all()):
            raise ReleaseError(f"category {block.key}: each case must fall in exactly one key")
        out[:, start:start + len(block.keys)] = part
        start += len(block.keys)
    if grid_bits is None:
        return out
    # each case's value on the noise source's grid (a function of that case alone, so the
    # sums' sensitivity is unchanged): sums are then exact multiples of 2**-grid_bits, what the
    # discrete Gaussian of sealbench.benchmarks.seeded_noise needs
    grid = float(2 ** grid_bits)
    return np.round(out * grid) / grid


def release(contributions: Any, spec: ReleaseSpec, noise: NoiseSource) -> Release:
    """The release of ``contributions`` (one row per case, :attr:`ReleaseSpec.width` values in
    the spec's order: bounded columns, then each category block's one-hot keys) under ``spec``,
    noise drawn once from ``noise`` for all sums, the moments' sums of squares included (none for
    an exact release)."""
    grid_bits = getattr(noise, "grid_bits", None)
    scaled = _scaled(contributions, spec, grid_bits if isinstance(grid_bits, int) else None)
    sums = scaled.sum(axis=0)
    index = {c.key: j for j, c in enumerate(spec.columns)}
    if spec.moments:
        import numpy as np

        squares = []
        for moment in spec.moments:
            means = scaled[:, [index[k] for k in moment.of]].mean(axis=1)
            square = means * means
            if isinstance(grid_bits, int):  # each case's square on the grid, as its values
                square = np.round(square * float(2 ** grid_bits)) / float(2 ** grid_bits)
            squares.append(float(square.sum()))
        sums = np.concatenate([sums, np.asarray(squares, dtype=np.float64)])
    if isinstance(noise, LocalExact):
        spec = replace(spec, exact=True)
    sigma = spec.sigma
    rho = spec.rho
    if spec.exact:
        noisy, library = [float(v) for v in sums], "none"
    else:
        if spec.mechanism == "laplace":
            noisy = noise.laplace(sums.tolist(), spec.scale, spec.l1_sensitivity, spec.epsilon)
        else:
            assert rho is not None
            noisy = noise.gaussian(sums.tolist(), sigma, spec.sensitivity, rho)
        library = noise.name
        if len(noisy) != len(sums):
            raise ReleaseError("the noise source returned the wrong number of values")
    columns = tuple(
        ReleasedColumn(key=c.key, low=c.low, high=c.high,
                       sum=c.low * scaled.shape[0] + (c.high - c.low) * noisy[j],
                       sd=sigma * (c.high - c.low))
        for j, c in enumerate(spec.columns))
    blocks = []
    start = len(spec.columns)
    for block in spec.categories:
        counts = tuple(noisy[start:start + len(block.keys)])
        blocks.append(ReleasedCategories(key=block.key, keys=block.keys, counts=counts, sd=sigma))
        start += len(block.keys)
    moments = []
    for m, moment in enumerate(spec.moments):
        low, high = spec.columns[index[moment.of[0]]].low, spec.columns[index[moment.of[0]]].high
        moments.append(ReleasedMoment(key=moment.key, of=moment.of, low=low, high=high,
                                      squares=(high - low) ** 2 * noisy[start + m],
                                      sd=sigma * (high - low) ** 2))
    return Release(
        version=2 if moments else 1, moments=tuple(moments),
        mechanism="exact" if spec.exact else spec.mechanism, library=library,
        n_cases=int(scaled.shape[0]),
        epsilon=None if spec.exact else spec.epsilon,
        delta=None if spec.exact or spec.mechanism == "laplace" else spec.delta,
        rho=rho, sensitivity=spec.sensitivity, sigma=sigma,
        columns=columns, categories=tuple(blocks))


# -- estimates from releases --------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A mean estimated from one or more releases: ``value`` (unbiased: the noise has mean 0),
    its 95% interval (clipped to the column's range), the noise's and the sampling's standard
    errors, and the case count. ``informative`` is False when the interval spans more than half
    of the range (the figure cannot bear a reading)."""

    value: float
    low: float
    high: float
    noise_se: float
    sampling_se: float
    n_cases: int
    bounds: tuple[float, float]

    @property
    def informative(self) -> bool:
        return 2 * Z95 * self.noise_se <= 0.5 * (self.bounds[1] - self.bounds[0])

    @property
    def shown(self) -> float:
        """The estimate clipped to the column's range, for display (pooling adds the unclipped
        sums, which keeps it unbiased)."""
        return _clip(self.value, *self.bounds)


def pooled_mean(columns: Sequence[ReleasedColumn], counts: Sequence[int],
                moments: Sequence[ReleasedMoment | None] | None = None) -> Estimate:
    """The case-weighted mean of one column over releases (sites) with case counts ``counts``:
    ``sum(sum_i) / sum(n_i)``, unbiased. Its variance is the release noise ``sum(sd_i²) / N²``
    plus the sampling variance ``sd² / N`` of the cases' spread ``sd²``. Interval: the estimate
    clipped to the range ± 1.96·√(variance), clipped to the range.

    **The spread.** Always at most the Bhatia-Davis bound ``(high - μ)(μ - low)`` at the least
    favourable ``μ`` within two noise standard errors of the estimate. Where every release
    carries the column's second moment (``moments``, one per column: :class:`ReleasedMoment`,
    the noisy sum of squares) it is read from the data instead: :func:`_spread_upper`, an upper
    95% confidence bound on ``sd`` that accounts for the noise on the sums of squares and for the
    sampling error of the spread itself at small ``N``, so the interval keeps its coverage where
    a plain plug-in ``s`` would not (a small sample, a noisy second moment); then the smaller of
    the two. Without moments (old releases, unmarked columns) the bound alone, as before."""
    if not columns or len(columns) != len(counts):
        raise ValueError("pooling needs one case count per released column (at least one)")
    bounds = {(c.low, c.high) for c in columns}
    if len(bounds) != 1:
        raise ValueError("the releases clip the column to different bounds")
    low, high = bounds.pop()
    n = int(sum(counts))
    value = sum(c.sum for c in columns) / n
    var_sum = math.fsum(c.sd ** 2 for c in columns)
    noise_se = math.sqrt(var_sum) / n
    mu_lo = min(max(value - 2 * noise_se, low), high)
    mu_hi = min(max(value + 2 * noise_se, low), high)
    mid = (low + high) / 2
    worst = mid if mu_lo <= mid <= mu_hi else (mu_lo if abs(mu_lo - mid) < abs(mu_hi - mid)
                                                else mu_hi)
    variance = max((high - worst) * (worst - low), 0.0)
    if moments is not None:
        if len(moments) != len(columns):
            raise ValueError("pooling needs one moment (or None) per released column")
        given = [m for m in moments if m is not None]
        if len(given) == len(columns) and n >= 2:
            if any((m.low, m.high) != (low, high) for m in given):
                raise ValueError("a moment's bounds are not its column's")
            # in offsets from low: y = x - low in [0, width]
            width = high - low
            sum_y = math.fsum(c.sum for c in columns) - n * low
            mean_y = _clip(sum_y / n, 0.0, width)
            # the centred sum of squares; E[sum_y_noisy²] = sum_y² + var_sum, hence + var_sum/n
            centred = math.fsum(m.squares for m in given) - sum_y * sum_y / n + var_sum / n
            centred_sd = math.sqrt(math.fsum(m.sd ** 2 for m in given)
                                   + (2 * mean_y) ** 2 * var_sum)
            spread = _spread_upper(centred, centred_sd, n, width)
            variance = min(variance, spread * spread)
    sampling_se = math.sqrt(variance / n)
    half = Z95 * math.sqrt(noise_se ** 2 + sampling_se ** 2)
    # Centred on the estimate clipped to the range: the mean lies in the range, so clipping
    # only moves the centre towards it (coverage never drops), and a noise draw past a bound
    # no longer collapses the interval onto that bound (a value-less figure shown as
    # "[1.00, 1.00]" would read as certainty).
    centre = _clip(value, low, high)
    return Estimate(value, _clip(centre - half, low, high), _clip(centre + half, low, high),
                    noise_se, sampling_se, n, (low, high))


#: z for a one-sided 95% bound.
_Z_ONE_SIDED: Final = 1.6448536269514722


def _spread_upper(centred: float, centred_sd: float, count: int, width: float) -> float:
    """An upper 95% confidence bound on the standard deviation ``sd`` of a value in a range of
    ``width``, from a noisy centred sum of squares ``centred`` over ``count`` cases (its noise's
    standard deviation ``centred_sd``).

    Two errors make the plug-in ``s² = centred / (count - 1)`` too small too often: the noise
    on the sums of squares (at small ``count`` it swamps them) and the sampling error of ``s²``
    itself (a skewed sample, a spike at 0 that a small sample misses). ``s²`` estimates
    ``sd² = E[(x - μ)²]``, the mean of a variable in ``[0, width²]`` with mean ``sd²``, whose
    variance is at most ``sd²·width²`` (Bhatia-Davis applied to the square); the noise adds
    ``c = centred_sd / (count - 1)`` of standard deviation, independent of it. So, to a normal
    approximation, ``sd² - s² <= 1.645·√(c² + width²·sd²/count)`` with 95% confidence: a
    quadratic in ``u = sd²`` whose larger root is the bound,
    ``u = s² + B/2 + √(B·s² + B²/4 + 1.645²·c²)`` with ``B = 1.645²·width²/count``. It does not
    vanish on a sample with no spread (twelve cases at 0 do not show that a model finds nothing:
    it is ``1.645·width/√count`` there, Wilson-like) and costs a few percent at thousands of
    cases. With the interval's own 5%, a miss needs the spread underestimated and the mean's
    draw far out; simulated coverage stays above 93%
    (``tests/unit/benchmarks/test_moment_coverage.py``)."""
    dof = max(count - 1, 1)
    s2 = max(centred / dof, 0.0)
    c = centred_sd / dof
    b = _Z_ONE_SIDED ** 2 * width ** 2 / count
    return math.sqrt(s2 + b / 2 + math.sqrt(b * s2 + b * b / 4 + (_Z_ONE_SIDED * c) ** 2))


def _clip(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def column_mean(rel: Release, key: str) -> Estimate:
    """The mean of column ``key`` in one release (:func:`pooled_mean` over one site, with the
    column's second moment where the release holds one)."""
    return pooled_mean([rel.column(key)], [rel.n_cases], [rel.moment(key)])


# -- means over the cases where a value is defined ------------------------------------------------
#
# Some official scorers leave a case out of a mean where its value is undefined (NaN: the BraTS
# 2025 parser skips a region with nothing in truth or prediction). A plug-in that averages that
# way declares, per such value, two bounded columns: the value where it is defined and 0 where
# not (:func:`defined_value` gives both contributions; its bounds must hold 0), and the
# indicator "defined" in [0, 1]. Each is one more unit of L2 sensitivity, as any column; the
# published mean is :func:`ratio_mean` of the two sums, the official mean when exact.


def defined_value(value: float, low: float, high: float) -> tuple[float, float]:
    """A case's contributions to a (value, defined) column pair: ``(value clipped to [low,
    high], 1)`` where ``value`` is defined (finite, or an infinity, which clips), ``(0, 0)``
    where it is NaN (left out of the mean, as the official scorer leaves it out)."""
    if not low <= 0.0 <= high:
        raise ValueError("a column whose undefined cases add 0 needs bounds around 0")
    if math.isnan(value):
        return 0.0, 0.0
    return min(max(value, low), high), 1.0


def _roots_within(a: float, b: float, c: float, low: float, high: float,
                  ) -> tuple[float, float] | None:
    """The set where ``a·x² + b·x + c <= 0`` within [low, high] when it is a non-empty interval
    and ``a > 0`` (bounded); None otherwise."""
    if a <= 0:
        return None
    disc = b * b - 4 * a * c
    if disc < 0:
        return None
    root = math.sqrt(disc)
    # the numerically stable pair of roots
    q = -0.5 * (b + math.copysign(root, b)) if b != 0 else 0.5 * root
    r1, r2 = (q / a, c / q) if q != 0 else (-root / (2 * a), root / (2 * a))
    lo, hi = max(min(r1, r2), low), min(max(r1, r2), high)
    return (lo, hi) if lo <= hi else None


def ratio_mean(values: Sequence[ReleasedColumn], defined: Sequence[ReleasedColumn],
               counts: Sequence[int],
               moments: Sequence[ReleasedMoment | None] | None = None) -> Estimate:
    """The mean of a value over the cases where it is defined, from releases (sites) with case
    counts ``counts``, each holding the value's column (0 for an undefined case) and its
    "defined" indicator column in [0, 1] (:func:`defined_value`): ``θ = S / D`` with ``S`` and
    ``D`` the sums pooled over the releases. Exact releases give the official mean exactly.

    **Interval** (Fieller's, as the WDBC AUROC's): every ``θ`` in the value's range whose
    pivot ``S - θ·D`` (mean 0 at the truth: the sums are unbiased, the noises independent)
    lies within 1.96 standard deviations of 0, its variance being the noise's
    ``var_S + θ²·var_D`` plus the sampling's ``m·(high - θ)(θ - low)`` (Bhatia-Davis bound on
    the variance of a defined case's value at mean ``θ``; ``m``, the defined cases, read from
    ``D`` clipped to [0, n]): a quadratic in ``θ``, so the set is an interval, Wilson's score
    interval without noise. Where the noise swamps ``D`` the set is unbounded and where no
    ``θ`` in the range qualifies it is empty: the interval is then the whole range and the
    estimate uninformative (``noise_se`` infinite), as it is when no case is defined.

    **With second moments** (``moments``: per release the noisy sum of squares of the value
    column, 0 for an undefined case): the defined cases' spread is also read from the data, an
    upper 95% bound ``sd⁺`` (:func:`_spread_upper`, from ``Σx² - S²/D`` over ``D - 1``) and the
    sampling term ``m·sd⁺²`` gives a second Fieller set; the interval is the two sets'
    intersection (the pivot's variance is at most the smaller of the two terms, so both sets
    hold the truth as often as their own level)."""
    if not values or len(values) != len(defined) or len(values) != len(counts):
        raise ValueError("a ratio needs one value column, one defined column and one case "
                         "count per release (at least one)")
    bounds = {(c.low, c.high) for c in values}
    if len(bounds) != 1:
        raise ValueError("the releases clip the value to different bounds")
    low, high = bounds.pop()
    if not low <= 0.0 <= high:
        raise ValueError("a value whose undefined cases add 0 needs bounds around 0")
    if any((c.low, c.high) != (0.0, 1.0) for c in defined):
        raise ValueError("a defined column is an indicator in [0, 1]")
    n = int(sum(counts))
    s = math.fsum(c.sum for c in values)
    d = math.fsum(c.sum for c in defined)
    var_s = math.fsum(c.sd ** 2 for c in values)
    var_d = math.fsum(c.sd ** 2 for c in defined)
    m = min(max(d, 0.0), float(n))
    z2 = Z95 * Z95
    # (S - θD)² - z²·(var_S + θ²·var_D + m·(high - θ)(θ - low)) <= 0
    a = d * d - z2 * var_d + z2 * m
    b = -2 * s * d - z2 * m * (high + low)
    c = s * s - z2 * var_s + z2 * m * high * low
    interval = _roots_within(a, b, c, low, high)
    if d <= 0 or interval is None:
        value = s / d if d > 0 else (low + high) / 2
        return Estimate(value, low, high, math.inf, math.inf, n, (low, high))
    value = s / d
    shown = _clip(value, low, high)
    noise_se = math.sqrt(var_s + shown * shown * var_d) / d
    spread2 = max((high - shown) * (shown - low), 0.0)
    if moments is not None:
        if len(moments) != len(values):
            raise ValueError("a ratio needs one moment (or None) per release")
        given = [x for x in moments if x is not None]
        if len(given) == len(values) and m >= 2:
            if any((x.low, x.high) != (low, high) for x in given):
                raise ValueError("a moment's bounds are not its value column's")
            # Σx² over every case (an undefined one is 0): Σ(x - low)² + 2·low·S - n·low²
            squares = math.fsum(x.squares for x in given) + 2 * low * s - n * low * low
            var_q = math.fsum(x.sd ** 2 for x in given)
            centred = squares - s * s / d + var_s / d
            centred_sd = math.sqrt(var_q + (2 * low - 2 * shown) ** 2 * var_s
                                   + shown ** 4 * var_d)
            spread = _spread_upper(centred, centred_sd, round(m), high - low)
            # (S - θD)² - z²·(var_S + θ²·var_D + m·sd⁺²) <= 0
            narrow = _roots_within(d * d - z2 * var_d, -2 * s * d,
                                   s * s - z2 * var_s - z2 * m * spread * spread, low, high)
            if narrow is not None and max(narrow[0], interval[0]) <= min(narrow[1],
                                                                         interval[1]):
                interval = (max(narrow[0], interval[0]), min(narrow[1], interval[1]))
                spread2 = min(spread2, spread * spread)
    sampling_se = math.sqrt(spread2 / max(m, 1.0))
    return Estimate(value, interval[0], interval[1], noise_se, sampling_se, n, (low, high))


def average_of(estimates: Sequence[Estimate]) -> Estimate:
    """The unweighted mean of estimates of one range over the same cases (a metric's mean
    over region groups, each a :func:`ratio_mean`): the mean of their shown values, with the
    noise variance ``sum(noise_se²) / k²`` (the columns' noises are independent) and the
    sampling standard error ``sum(s_i) / k`` (the cases are shared, so the groups' sampling
    errors may correlate: Cauchy-Schwarz bounds the sum's). Each ``s_i`` is read from its
    estimate's interval, the larger side over 1.96 less its noise, never below its own
    ``sampling_se``: near a bound the point's Bhatia-Davis term is 0 where Wilson's interval
    is not (a model that found nothing in 12 cases is not known to find nothing). Uninformative,
    over the whole range, when any of them is."""
    if not estimates:
        raise ValueError("an average needs at least one estimate")
    ranges = {e.bounds for e in estimates}
    if len(ranges) != 1:
        raise ValueError("the estimates are of different ranges")
    low, high = ranges.pop()
    k = len(estimates)
    n = max(e.n_cases for e in estimates)
    value = math.fsum(e.shown for e in estimates) / k
    if not all(math.isfinite(e.noise_se) and math.isfinite(e.sampling_se) for e in estimates):
        return Estimate(value, low, high, math.inf, math.inf, n, (low, high))
    noise_se = math.sqrt(math.fsum(e.noise_se ** 2 for e in estimates)) / k
    spreads = []
    for e in estimates:
        total = max(e.high - e.shown, e.shown - e.low) / Z95
        spreads.append(max(math.sqrt(max(total ** 2 - e.noise_se ** 2, 0.0)), e.sampling_se))
    sampling_se = math.fsum(spreads) / k
    half = Z95 * math.sqrt(noise_se ** 2 + sampling_se ** 2)
    return Estimate(value, _clip(value - half, low, high), _clip(value + half, low, high),
                    noise_se, sampling_se, n, (low, high))
