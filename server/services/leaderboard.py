"""The pooled leaderboard (issue 15): every model's figures pooled over the sites it was
evaluated on, from the public summaries' sufficient statistics (never a case), with 95%
intervals, between-site spread and rank groups that do not order models by noise.

**TEE-pooled figures** (issue 27): a model with a verified pooled release
(:mod:`.pooling`: the benchmark's attested aggregator pooled the sites' exact statistics and
drew the noise once) shows its latest release's figures instead of the pool of its sites'
releases, marked ``tee_pooled`` with the release's id, time, site count and aggregates; it
ranks by them, and it stands on the board even when every one of its sites was too small to
publish alone (withheld). Models without one keep the pool of their sites' releases.

**What a figure covers** (issue 41): each standing names the sites its figure covers
(``covers``: dataset id and name, and the result pooled; a TEE-pooled figure's are its
release's inputs, a pool of releases' the sites pooled) and, in a benchmark that pools in the
TEE, the accepted results that wait for the next pool (``waiting``: each current site's latest
accepted result that can be pooled, the dataset approved now, and that the figure does not
cover: a new site, or a site's newer result), shown to those who see the model's pooled
releases. A new pool covers every site of the current one (:func:`~.pool_authorizations.
shrinks`), so adding a site never shrinks the figure. Who sees a
pooled release follows the board's rule below (the authority, the model's owner, or everyone
when the board is published); a board filtered to some sites shows no TEE-pooled figure (the
release covers its own sites, not the subset).

The benchmark plug-in (found by the benchmark's ``metrics_version``, never imported by name)
computes every figure: :meth:`~sealbench.benchmarks.interface.Benchmark.pool` over one model's
sites gives the pooled figure, :meth:`~sealbench.benchmarks.interface.Benchmark.figures` of one
site's summary the value that site published, with its interval (the forest plot's rows).

Rules, stated on the page and in the API answer:

* **Who sees what**: the benchmark's authority sees every result; a hospital the results on its
  own datasets; a model owner its own model's results on every site (pooled and per site).
  Nobody else sees a model's per-site values, and the pooled figures are computed only from the
  results the caller may read, **unless the benchmark publishes its leaderboard**
  (``Benchmark.leaderboard_published``, set at creation or by the authority later): then every
  signed-in user sees every model's pooled and per-site values.
* **Small cells**: a summary describing fewer cases than the plug-in's ``small_cell_minimum``
  is withheld (counted in ``withheld``, never pooled or shown); so is a result whose enclave
  already withheld its summary (``withheld`` in the run summary: no aggregates were published).
* **Releases**: a summary is a differentially private release (:mod:`sealbench.benchmarks.
  release`). A site's value is the figure that site published (the plug-in's
  :meth:`~sealbench.benchmarks.interface.Benchmark.figures` of its own release); a pooled value
  is the plug-in's :meth:`~sealbench.benchmarks.interface.Benchmark.pool` of the sites'
  releases. Intervals add the release noise to the sampling error.
* **Uninformative figures**: a figure whose value is None while its interval is set is one the
  release noise dominates (the plug-in's rule, e.g. noise alone spanning more than half of the
  range). It carries only its interval: it is never shown as a number, never enters the site
  range or I², and never ranks.
* **Rank groups**: the best remaining model leads a group; every remaining model whose 95%
  interval overlaps the leader's joins it (the same rank, ``tied``); repeat. Models without a
  value (none, or not informative) are not ranked and come last.
* **Heterogeneity**: I² = max(0, (Q - (k - 1)) / Q) with Cochran's Q over the sites' informative
  estimates, each weighted by 1/se² where se is read from the site's 95% interval
  (half-width / 1.96).

**Stored statistics** (:mod:`.result_statistics`): when a result is accepted, the plug-in's
figures of it and the pool of its model over its latest result on every site are stored beside
it, so the board reads numbers, not summaries: a cold board (the first request after a start)
calls neither ``parse_summary`` nor ``figures`` nor ``pool`` for stored results whose pool covers
exactly the results it pools. A subset (a hospital's own sites, a site filter) is pooled from
the summaries of just that subset; a result without stored statistics is read from its summary
once per process.

Measured with ``tests/perf/leaderboard_bench.py --sizes 41x32 --cold 5`` (41 models x 32 sites,
SQLite, each cold figure the first request of a fresh server process; CPU ms the server process
spent, medians; a shared 2-core machine under load, so wall times were noisier): the pooled API
cold took 580 CPU ms reading every summary (the path of results without statistics, as every
result was before) and 170 ms from stored statistics, 148 ms when the server has imported the
benchmark plug-ins before its first request (the BraTS plug-in imports scipy and nibabel);
warm, 26 to 28 ms either way. What remains of a cold request is mostly once per process
(SQLAlchemy compiling each statement and configuring the mappers, decoding 1,312 statistics
rows): in process, with the plug-in loaded, the board itself takes 70 to 95 ms on its first
call and 21 ms after. The rest of the first request was FastAPI's (0.165): it builds each
included router's routes (their parameter models) when a request first walks past them, about
170 CPU ms. The server now does all of it at start (``server/app.py``: the registered
benchmarks' plug-ins, the most recent boards, one in-process request no route takes), and the
pooled API serialises with pydantic's JSON encoder rather than FastAPI's generic one. Measured
after that, same command: the pooled API's first request after a start took 31 CPU ms (33 ms
wall) and the next ones 22 ms; without stored statistics, 32 and 22 (the boards built at start
filled the in-process cache); the pooled page 130 ms cold, 199 ms warm (its charts).

Statistics and pooled figures are also cached in process by database and result id (a stored
result is never changed or deleted, so an entry can never describe other content); losing the
cache costs only time. The board's queries read only the columns stored before a result's
summary and token, and the statistics table, so SQLite never walks their overflow pages.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.pooling import parse_pooled_summary
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.platforms.platform import attests_hardware
from sealbench.server.auth import Principal
from sealbench.server.errors import InvalidRequestError, InvalidStateError
from sealbench.server.models import Benchmark, Dataset, Model, Result, ResultStatistics
from sealbench.server.services._common import get_or_404
from sealbench.server.services.associations import is_approved
from sealbench.server.services.pooling import inputs_of, visible_releases
from sealbench.server.services.result_statistics import (
    Statistics,
    decode,
    metric_key,
    poolable,
    pooled_figures,
    read,
)
from sealbench.server.services.results import withdrawn_sides

__all__ = [
    "INTERVAL_RULE",
    "RANK_RULE",
    "Board",
    "CoveredSite",
    "MetricInfo",
    "PooledValue",
    "SiteInfo",
    "SiteValue",
    "Standing",
    "SummaryCache",
    "TeePooled",
    "WaitingResult",
    "Withheld",
    "build",
    "metric_key",
    "pooled_board",
]

Z95: Final = 1.959963984540054
RANK_RULE: Final = ("models whose 95% intervals overlap the leader's share its rank (a rank "
                    "group); the next group starts at the best model outside it")
INTERVAL_RULE: Final = ("95% intervals as the benchmark plug-in computes them from the sites' "
                        "differentially private releases, adding the release noise to the "
                        "sampling error; a figure the noise dominates is not informative: it "
                        "shows only its interval and is never ranked")


@dataclass(frozen=True)
class MetricInfo:
    key: str
    label: str
    unit: str
    direction: str
    group: str | None


@dataclass(frozen=True)
class SiteInfo:
    dataset_id: int
    name: str


@dataclass(frozen=True)
class SiteValue:
    dataset_id: int
    result_id: int
    value: float | None
    ci95_low: float | None
    ci95_high: float | None
    n_cases: int
    mock_tee: bool
    withdrawn: tuple[str, ...] = ()
    #: The privacy loss of the release the value comes from (None: an exact release, or a
    #: summary of a plug-in without releases).
    epsilon: float | None = None
    delta: float | None = None
    #: The largest error the plug-in's method of computing the value can make beside noise
    #: and sampling (an AUROC from score bins); None where the method is exact.
    bias: float | None = None
    #: Why ``value`` is withheld and what would show it (None: it is shown), in plain words
    #: (:func:`sealbench.benchmarks.planning.reason_for`).
    withheld_reason: str | None = None


@dataclass(frozen=True)
class PooledValue:
    metric: str
    pooled: float | None
    ci95_low: float | None
    ci95_high: float | None
    n_sites: int
    n_cases: int
    site_min: float | None
    site_max: float | None
    i2: float | None
    sites: tuple[SiteValue, ...]
    #: The pooled value's method error (see :attr:`SiteValue.bias`).
    bias: float | None = None
    #: The value is a TEE-pooled release's (:class:`TeePooled`), not a pool of site releases.
    tee_pooled: bool = False
    pooled_release_id: int | None = None
    pooled_at: datetime | None = None
    #: The privacy loss of the release(s) the value comes from (the TEE-pooled release's, or
    #: the largest of the sites'); None for exact releases.
    epsilon: float | None = None
    #: Why ``pooled`` is withheld and what would show it (None: it is shown).
    withheld_reason: str | None = None


@dataclass(frozen=True)
class CoveredSite:
    """A site a figure covers: its dataset and the result of it that was pooled."""

    dataset_id: int
    name: str
    result_id: int


@dataclass(frozen=True)
class WaitingResult:
    """An accepted result that waits for the model's next pool (:func:`build`): ``new_site``
    when the figure covers no result of its dataset, else a newer result than the one pooled."""

    dataset_id: int
    name: str
    result_id: int
    new_site: bool


@dataclass(frozen=True)
class TeePooled:
    """A model's latest verified TEE-pooled release, as the board shows it."""

    pooled_release_id: int
    pooled_at: datetime
    model_name: str
    model_version: str
    n_sites: int
    n_cases: int
    mock_tee: bool
    aggregates: Mapping[str, Any]
    figures: Mapping[str, api.Figure]
    tee_pooled: bool = True
    #: The release's inputs (the sites it pooled).
    covers: tuple[CoveredSite, ...] = ()


