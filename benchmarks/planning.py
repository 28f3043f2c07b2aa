"""What a private board can read, said before anyone runs and wherever a figure is withheld
(issue 41, parts 7 and 8): the one place that turns a plug-in's release spec (its noise sigma per
scaled sum, at its ε) and a case count into words and numbers. The CLI's table, CSV and
``benchmark plan``, the registry's leaderboard JSON and the dashboard all read it.

**How noise reaches a figure.** A release adds noise of standard deviation ``sigma`` to each sum of
values scaled to [0, 1] (:class:`~sealbench.benchmarks.release.ReleaseSpec`, ``sigma``). A
figure that is the mean of one released column over ``N`` cases from ``k`` releases (sites, or 1
for a release pooled in the TEE) carries noise of standard error ``sigma·f·√k / N`` in units of the
column's range, ``f`` being the figure's *noise factor*: 1 for a released column, ``1/√m`` for the
per-case mean of ``m`` released columns (a metric averaged over regions), times √2 where the mean
is over the cases a value is defined on (:func:`~sealbench.benchmarks.release.ratio_mean`: the
count column's noise adds at most as much as the value's). :func:`noise_factor` reads it from the
spec's column keys (``metric:group`` and ``defined:group``); a plug-in whose figure is no mean of
columns (an AUROC) states its own with :class:`PlansFigures`.

**When a figure shows.** :attr:`sealbench.benchmarks.release.Estimate.informative`: the noise
alone spans at most half of the range, ``2·1.96·se <= 0.5``, so a figure shows from
``N >= 4·1.96·sigma·f·√k`` cases (:meth:`FigureNoise.shows_from`).

**The plan.** The expected 95% half-width of a pooled figure adds the sampling term
``s/√N`` (``s`` the typical spread of one case's value, in range units: the plug-in's
``headline_spread`` where it states one, else :data:`DEFAULT_SPREAD`, the largest a value in
its range can have, which is what an estimate without a second moment assumes) to the noise:
``1.96·√(se² + s²/N)``. The board ranks two models apart when their 95% intervals do not overlap
(:data:`sealbench.server.services.leaderboard.RANK_RULE`), so it ranks a true difference ``d``
at 80% power when ``d >= (2·1.96 + √2·0.84)·√(se² + s²/N)`` (the difference of two independent
estimates exceeds both half-widths four times in five).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol, runtime_checkable

from .release import Z95, ReleaseSpec

__all__ = [
    "DEFAULT_SPREAD",
    "Z80",
    "FigureNoise",
    "Plan",
    "PlansFigures",
    "StatesFigureNoise",
    "figure_noise",
    "noise_factor",
    "plan",
    "plural",
    "reason_for",
    "release_epsilon",
    "withheld_reason",
]

#: z of a one-sided 80% power.
Z80: Final = 0.8416212335729143
#: The typical spread of one case's value (its standard deviation as a fraction of the range)
#: unless the plug-in states one: 0.5, the largest any value in a bounded range can have
#: (half its cases at each end), what an estimate without a second moment must assume.
DEFAULT_SPREAD: Final = 0.5


@runtime_checkable
class PlansFigures(Protocol):
    """What a plug-in may state for planning beside its release spec (optional)."""

    @property
    def headline_spread(self) -> float:
        """The typical standard deviation of one case's headline value, as a fraction of the
        headline's range (e.g. 0.2 for a Dice whose per-case values spread ±0.2)."""
        ...


@runtime_checkable
class StatesFigureNoise(Protocol):
    """A plug-in whose figure is no mean of released columns (an AUROC released with its own
    sensitivity) states the noise on it itself (optional)."""

    def figure_noise_se(self, metric: str, n_cases: int, *, epsilon: float,
                        tee_pooled: bool) -> float | None:
        """The release noise's standard error on ``metric`` (in units of its range) from one
        release at ``epsilon`` over ``n_cases`` (pooled in the TEE or one site's); None to
        leave it to the column keys (:func:`noise_factor`)."""
        ...


