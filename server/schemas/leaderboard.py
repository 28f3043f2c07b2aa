"""Pooled leaderboard wire types (issue 15): numbers and links, never summaries or tokens."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from pydantic import Field

from sealbench.server.schemas.assets import AssetKind
from sealbench.server.schemas.common import JsonOut, WireModel

__all__ = [
    "CSV_FIXED",
    "CoveredSitePublic",
    "MetricInfoPublic",
    "PooledLeaderboard",
    "PooledValuePublic",
    "SitePublic",
    "SiteValuePublic",
    "StandingPublic",
    "TeePooledPublic",
    "WaitingPublic",
    "WithheldPublic",
    "to_csv",
]

#: The CSV's fixed columns; one column per site follows, titled ``<dataset name> (#<id>)``.
#: ``bias`` is the pooled value's method error (empty where the method is exact); ``epsilon``
#: the privacy loss of the release(s) behind the row's pooled value; ``tee_pooled`` whether that
#: value is a release pooled inside the TEE; ``withheld_reason`` why an empty ``pooled`` is
#: withheld and what would show it.
CSV_FIXED = ("model", "model_id", "metric", "rank", "tied", "n_sites", "n_cases", "pooled",
             "ci95_low", "ci95_high", "site_min", "site_max", "i2", "mock_tee", "epsilon",
             "bias", "tee_pooled", "withheld_reason", "covers", "waiting")

_WHY = ("why the value is withheld and what would show it, in plain words (e.g. 'privacy "
        "noise at ε 1 over 10 cases spreads ±0.91; this figure shows from about 73 cases "
        "pooled in the TEE'); None when it is shown")
_BIAS = ("the largest error the plug-in's method of computing the value can make beside noise "
         "and sampling (e.g. an AUROC read from score bins); None where the method is exact")


class MetricInfoPublic(WireModel):
    key: str = Field(description="'dice' or 'dice:WT' (metric, or metric:group)")
    label: str
    unit: str
    direction: str = Field(description="higher, lower or neutral (not ranked)")
    group: str | None


class SitePublic(WireModel):
    dataset_id: int
    name: str


class SiteValuePublic(WireModel):
    dataset_id: int
    result_id: int
    value: float | None
    ci95_low: float | None
    ci95_high: float | None
    n_cases: int
    mock_tee: bool = Field(description="verified against a mock issuer: not a confidential run")
    withdrawn: tuple[AssetKind, ...] = ()
    epsilon: float | None = Field(
        default=None, description="the privacy loss of the site's release (None: exact)")
    delta: float | None = Field(default=None, description="the release's delta")
    bias: float | None = Field(default=None, description=_BIAS)
    withheld_reason: str | None = Field(default=None, description=_WHY)


class PooledValuePublic(WireModel):
    metric: str
    pooled: float | None = Field(description="case-weighted over the model's sites")
    ci95_low: float | None
    ci95_high: float | None
    n_sites: int
    n_cases: int
    site_min: float | None
    site_max: float | None
    i2: float | None = Field(description="heterogeneity between sites (0 to 1)")
    sites: tuple[SiteValuePublic, ...]
    bias: float | None = Field(default=None, description=_BIAS)
    tee_pooled: bool = Field(
        default=False, description="the value is a TEE-pooled release's (issue 27: the sites' "
        "exact statistics pooled inside the benchmark's attested aggregator, noise drawn once), "
        "not a pool of the sites' own releases; n_sites is the release's")
    pooled_release_id: int | None = Field(
        default=None, description="the TEE-pooled release (GET /benchmarks/{id}/pooled-releases)")
    pooled_at: datetime | None = None
    epsilon: float | None = Field(
        default=None, description="the privacy loss of the release(s) the value comes from: "
        "the TEE-pooled release's, or the largest of the sites' (None: exact releases)")
    withheld_reason: str | None = Field(default=None, description=_WHY)


class TeePooledPublic(WireModel):
    """A model's TEE-pooled release as the board shows it (its attestation is on the release)."""

    tee_pooled: bool = True
    pooled_release_id: int
    pooled_at: datetime
    n_sites: int
    n_cases: int
    aggregates: JsonOut


class CoveredSitePublic(WireModel):
    """A site a figure covers: its dataset and the result of it that was pooled."""

    dataset_id: int
    name: str = Field(description="the dataset's name")
    result_id: int