@dataclass(frozen=True)
class Standing:
    model_id: int
    model_name: str
    model_version: str
    rank: int | None
    tied: bool
    mock_tee: bool
    values: tuple[PooledValue, ...]
    tee_pooled: TeePooled | None = None
    #: The sites the figure covers (the TEE-pooled release's, else the sites pooled).
    covers: tuple[CoveredSite, ...] = ()
    #: The accepted results that wait for the next pool (a benchmark that pools in the TEE).
    waiting: tuple[WaitingResult, ...] = ()

    @property
    def n_waiting(self) -> int:
        return len(self.waiting)


@dataclass(frozen=True)
class Withheld:
    model_id: int
    dataset_id: int
    reason: str


@dataclass(frozen=True)
class Board:
    benchmark_id: int
    plugin: str
    metric: str
    headline: str
    direction: str
    metrics: tuple[MetricInfo, ...]
    sites: tuple[SiteInfo, ...]
    standings: tuple[Standing, ...]
    withheld: tuple[Withheld, ...]
    scope: str
    #: The breakdown's metrics: the ranked metric in each group (region, class), or every
    #: ranked metric for a benchmark without groups; values present when asked for.
    breakdown: tuple[str, ...] = ()
    rank_rule: str = RANK_RULE
    interval_rule: str = INTERVAL_RULE