def release_epsilon(spec: ReleaseSpec | None) -> float | None:
    """The ε one release made under ``spec`` costs (None: exact, or no spec): its own, plus
    that of a part released by another mechanism (a pooled release's ``headline``, e.g. an
    AUROC under Laplace noise), as ε adds up over the parts of one release."""
    if spec is None or spec.exact:
        return None
    parts = [spec, *(p for p in (getattr(spec, "headline", None),) if p is not None)]
    return float(sum(p.epsilon for p in parts))


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 site``, ``2 sites``, ``1 case``, ``0 cases``."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def noise_factor(spec: ReleaseSpec, metric: str, plugin: object | None = None) -> float | None:
    """The factor ``f`` by which one release's noise ``sigma`` (per scaled sum) reaches the mean
    figure ``metric`` (``metric`` or ``metric:group``): the plug-in's own where it states one,
    else read from the spec's column keys; None when the figure is no mean of its columns."""
    del plugin  # a plug-in states a figure's noise whole (StatesFigureNoise), not a factor
    keys = {c.key for c in spec.columns}
    base = metric.split(":", 1)[0]
    ratio = math.sqrt(2.0) if any(k.startswith("defined:") for k in keys) else 1.0
    if metric in keys:
        return ratio if ":" in metric and f"defined:{metric.split(':', 1)[1]}" in keys else 1.0
    parts = [k for k in keys if k.split(":", 1)[0] == base and ":" in k]
    if ":" not in metric and parts:
        return ratio / math.sqrt(len(parts))
    return None


@dataclass(frozen=True)
class FigureNoise:
    """The release noise on one pooled figure: ``sigma`` per scaled sum of each of ``releases``
    releases at ``epsilon`` (None: exact), reaching the figure by ``factor``, over ``n_cases``."""

    epsilon: float | None
    sigma: float
    factor: float
    releases: int
    n_cases: int
    tee_pooled: bool = False
    #: The plug-in's own standard error at a case count (:class:`StatesFigureNoise`), which
    #: replaces ``sigma * factor * sqrt(releases) / n``.
    stated: Callable[[int], float | None] | None = None

    def se_at(self, n_cases: int) -> float:
        """The noise's standard error over ``n_cases`` (same releases), in range units."""
        if self.stated is not None:
            se = self.stated(max(n_cases, 1))
            return math.inf if se is None else se
        return self.sigma * self.factor * math.sqrt(self.releases) / max(n_cases, 1)

    @property
    def se(self) -> float:
        return self.se_at(self.n_cases)

    @property
    def spread(self) -> float:
        """± the noise alone spreads the figure (95%), in range units."""
        return Z95 * self.se

    def shows_from(self) -> int:
        """The case count over the same releases from which the noise leaves the figure
        readable (:attr:`~sealbench.benchmarks.release.Estimate.informative`)."""
        if self.stated is not None:
            low, high = 1, 2
            while 4 * Z95 * self.se_at(high) > 1 and high < 1 << 40:
                low, high = high, high * 2
            while low < high:  # the smallest n whose noise spans at most half the range
                mid = (low + high) // 2
                low, high = (mid + 1, high) if 4 * Z95 * self.se_at(mid) > 1 else (low, mid)
            return low
        if self.sigma == 0:
            return 1
        return math.ceil(4 * Z95 * self.sigma * self.factor * math.sqrt(self.releases) - 1e-9)


def figure_noise(spec: ReleaseSpec, metric: str, n_cases: int, *, releases: int = 1,
                 tee_pooled: bool = False, plugin: object | None = None) -> FigureNoise | None:
    """The noise on ``metric`` pooled over ``n_cases`` from ``releases`` releases made under
    ``spec`` (for a release pooled in the TEE: the plug-in's pooled spec, ``releases`` 1);
    None when the figure's noise is unknown."""
    epsilon = release_epsilon(spec)
    if isinstance(plugin, StatesFigureNoise) and epsilon is not None and releases <= 1:
        def stated(n: int) -> float | None:
            assert epsilon is not None
            return plugin.figure_noise_se(metric, n, epsilon=epsilon, tee_pooled=tee_pooled)

        if stated(n_cases) is not None:
            return FigureNoise(epsilon, spec.sigma, 1.0, 1, n_cases, tee_pooled, stated)
    factor = noise_factor(spec, metric, plugin)
    if factor is None:
        return None
    return FigureNoise(epsilon, spec.sigma, factor,
                       max(releases, 1), n_cases, tee_pooled)