class WaitingPublic(WireModel):
    """An accepted result the model's figure does not cover yet: it waits for the next pool."""

    dataset_id: int
    name: str = Field(description="the dataset's name")
    result_id: int
    new_site: bool = Field(description="true: the figure covers no result of this dataset (a "
                           "site added since the last pool); false: a newer result of a site "
                           "the figure covers by an earlier one")


class StandingPublic(WireModel):
    model_id: int
    model_name: str
    model_version: str
    rank: int | None = Field(description="rank group (models tied share it); None: unranked")
    tied: bool
    mock_tee: bool
    values: tuple[PooledValuePublic, ...] = Field(description="the ranked metric first")
    tee_pooled: TeePooledPublic | None = Field(
        default=None, description="the model's latest TEE-pooled release, whose figures its "
        "values show (None: its values pool the sites' releases)")
    covers: tuple[CoveredSitePublic, ...] = Field(
        default=(), description="the sites the model's figure covers: the TEE-pooled release's "
        "inputs, else the sites whose releases are pooled (a new pool always covers every "
        "site of the current one that is still approved: adding a site never shrinks it)")
    waiting: tuple[WaitingPublic, ...] = Field(
        default=(), description="in a benchmark that pools in the TEE, each current approved "
        "site's latest accepted result that the figure does not cover, waiting for the next "
        "'benchmark pool' (shown to those who see the model's pooled releases; empty "
        "otherwise)")
    n_waiting: int = Field(default=0, description="how many results wait (len of waiting)")


class WithheldPublic(WireModel):
    model_id: int
    dataset_id: int
    reason: str


class PooledLeaderboard(WireModel):
    benchmark_id: int
    plugin: str
    metric: str = Field(description="the metric ranked by")
    headline: str
    direction: str
    metrics: tuple[MetricInfoPublic, ...] = Field(description="every valid metric key")
    sites: tuple[SitePublic, ...]
    standings: tuple[StandingPublic, ...]
    withheld: tuple[WithheldPublic, ...]
    scope: str = Field(description="which results the caller's figures are pooled from")
    breakdown: tuple[str, ...] = Field(
        default=(), description="the ranked metric per group (region, class), or every ranked "
        "metric without groups")
    rank_rule: str
    interval_rule: str


def _num(value: float | None) -> str:
    return "" if value is None else repr(value)


class _CsvBoard(Protocol):
    """What :func:`to_csv` reads: this module's :class:`PooledLeaderboard`, or the service's
    board it is built from (the same attribute names)."""

    @property
    def sites(self) -> Sequence[Any]: ...

    @property
    def standings(self) -> Sequence[Any]: ...


def to_csv(board: _CsvBoard) -> str:
    """One row per (model, metric), one column per site (empty where the model has no value
    there); what the CLI's ``--format csv`` prints and the dashboard's download serves."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CSV_FIXED, *(f"{s.name} (#{s.dataset_id})" for s in board.sites)])
    for standing in board.standings:
        # which sites the model's figure covers and which accepted results wait for the next
        # pool ("; "-separated "name (#dataset)"; a new site marked)
        covers = "; ".join(f"{c.name} (#{c.dataset_id})"
                           for c in getattr(standing, "covers", ()))
        waiting = "; ".join(f"{w.name} (#{w.dataset_id}){' new site' if w.new_site else ''}"
                            for w in getattr(standing, "waiting", ()))
        for value in standing.values:
            by_site = {s.dataset_id: s.value for s in value.sites}
            # the pooled value's privacy loss, else the largest per-site one in the row (empty:
            # no private release in it)
            epsilon = getattr(value, "epsilon", None)
            if epsilon is None and not getattr(value, "tee_pooled", False):
                epsilon = max((s.epsilon for s in value.sites if s.epsilon is not None),
                              default=None)
            writer.writerow([
                f"{standing.model_name} {standing.model_version}", standing.model_id,
                value.metric, "" if standing.rank is None else standing.rank,
                str(standing.tied).lower(), value.n_sites, value.n_cases, _num(value.pooled),
                _num(value.ci95_low), _num(value.ci95_high), _num(value.site_min),
                _num(value.site_max), _num(value.i2), str(standing.mock_tee).lower(),
                _num(epsilon), _num(value.bias),
                str(bool(getattr(value, "tee_pooled", False))).lower(),
                getattr(value, "withheld_reason", None) or "",
                covers, waiting,
                *(_num(by_site.get(s.dataset_id)) for s in board.sites)])
    return buffer.getvalue()