# -- the cache ---------------------------------------------------------------------------------


#: Parsed summaries of the results to pool, by result id (what pooling a subset reads).
SummaryLoader = Callable[[Sequence[int]], Mapping[int, api.PublicSummary]]


class SummaryCache:
    """Each result's statistics by (plug-in, database, result id), and pooled figures by the
    set of results pooled; least recently used out."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._max = max_entries
        self._items: OrderedDict[tuple[str, str, int], Statistics] = OrderedDict()
        self._pooled: OrderedDict[tuple[Any, ...], Mapping[str, api.Figure]] = OrderedDict()
        self._lock = threading.Lock()

    def pooled(self, plugin: api.Benchmark, rows: Sequence[_Row], load: SummaryLoader
               ) -> Mapping[str, api.Figure]:
        """The plug-in's pooled figures of ``rows``: the pool stored with one of them when it
        covers exactly these results, else computed once per set of results from their
        summaries (``load``)."""
        ids = frozenset(r.result_id for r in rows)
        for row in rows:
            stored = row.stats.pool
            if stored is not None and stored.results == ids:
                return stored.figures
        key = (str(plugin.ref), rows[0].source if rows else "", *sorted(ids))
        with self._lock:
            found = self._pooled.get(key)
            if found is not None:
                self._pooled.move_to_end(key)
                return found
        summaries = load(sorted(ids))
        figures = pooled_figures(plugin, [summaries[i] for i in sorted(ids) if i in summaries])
        with self._lock:
            self._pooled[key] = figures
            while len(self._pooled) > max(1, self._max // 10):
                self._pooled.popitem(last=False)
        return figures

    def get(self, key: tuple[str, str, int]) -> Statistics | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[str, str, int], item: Statistics) -> None:
        with self._lock:
            self._items[key] = item
            while len(self._items) > self._max:
                self._items.popitem(last=False)


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    result_id: int
    model_id: int
    model_name: str
    model_version: str
    dataset_id: int
    dataset_name: str
    mock_tee: bool
    stats: Statistics
    source: str = ""


def _visible(session: Session, actor: Principal, bench: Benchmark) -> Any:
    if bench.owner_id == actor.user_id or bench.leaderboard_published:
        return Result.benchmark_id == bench.id
    return or_(
        Result.dataset_id.in_(select(Dataset.id).where(Dataset.owner_id == actor.user_id)),
        Result.model_id.in_(select(Model.id).where(Model.owner_id == actor.user_id)),
    )


_CHUNK: Final = 500
#: The stored statistics' columns, read as plain rows (no ORM instances to build).
_STATISTICS: Final = tuple(ResultStatistics.__table__.columns)


def _summaries(session: Session, plugin: api.Benchmark, ids: Sequence[int]
               ) -> dict[int, api.PublicSummary]:
    """The parsed summaries of results ``ids`` (readable ones: the board pools no other)."""
    out = {}
    for start in range(0, len(ids), _CHUNK):
        for rid, issuer, doc in session.execute(
                select(Result.id, Result.token_issuer, Result.summary)
                .where(Result.id.in_(ids[start:start + _CHUNK]))):
            summary = read(plugin, doc, issuer)[1]
            if summary is not None:
                out[rid] = summary
    return out


def _rows(session: Session, actor: Principal, bench: Benchmark, plugin: api.Benchmark,
          cache: SummaryCache, sites: frozenset[int] | None) -> list[_Row]:
    latest = (
        select(func.max(Result.id).label("id"))
        .where(Result.benchmark_id == bench.id, _visible(session, actor, bench))
        .group_by(Result.model_id, Result.dataset_id)
    )
    if sites is not None:
        latest = latest.where(Result.dataset_id.in_(sorted(sites)))
    sub = latest.subquery()
    heads = session.execute(
        select(Result.id, Model.id, Model.name, Model.version, Dataset.id, Dataset.name)
        .join(sub, sub.c.id == Result.id)
        .join(Model, Model.id == Result.model_id)
        .join(Dataset, Dataset.id == Result.dataset_id)
        .order_by(Model.id, Dataset.id)
    ).all()
    namespace, source = str(plugin.ref), str(session.get_bind().engine.url)
    found = {h[0]: cache.get((namespace, source, h[0])) for h in heads}
    missing = [rid for rid, stats in found.items() if stats is None]
    for start in range(0, len(missing), _CHUNK):
        for row in session.execute(select(*_STATISTICS).where(
                ResultStatistics.result_id.in_(missing[start:start + _CHUNK]))):
            stored = decode(plugin, row)
            if stored is not None:
                found[row.result_id] = stored
                cache.put((namespace, source, row.result_id), stored)
    # results stored without statistics (or by another pin): read from the summary, once
    unread = [rid for rid, stats in found.items() if stats is None]
    for start in range(0, len(unread), _CHUNK):
        for rid, issuer, doc in session.execute(
                select(Result.id, Result.token_issuer, Result.summary)
                .where(Result.id.in_(unread[start:start + _CHUNK]))):
            found[rid] = computed = read(plugin, doc, issuer)[0]
            cache.put((namespace, source, rid), computed)
    out = []
    for rid, mid, mname, mversion, did, dname in heads:
        stats = found[rid] or Statistics(0, {}, "summary not found")
        out.append(_Row(rid, mid, mname, mversion, did, dname, stats.mock_tee, stats, source))
    return out


# -- pure arrangement --------------------------------------------------------------------------


def _i2(sites: Sequence[SiteValue]) -> float | None:
    points = []
    for s in sites:
        if s.value is None or s.ci95_low is None or s.ci95_high is None:
            continue
        se = (s.ci95_high - s.ci95_low) / (2 * Z95)
        if se > 0:
            points.append((s.value, 1 / (se * se)))
    if len(points) < 2:
        return None
    total = sum(w for _, w in points)
    mean = sum(v * w for v, w in points) / total
    q = sum(w * (v - mean) ** 2 for v, w in points)
    return 0.0 if q <= 0 else max(0.0, (q - (len(points) - 1)) / q)


def _rank(values: list[tuple[int, float | None, float | None, float | None]],
          higher: bool) -> dict[int, tuple[int | None, bool]]:
    """Model id → (rank, tied with another model) by the rank-group rule."""
    scored = [v for v in values if v[1] is not None]
    scored.sort(key=lambda v: (-(v[1] or 0.0) if higher else (v[1] or 0.0), v[0]))
    out: dict[int, tuple[int | None, bool]] = {}
    position = 1
    while scored:
        leader = scored[0]
        lo = leader[2] if leader[2] is not None else leader[1]
        hi = leader[3] if leader[3] is not None else leader[1]
        group = [leader]
        for other in scored[1:]:
            olo = other[2] if other[2] is not None else other[1]
            ohi = other[3] if other[3] is not None else other[1]
            assert lo is not None and hi is not None and olo is not None and ohi is not None
            if olo <= hi and lo <= ohi:
                group.append(other)
        for member in group:
            out[member[0]] = (position, len(group) > 1)
        position += len(group)
        scored = [v for v in scored if v not in group]
    for v in values:
        out.setdefault(v[0], (None, False))
    return out


def _pooled_value(key: str, rows: Sequence[_Row], fig: api.Figure | None, n_cases: int,
                  withdrawn: dict[int, tuple[str, ...]]) -> PooledValue:
    sites = []
    for r in rows:
        f = r.stats.figures.get(key)
        sites.append(SiteValue(r.dataset_id, r.result_id, None if f is None else f.value,
                               None if f is None else f.low, None if f is None else f.high,
                               r.stats.n_cases, r.mock_tee, withdrawn.get(r.result_id, ()),
                               r.stats.epsilon, r.stats.delta, None if f is None else f.bias))
    present = [s.value for s in sites if s.value is not None]
    return PooledValue(
        key, None if fig is None else fig.value, None if fig is None else fig.low,
        None if fig is None else fig.high, len(rows), n_cases, min(present, default=None),
        max(present, default=None), _i2(sites), tuple(sites), None if fig is None else fig.bias)


def build(bench_id: int, plugin: api.Benchmark, rows: Sequence[_Row], *, metric: str | None,
          scope: str, withdrawn: dict[int, tuple[str, ...]] | None = None,
          every_metric: bool = False, also: Sequence[str] = (), with_breakdown: bool = False,
          pool: Callable[[Sequence[_Row]], Mapping[str, api.Figure]],
          tee: Mapping[int, TeePooled] | None = None,
          current: Mapping[int, Sequence[CoveredSite]] | None = None) -> Board:
    """Arrange readable results into the pooled board ranked by ``metric`` (default: the
    plug-in's headline), each model with that metric's values, then those of ``also`` (or of
    every metric), ``pool`` giving the pooled figures of one model's rows, ``tee`` the models'
    TEE-pooled releases (their figures replace the pool of the rows; a model with one stands
    even without poolable rows), ``current`` each model's current results a pool would read
    (those its figure does not cover wait; None: the benchmark does not pool in the TEE);
    :class:`InvalidRequestError` naming the valid metrics for an unknown one."""
    p = plugin.presentation
    refs = [api.MetricRef(m.key) for m in p.metrics] + [
        api.MetricRef(m.key, g.key) for m in p.metrics for g in p.groups]
    infos = {}
    for ref in refs:
        spec = p.metric(ref.metric)
        infos[metric_key(ref)] = MetricInfo(metric_key(ref), p.label(ref), spec.unit,
                                            spec.direction.value, ref.group)
    chosen = metric or metric_key(p.headline)
    if chosen not in infos:
        raise InvalidRequestError(f"unknown metric {chosen!r}; valid metrics: "
                                  f"{', '.join(infos)}")
    for key in also:
        if key not in infos:
            raise InvalidRequestError(f"unknown metric {key!r}; valid metrics: "
                                      f"{', '.join(infos)}")
    breakdown = _breakdown(tuple(infos.values()), chosen)
    wanted = infos if every_metric else (*also, *(breakdown if with_breakdown else ()))
    keys = (chosen, *dict.fromkeys(k for k in wanted if k != chosen))
    withdrawn = withdrawn or {}
    minimum = plugin.small_cell_minimum
    withheld: list[Withheld] = []
    by_model: dict[int, list[_Row]] = {}
    for row in rows:
        if row.stats.reason is not None:
            withheld.append(Withheld(row.model_id, row.dataset_id, row.stats.reason))
        elif not poolable(plugin, row.stats):
            withheld.append(Withheld(row.model_id, row.dataset_id,
                                     f"fewer than {minimum} cases (small-cell rule)"))
        else:
            by_model.setdefault(row.model_id, []).append(row)
    sites = sorted({(r.dataset_id, r.dataset_name) for rs in by_model.values() for r in rs})
    standings: list[Standing] = []
    headline_values: list[tuple[int, float | None, float | None, float | None]] = []
    names = {r.model_id: (r.model_name, r.model_version) for r in rows}
    tee = tee or {}
    for model_id in sorted(set(by_model) | set(tee)):
        mrows = by_model.get(model_id, [])
        release = tee.get(model_id)
        if release is None:
            pooled = pool(mrows)
            n_cases = sum(r.stats.n_cases for r in mrows)
        else:
            pooled, n_cases = release.figures, release.n_cases
        values = tuple(_pooled_value(key, mrows, pooled.get(key), n_cases, withdrawn)
                       for key in keys)
        if release is not None:
            values = tuple(replace(v, n_sites=release.n_sites, tee_pooled=True,
                                   pooled_release_id=release.pooled_release_id,
                                   pooled_at=release.pooled_at) for v in values)
        values = tuple(_explained(plugin, v) for v in values)
        main = values[0]
        headline_values.append((model_id, main.pooled, main.ci95_low, main.ci95_high))
        fallback = ("", "") if release is None else (release.model_name, release.model_version)
        name, version = names.get(model_id, fallback)
        mock = (any(r.mock_tee for r in mrows) if release is None
                else release.mock_tee or any(r.mock_tee for r in mrows))
        covers = (tuple(CoveredSite(r.dataset_id, r.dataset_name, r.result_id) for r in mrows)
                  if release is None else release.covers)
        standings.append(Standing(model_id, name, version, None, False, mock, tuple(values),
                                  release, covers, _waiting(covers, (current or {}).get(
                                      model_id, ()), tee_pooled=release is not None)))
    direction = infos[chosen].direction
    ranks = ({} if direction == api.Direction.NEUTRAL.value
             else _rank(headline_values, direction == api.Direction.HIGHER.value))
    ranked = [replace(s, rank=ranks.get(s.model_id, (None, False))[0],
                      tied=ranks.get(s.model_id, (None, False))[1]) for s in standings]
    ranked.sort(key=lambda s: (s.rank is None, s.rank or 0, _order(s, direction), s.model_id))
    return Board(bench_id, str(plugin.ref), chosen, metric_key(p.headline), direction,
                 tuple(infos.values()), tuple(SiteInfo(i, n) for i, n in sites), tuple(ranked),
                 tuple(withheld), scope, breakdown)


def _explained(plugin: api.Benchmark, v: PooledValue) -> PooledValue:
    """``v`` with its privacy loss and, where a figure is withheld, the plain words of why and
    what would show it (issue 41: the one computation, :mod:`sealbench.benchmarks.planning`)."""
    from sealbench.benchmarks.planning import reason_for, release_epsilon
    from sealbench.benchmarks.pooling import pooled_release_spec

    def why(value: float | None, low: float | None, n_cases: int, n_sites: int, tee: bool,
            epsilons: Sequence[float | None]) -> str | None:
        if value is not None:
            return None
        if low is None:
            return "not defined on these cases (e.g. a class with no case)"
        return reason_for(plugin, v.metric, n_cases=n_cases, n_sites=n_sites, tee_pooled=tee,
                          epsilons=epsilons)

    if v.tee_pooled:
        epsilon = release_epsilon(pooled_release_spec(plugin))
    else:
        epsilon = max((s.epsilon for s in v.sites if s.epsilon is not None), default=None)
    sites = tuple(replace(s, withheld_reason=why(s.value, s.ci95_low, s.n_cases, 1, False,
                                                 (s.epsilon,))) for s in v.sites)
    return replace(v, sites=sites, epsilon=epsilon, withheld_reason=why(
        v.pooled, v.ci95_low, v.n_cases, v.n_sites, v.tee_pooled, (epsilon,)))


def _waiting(covers: Sequence[CoveredSite], current: Sequence[CoveredSite], *,
             tee_pooled: bool) -> tuple[WaitingResult, ...]:
    """The current results a figure does not cover: all of them for a model without a
    TEE-pooled release (none pooled yet), else those not among its release's inputs."""
    pooled = {c.result_id for c in covers} if tee_pooled else set()
    sites = {c.dataset_id for c in covers} if tee_pooled else set()
    return tuple(WaitingResult(c.dataset_id, c.name, c.result_id, c.dataset_id not in sites)
                 for c in current if c.result_id not in pooled)


def _breakdown(metrics: Sequence[MetricInfo], chosen: str) -> tuple[str, ...]:
    base = chosen.split(":", 1)[0]
    grouped = tuple(m.key for m in metrics if m.group is not None and
                    m.key.split(":", 1)[0] == base)
    if grouped:
        return grouped
    return tuple(m.key for m in metrics if m.group is None and m.direction != "neutral")


def _order(s: Standing, direction: str) -> float:
    value = s.values[0].pooled
    if value is None:
        return math.inf
    return -value if direction == api.Direction.HIGHER.value else value


def pooled_board(session: Session, actor: Principal, benchmark_id: int, cache: SummaryCache, *,
                 metric: str | None = None, sites: frozenset[int] | None = None,
                 every_metric: bool = False, also: Sequence[str] = (),
                 with_breakdown: bool = False) -> Board:
    """The pooled leaderboard of ``benchmark_id`` as ``actor`` may see it."""
    bench = get_or_404(session, Benchmark, benchmark_id, "benchmark")
    try:
        plugin = load_plugin(bench.metrics_version)
    except (api.BenchmarkError, ValueError) as exc:
        raise InvalidStateError(
            f"benchmark {benchmark_id}'s metrics version {str(bench.metrics_version)!r} names no "
            "installed benchmark plug-in, so its results cannot be pooled") from exc
    rows = _rows(session, actor, bench, plugin, cache, sites)
    scope = ("every result (you are the benchmark's authority)"
             if bench.owner_id == actor.user_id
             else "the results on your datasets and of your models")
    refs: list[Any] = [_Ref(r.result_id, bench.id, r.dataset_id, r.model_id) for r in rows]
    marks = withdrawn_sides(session, refs)

    def pool(mrows: Sequence[_Row]) -> Mapping[str, api.Figure]:
        return cache.pooled(plugin, mrows, lambda ids: _summaries(session, plugin, ids))

    tee = {} if sites is not None else _tee_pooled(session, actor, bench, plugin)
    current = (None if sites is not None or bench.aggregator_image_digest is None
               else _current(session, actor, bench))
    return build(benchmark_id, plugin, rows, metric=metric, scope=scope,
                 withdrawn={k: tuple(v) for k, v in marks.items()}, every_metric=every_metric,
                 also=also, with_breakdown=with_breakdown, pool=pool, tee=tee, current=current)


def _current(session: Session, actor: Principal, bench: Benchmark
             ) -> dict[int, list[CoveredSite]]:
    """Each model's current results a pool would read (the registry's choice, as
    :func:`~.pool_authorizations.choose` reads them: each approved dataset's latest accepted
    result that sealed statistics and says where its run left them), for the models whose
    pooled releases ``actor`` may see (the authority, the model's owner, or everyone when the
    board is published). The summary's commitment is read in SQL, never the summary."""
    pooled = Result.summary["pool_statistics"].as_string()
    latest = (
        select(func.max(Result.id).label("id"))
        .where(Result.benchmark_id == bench.id, Result.result_uri.is_not(None),
               pooled.is_not(None), Result.summary["run_id"].as_string().is_not(None))
        .group_by(Result.model_id, Result.dataset_id))
    if bench.owner_id != actor.user_id and not bench.leaderboard_published:
        latest = latest.where(Result.model_id.in_(
            select(Model.id).where(Model.owner_id == actor.user_id)))
    sub = latest.subquery()
    found = session.execute(
        select(Result.model_id, Result.dataset_id, Dataset.name, Result.id)
        .join(sub, sub.c.id == Result.id).join(Dataset, Dataset.id == Result.dataset_id)
        .order_by(Result.model_id, Result.dataset_id)).all()
    approved = {d: is_approved(session, "dataset", bench.id, d)
                for d in sorted({row[1] for row in found})}
    out: dict[int, list[CoveredSite]] = {}
    for model_id, dataset_id, name, result_id in found:
        if approved[dataset_id]:
            out.setdefault(model_id, []).append(CoveredSite(dataset_id, name, result_id))
    return out


def _tee_pooled(session: Session, actor: Principal, bench: Benchmark, plugin: api.Benchmark
                ) -> dict[int, TeePooled]:
    """Each model's latest pooled release ``actor`` may see, with the plug-in's figures of it
    (a release the installed plug-in no longer reads is not shown)."""
    latest: dict[int, Any] = {}
    for row in visible_releases(session, actor, bench):
        latest[row.model_id] = row  # ascending ids: the last is the latest
    links = inputs_of(session, list(latest.values()))
    names = {did: name for did, name in session.execute(
        select(Dataset.id, Dataset.name).where(Dataset.id.in_(
            sorted({i["dataset_id"] for items in links.values() for i in items}))))}
    out: dict[int, TeePooled] = {}
    for model_id, row in latest.items():
        aggregates = row.release.get("aggregates") if isinstance(row.release, dict) else None
        try:
            figures = plugin.figures(parse_pooled_summary(plugin, aggregates))
        except (api.BenchmarkError, TypeError, ValueError):
            continue
        model = session.get(Model, model_id)
        if model is None:
            continue
        out[model_id] = TeePooled(
            row.id, row.created_at, model.name, model.version, row.n_sites, row.n_cases,
            not attests_hardware(row.token_issuer), dict(aggregates or {}),
            {metric_key(f.ref): f for f in figures},
            covers=tuple(CoveredSite(i["dataset_id"], names.get(i["dataset_id"], ""),
                                     i["result_id"]) for i in links.get(row.id, ())))
    return out


@dataclass(frozen=True)
class _Ref:
    """The fields :func:`withdrawn_sides` reads from a result."""

    id: int
    benchmark_id: int
    dataset_id: int
    model_id: int