def withheld_reason(noise: FigureNoise | None, *, range_width: float = 1.0,
                    epsilon: float | None = None, n_cases: int | None = None) -> str:
    """Why a figure is withheld and what would show it, in plain words: "privacy noise at ε 1
    over 10 cases spreads ±0.91; this figure shows from about 40 cases pooled". Without a
    known noise factor it says what it can from ``epsilon`` and ``n_cases``."""
    if noise is None:
        if epsilon is None:
            return "not defined on these cases (e.g. a class with no case)"
        over = "" if n_cases is None else f" over {plural(n_cases, 'case')}"
        return (f"privacy noise at ε {epsilon:g}{over} is wider than half the range; more "
                "cases pooled would show it")
    if noise.epsilon is None or noise.sigma == 0:
        return "not defined on these cases (e.g. a class with no case)"
    where = ("pooled in the TEE" if noise.tee_pooled or noise.releases == 1
             else f"over these {noise.releases} sites")
    return (f"privacy noise at ε {noise.epsilon:g} over {plural(noise.n_cases, 'case')} "
            f"spreads ±{noise.spread * range_width:.2g}; this figure shows from about "
            f"{noise.shows_from():,} cases {where}")


@dataclass(frozen=True)
class Plan:
    """What a board of ``sites`` sites of ``cases`` cases each would read at ``epsilon``, for
    the headline ``metric``: pooled in the TEE (one release) and, where sites publish their own
    releases, each site's and their pool's. Half-widths and differences in the metric's unit."""

    metric: str
    label: str
    sites: int
    cases: int
    epsilon: float | None
    delta: float | None
    spread: float
    spread_stated: bool
    range_width: float
    pooled_half_width: float | None
    pooled_shows_from: int | None
    pooled_rank_difference: float | None
    pooled_in_tee: bool
    site_half_width: float | None
    site_shows_from: int | None
    sites_pooled_half_width: float | None
    sites_rank_difference: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The plan in plain words (CLI, dashboard, consent text)."""
        eps = "exact (no noise)" if self.epsilon is None else f"ε {self.epsilon:g}"
        total = self.sites * self.cases
        head = (f"{self.label} over {plural(self.sites, 'site')} x "
                f"{plural(self.cases, 'case')} ({total:,} cases), {eps} per release:")
        out = [head]
        if self.pooled_half_width is None:
            out.append("  the plug-in does not state how release noise reaches this figure")
            return out
        where = "pooled in the TEE" if self.pooled_in_tee else "pooled over the sites"
        out.append(f"  {where}: expected 95% interval ±{self.pooled_half_width:.3g}; "
                   f"readable from about {plural(self.pooled_shows_from or 1, 'case')} "
                   "pooled; ranks "
                   f"two models apart (80% power) from a difference of "
                   f"{self.pooled_rank_difference:.3g}")
        if self.site_half_width is not None:
            out.append(f"  each site's own release: ±{self.site_half_width:.3g} at "
                       f"{plural(self.cases, 'case')}; readable from about "
                       f"{plural(self.site_shows_from or 1, 'case')}")
        if self.sites_pooled_half_width is not None and self.pooled_in_tee:
            out.append(f"  (the sites' releases pooled outside the TEE instead: "
                       f"±{self.sites_pooled_half_width:.3g}, rank difference "
                       f"{self.sites_rank_difference:.3g})")
        spread = ("the plug-in's stated typical spread" if self.spread_stated
                  else "the widest a value can have: the plug-in states none")
        out.append(f"  assumes a per-case spread of ±{self.spread * self.range_width:.3g} "
                   f"({spread})")
        return out


def _half(noise_se: float, spread: float, n: int) -> float:
    return Z95 * math.sqrt(noise_se ** 2 + spread ** 2 / max(n, 1))


def _rank_difference(noise_se: float, spread: float, n: int) -> float:
    return (2 * Z95 + math.sqrt(2) * Z80) * math.sqrt(noise_se ** 2 + spread ** 2 / max(n, 1))


def _at_epsilon(spec: ReleaseSpec, epsilon: float) -> ReleaseSpec:
    """``spec`` costing ``epsilon`` per release in all: a release split between a breakdown
    and a headline of its own (WDBC's pooled AUROC) keeps its split, each part scaled."""
    from dataclasses import replace

    headline = getattr(spec, "headline", None)
    if spec.exact or headline is None:
        return replace(spec, epsilon=epsilon, exact=False)
    total = release_epsilon(spec) or 1.0
    factor = epsilon / total
    split: Any = spec  # a pooled spec carrying its headline (e.g. WDBC's PooledReleaseSpec)
    rescaled: ReleaseSpec = replace(split, epsilon=spec.epsilon * factor, exact=False,
                                    headline=replace(headline, epsilon=headline.epsilon * factor))
    return rescaled


def plan(plugin: Any, *, sites: int, cases: int, epsilon: float | None = None,
         metric: str | None = None, in_tee: bool | None = None) -> Plan:
    """The plan of ``plugin``'s headline (or ``metric``) over ``sites`` x ``cases``, at its
    declared ε unless ``epsilon`` replaces it (the same δ). Pooled in the TEE when ``in_tee``
    (None: when the plug-in declares a pooled release of its own), with each site's release
    beside it."""

    if sites < 1 or cases < 1:
        raise ValueError("a plan needs at least one site and one case per site")
    shown = plugin.presentation
    ref = shown.headline
    key = metric or (ref.metric if ref.group is None else f"{ref.metric}:{ref.group}")
    label = shown.label(ref) if metric is None else metric
    spec: ReleaseSpec = plugin.release_spec
    from .pooling import pooled_release_spec

    if in_tee is None:
        in_tee = hasattr(plugin, "pooled_release_spec")
    pooled_spec = pooled_release_spec(plugin) if in_tee else None
    if epsilon is not None:
        spec = _at_epsilon(spec, epsilon)
        if pooled_spec is not None:
            pooled_spec = _at_epsilon(pooled_spec, epsilon)
    stated = isinstance(plugin, PlansFigures)
    spread = float(plugin.headline_spread) if stated else DEFAULT_SPREAD
    bounds = [(c.low, c.high) for c in spec.columns if c.key.split(":", 1)[0] == key.split(
        ":", 1)[0]]
    width = (bounds[0][1] - bounds[0][0]) if bounds else 1.0
    total = sites * cases
    site = figure_noise(spec, key, cases, plugin=plugin)
    pooled_sites = figure_noise(spec, key, total, releases=sites, plugin=plugin)
    tee = (figure_noise(pooled_spec, key, total, tee_pooled=True, plugin=plugin)
           if pooled_spec is not None else None)
    head = tee if tee is not None else pooled_sites

    def scaled(value: float | None) -> float | None:
        return None if value is None else value * width

    return Plan(
        metric=key, label=label, sites=sites, cases=cases,
        epsilon=None if spec.exact else spec.epsilon, delta=None if spec.exact else spec.delta,
        spread=spread, spread_stated=stated, range_width=width,
        pooled_half_width=scaled(None if head is None else _half(head.se, spread, total)),
        pooled_shows_from=None if head is None else head.shows_from(),
        pooled_rank_difference=scaled(
            None if head is None else _rank_difference(head.se, spread, total)),
        pooled_in_tee=tee is not None,
        site_half_width=scaled(None if site is None else _half(site.se, spread, cases)),
        site_shows_from=None if site is None else site.shows_from(),
        sites_pooled_half_width=scaled(
            None if pooled_sites is None else _half(pooled_sites.se, spread, total)),
        sites_rank_difference=scaled(
            None if pooled_sites is None else _rank_difference(pooled_sites.se, spread, total)),
    )


def reason_for(plugin: Any, metric: str, *, n_cases: int, n_sites: int, tee_pooled: bool,
               epsilons: Sequence[float | None] = ()) -> str:
    """:func:`withheld_reason` of a board's withheld figure: ``metric`` pooled over
    ``n_cases`` from ``n_sites`` sites' releases, or from one TEE-pooled release."""
    from .pooling import pooled_release_spec

    spec: ReleaseSpec | None = (pooled_release_spec(plugin) if tee_pooled
                                else getattr(plugin, "release_spec", None))
    known = [e for e in epsilons if e is not None]
    epsilon = max(known, default=None)
    if spec is None:
        return withheld_reason(None, epsilon=epsilon, n_cases=n_cases)
    noise = figure_noise(spec, metric, n_cases, releases=1 if tee_pooled else n_sites,
                         tee_pooled=tee_pooled, plugin=plugin)
    if noise is None and spec.exact:
        return withheld_reason(None, n_cases=n_cases)
    return withheld_reason(noise, epsilon=epsilon if epsilon is not None else (
        None if spec.exact else spec.epsilon), n_cases=n_cases)
