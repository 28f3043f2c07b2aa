"""Per-case results (sealed to the data owner) and the public summary of a WDBC run: a
differentially private release, and the figures and pooled figures computed from it alone.

A case's result is its label and the model's P(malignant), or a flagged failure with its
reason. **Failures are penalised, never dropped**: a case whose label is known (its inference
failed or gave no probability) enters with the worst score, 0 for a malignant case and 1 for a
benign one; a case that could not even be loaded has no label and is counted as
``unlabelled`` (prepared datasets are validated and authenticated, so this takes a damaged
preparation).

**The release** (:data:`RELEASE_SPEC`, part of the pin; :mod:`sealbench.benchmarks.release`):
per case, one bounded column ``brier`` in [0, 1], the squared error of the penalised score (an
unlabelled case contributes 1, the worst), and one category block ``score`` whose keys are
``m00..m19`` (a malignant case by score bin), ``b00..b19`` (a benign case by score bin) and
``unlabelled``; the bins are :data:`.binned.SCORE_BIN_SCHEME` (20 bins equally spaced in logit
space, 0.5 an edge). Every sum carries Gaussian noise at ε = 1, δ = 1e-6 per release.

The summary (``sealbench/wdbc-summary`` version 2, canonical JSON)::

    summary_id, version  "sealbench/wdbc-summary", 2 (3: a pooled release, below)
    plugin               the plug-in pin ("wdbc/1")
    n_cases              the case count (public: registered with the dataset)
    threshold            0.5, the operating threshold (a bin edge)
    score_bins           the bins' scheme (SCORE_BIN_SCHEME)
    release              the sealbench/dp-release document
    auroc, auroc_floor   version 3 only: the pooled AUROC's Laplace release and its floor k

Nothing else is computed from the cases: no exact AUROC, class count or reliability table (at
small n each was a case). Version 1's figures and small-cell merging are gone; noise replaces
the merge.

**Figures** (:func:`figures`, :func:`pool`; post-processing of releases, :mod:`.binned`): AUROC,
sensitivity and specificity at 0.5 from the noisy bins, the Brier score ``brier sum / n_cases``
(:func:`~sealbench.benchmarks.release.pooled_mean`), the case count; each with a 95% interval
adding the release noise to the sampling error. A figure that is uninformative (a class total
under 3 noise standard deviations, or an interval wider than half the range) has the value
None: it is neither shown nor ranked. ECE and the calibration slope are not in the release:
their figures are None (the keys stay for older clients). Pooling adds the sites' noisy cells
(unbiased) and noise variances.

**The pooled release** (:func:`pooled_summary`, an aggregator's: every site's exact results
pooled inside a TEE, :mod:`sealbench.benchmarks.pooling`) is version 3 and splits the per-site
release's budget (ε, δ) as the plug-in declares (:data:`AUROC_EPSILON_SHARE`):

- the **headline**, the AUROC over every pooled case computed exactly, released alone by a
  pure-ε Laplace mechanism at ``AUROC_EPSILON_SHARE·ε`` calibrated to its own sensitivity
  (:mod:`.private_auroc`: its statistic, the theorem and its proof; the floor ``k`` from the
  public case count and :data:`MIN_CLASS_SHARE`), in the field ``auroc`` (a Laplace release of
  one column :data:`AUROC`) beside ``auroc_floor`` (``k``);
- the **breakdown** (``release``), a Gaussian release at the rest of ε and the same δ: the
  Brier column, the :data:`MALIGNANT` class indicator and the score block (sensitivity,
  specificity, class counts).

The release's cost is the sum of the two (:func:`pooled_loss`): what the pool authorization
debits. A pooled summary of version 2 (the Brier, :data:`PAIRS` and :data:`MALIGNANT` columns
and the score block in one Gaussian release at the whole (ε, δ): its AUROC ``U/(P·N)`` from the
noisy pair count, 10.9 times the non-private interval at 32 sites of 50 cases) still parses
(:func:`legacy_pooled_release_spec`) and reads as it did.

**The AUROC's binning error** travels with it as its figure's ``bias``, per site and pooled:
half the share of (malignant, benign) pairs in one bin, from the (pooled) counts clipped at 0
(:func:`.binned.auroc_binning_bound`: a bound for an exact release, an estimate of it under
noise). The other figures are exact in method (``bias`` None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal, Self

import numpy as np
import numpy.typing as npt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from sealbench.benchmarks import release as rel
from sealbench.benchmarks.interface import (
    Figure,
    JsonObject,
    MetricRef,
    PooledFigures,
    SummaryError,
)
from sealbench.crypto.canonical import canonical_json

from . import binned
from . import private_auroc as pa

__all__ = [
    "AUROC",
    "AUROC_EPSILON_SHARE",
    "BRIER",
    "MALIGNANT",
    "MIN_CLASS_SHARE",
    "PAIRS",
    "RELEASE_SPEC",
    "SCORE",
    "SCORE_KEYS",
    "SUMMARY_ID",
    "SUMMARY_VERSION",
    "THRESHOLD",
    "UNLABELLED",
    "PooledReleaseSpec",
    "WdbcCaseResult",
    "WdbcSummary",
    "auroc_binning_bound",
    "auroc_release_spec",
    "auroc_statistic",
    "contributions",
    "counts_of",
    "figures",
    "legacy_pooled_release_spec",
    "pair_shares",
    "parse_case_result",
    "parse_pooled_summary",
    "parse_summary",
    "pool",
    "pooled_loss",
    "pooled_release_spec",
    "pooled_summary",
    "release_spec",
    "summarise",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
SUMMARY_ID: Final = "sealbench/wdbc-summary"
SUMMARY_VERSION: Final = 2
#: The benchmark's fixed operating threshold on P(malignant) (a score bin edge).
THRESHOLD: Final = 0.5
_MAX_DOC: Final = 1 << 20
#: The release's bounded column and category block.
BRIER: Final = "brier"
#: The pooled release's extra columns: the Mann-Whitney pair count over the case count, and
#: the malignant indicator (the class total with one cell's noise rather than twenty's).
PAIRS: Final = "pairs"
MALIGNANT: Final = "malignant"
SCORE: Final = "score"
#: The pooled release's headline column: the AUROC statistic over its sensitivity, in shares.
AUROC: Final = "auroc"
#: The share of a pooled release's ε spent on the headline AUROC (Laplace, pure ε); the rest
#: goes to the breakdown (Gaussian, at the release's δ). At ε 1 over the demo's 220 cases the
#: headline's 95% half-width is 0.043 from noise (k = 73); the breakdown is wide at any size a
#: board starts at (docs/privacy.md, "The pooled AUROC").
AUROC_EPSILON_SHARE: Final = 0.95
#: The declared least share of either class among pooled cases: the AUROC's public floor is
#: ``k = floor(MIN_CLASS_SHARE·n)`` (:func:`.private_auroc.floor_of`). At a third or less the
#: AUROC's sensitivity is 1/k; the UCI data are 37% malignant, the demo's pooled sites 35%.
MIN_CLASS_SHARE: Final = Fraction(1, 3)
UNLABELLED: Final = "unlabelled"
#: The score block's keys: malignant by bin, benign by bin, then the unlabelled.
SCORE_KEYS: Final[tuple[str, ...]] = (
    *(f"m{k:02d}" for k in range(binned.SCORE_BINS)),
    *(f"b{k:02d}" for k in range(binned.SCORE_BINS)),
    UNLABELLED)


def release_spec(*, epsilon: float = rel.DEFAULT_EPSILON,
                 delta: float = rel.DEFAULT_DELTA) -> rel.ReleaseSpec:
    """The Brier column and the score-bin block at ``epsilon``, ``delta`` per release."""
    return rel.ReleaseSpec(columns=(rel.Column(BRIER, 0.0, 1.0),),
                           categories=(rel.Category(SCORE, SCORE_KEYS),),
                           epsilon=epsilon, delta=delta)


#: What every WDBC release holds and costs (the plug-in's ``release_spec``).
RELEASE_SPEC: Final = release_spec()


def legacy_pooled_release_spec(spec: rel.ReleaseSpec = RELEASE_SPEC) -> rel.ReleaseSpec:
    """A version 2 pooled release: ``spec`` (same ε, δ, exactness) with the :data:`PAIRS` and
    :data:`MALIGNANT` columns after the Brier one (what such summaries are still parsed
    against)."""
    return rel.ReleaseSpec(columns=(*spec.columns, rel.Column(PAIRS, 0.0, 1.0),
                                    rel.Column(MALIGNANT, 0.0, 1.0)),
                           categories=spec.categories, epsilon=spec.epsilon,
                           delta=spec.delta, exact=spec.exact)


@dataclass(frozen=True)
class PooledReleaseSpec(rel.ReleaseSpec):
    """The breakdown of a release split between a headline and a breakdown, carrying the
    headline's spec: its own fields are the breakdown's (what the summary's ``release`` holds,
    what :meth:`~sealbench.benchmarks.release.Release.matches` checks and ``sigma`` describes);
    :attr:`loss` is the whole release's, the breakdown's and the headline's composed (what a
    pool authorization debits and a budget charges)."""

    headline: rel.ReleaseSpec | None = None

    @property
    def loss(self) -> rel.PrivacyLoss:
        own = super().loss
        return own if self.headline is None else own + self.headline.loss


def pooled_release_spec(spec: rel.ReleaseSpec = RELEASE_SPEC) -> PooledReleaseSpec:
    """The breakdown of a version 3 pooled release: the Brier and :data:`MALIGNANT` columns and
    the score block, Gaussian at ``(1 - AUROC_EPSILON_SHARE)·ε`` and ``spec``'s δ (exact when
    ``spec`` is), carrying :func:`auroc_release_spec` (its ``loss`` is the two's)."""
    return PooledReleaseSpec(columns=(*spec.columns, rel.Column(MALIGNANT, 0.0, 1.0)),
                             categories=spec.categories,
                             epsilon=spec.epsilon * (1 - AUROC_EPSILON_SHARE),
                             delta=spec.delta, exact=spec.exact,
                             headline=auroc_release_spec(spec))


def auroc_release_spec(spec: rel.ReleaseSpec = RELEASE_SPEC) -> rel.ReleaseSpec:
    """The headline of a version 3 pooled release: one column :data:`AUROC` (the statistic of
    :mod:`.private_auroc` over its sensitivity, whose sum moves by at most 1), Laplace at
    ``AUROC_EPSILON_SHARE·ε`` (exact when ``spec`` is)."""
    return rel.ReleaseSpec(columns=(rel.Column(AUROC, 0.0, 1.0),),
                           epsilon=spec.epsilon * AUROC_EPSILON_SHARE, delta=spec.delta,
                           exact=spec.exact, mechanism="laplace")


def pooled_loss(spec: rel.ReleaseSpec = RELEASE_SPEC) -> rel.PrivacyLoss:
    """What one version 3 pooled release costs: its breakdown's loss and its headline's (at
    most ``spec``'s (ε, δ): the two ε's add, the Gaussian's at δ)."""
    return pooled_release_spec(spec).loss


class WdbcCaseResult(BaseModel):
    """One case's private result: label and score, or a failure and its reason."""

    model_config = _FROZEN

    case_id: str
    malignant: bool | None
    score: float | None
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.score is None

    def penalised_score(self) -> float | None:
        """The score the metrics use: the model's, or the worst one for a failed case (or one
        whose score is no probability)."""
        if self.malignant is None:
            return None
        if self.score is not None and math.isfinite(self.score) and 0 <= self.score <= 1:
            return self.score
        return 0.0 if self.malignant else 1.0

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="json")


class WdbcSummary(BaseModel):
    """The public summary of one run (version 2) or of a pooled release (version 3, or 2
    before it): the pin, the case count, the threshold, the bins and the release; a version 3
    summary also the headline AUROC's own release and its floor. Every figure is computed from
    the releases."""

    model_config = _FROZEN

    summary_id: Literal["sealbench/wdbc-summary"] = "sealbench/wdbc-summary"
    version: Literal[2, 3] = 2
    plugin: str
    n_cases: int = Field(ge=1)
    threshold: float = THRESHOLD
    score_bins: str = binned.SCORE_BIN_SCHEME
    release: rel.Release
    auroc: rel.Release | None = None
    auroc_floor: int | None = None

    @model_serializer(mode="wrap")
    def _version_2_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A version 2 summary serialises as it always did (no ``auroc`` keys)."""
        out: dict[str, Any] = handler(self)
        if self.version == 2:
            out.pop("auroc", None)
            out.pop("auroc_floor", None)
        return out

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.threshold != THRESHOLD:
            raise ValueError(f"the threshold is {THRESHOLD} (a bin edge), not {self.threshold}")
        if self.score_bins != binned.SCORE_BIN_SCHEME:
            raise ValueError(f"the score bins are {binned.SCORE_BIN_SCHEME!r}")
        if self.n_cases != self.release.n_cases:
            raise ValueError("the summary's case count is not its release's")
        try:
            self.release.column(BRIER)
            block = self.release.category(SCORE)
        except KeyError as exc:
            raise ValueError(f"the release holds no {exc}") from exc
        if block.keys != SCORE_KEYS:
            raise ValueError("the release's score block has other keys")
        if (self.version == 3) != (self.auroc is not None) or (
                (self.auroc is None) != (self.auroc_floor is None)):
            raise ValueError("a summary holds the AUROC's release and floor exactly when it is "
                             "version 3")
        if self.auroc is not None:
            if self.auroc.n_cases != self.n_cases:
                raise ValueError("the AUROC's release is of another case count")
            if self.auroc_floor != pa.floor_of(self.n_cases, MIN_CLASS_SHARE).k:
                raise ValueError("the AUROC's floor is not the declared share of the cases")
            try:
                self.auroc.column(AUROC)
            except KeyError as exc:
                raise ValueError("the AUROC's release holds no auroc column") from exc
        return self

    @property
    def releases(self) -> tuple[rel.Release, ...]:
        """Every release the summary carries (the breakdown, then a version 3's headline AUROC):
        together what it cost (:func:`sealbench.benchmarks.pooling.summary_loss`)."""
        return (self.release,) if self.auroc is None else (self.release, self.auroc)

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="json")

    def to_canonical_json(self) -> bytes:
        return canonical_json(self.to_json())


def contributions(results: Sequence[WdbcCaseResult]) -> npt.NDArray[np.float64]:
    """One row per case in :data:`RELEASE_SPEC`'s order: the squared error of its penalised
    score (1 when unlabelled), then its one-hot score key."""
    rows = np.zeros((len(results), 1 + len(SCORE_KEYS)), dtype=np.float64)
    for i, result in enumerate(results):
        score = result.penalised_score()
        if score is None:
            rows[i, 0] = 1.0
            rows[i, len(SCORE_KEYS)] = 1.0
            continue
        label = 1.0 if result.malignant else 0.0
        rows[i, 0] = (score - label) ** 2
        offset = 0 if result.malignant else binned.SCORE_BINS
        rows[i, 1 + offset + binned.score_bin(score)] = 1.0
    return rows


def pair_shares(results: Sequence[WdbcCaseResult]) -> npt.NDArray[np.float64]:
    """Per case, its share of the Mann-Whitney count ``U`` over the case count ``N``: for a
    malignant case, the benign cases it outranks (a tie counting 1/2) over ``N``; 0 for a
    benign or unlabelled case. The shares sum to ``U / N``.

    **Sensitivity.** Unlike the other columns, a case's share depends on the other cases, so
    the per-case clipping argument does not apply; the sum's does: replacing one case removes
    its pairs (at most ``N - 1``) and adds the new case's (at most ``N - 1``), so ``U`` moves by
    at most ``N - 1`` and ``U / N`` by less than 1, the bound
    :attr:`~sealbench.benchmarks.release.ReleaseSpec.sensitivity` assumes for a bounded column
    scaled to [0, 1]. Every share is in [0, 1), so clipping changes nothing."""
    scores = np.asarray([np.nan if (sc := r.penalised_score()) is None else sc
                         for r in results], dtype=np.float64)
    labelled = ~np.isnan(scores)
    malignant = labelled & np.asarray([r.malignant is True for r in results])
    benign = np.sort(scores[labelled & ~malignant])
    below = np.searchsorted(benign, scores[malignant], side="left")
    ties = np.searchsorted(benign, scores[malignant], side="right") - below
    shares = np.zeros(len(results), dtype=np.float64)
    shares[malignant] = (below + ties / 2) / len(results)
    return shares


def _rows(results: Sequence[Any]) -> list[WdbcCaseResult]:
    if not results:
        raise ValueError("cannot summarise zero cases")
    return [r if isinstance(r, WdbcCaseResult) else WdbcCaseResult.model_validate(r.to_json())
            for r in results]


def summarise(results: Sequence[Any], plugin: str, noise: rel.NoiseSource,
              spec: rel.ReleaseSpec = RELEASE_SPEC) -> WdbcSummary:
    """The public summary of every case's result: one release under ``spec`` with noise from
    ``noise`` (``ValueError`` for no results)."""
    made = rel.release(contributions(_rows(results)), spec, noise)
    return WdbcSummary(plugin=plugin, n_cases=made.n_cases, release=made)


def auroc_statistic(results: Sequence[Any]) -> pa.AurocStatistic:
    """The exact AUROC statistic of :mod:`.private_auroc` over ``results`` at the declared
    floor: each case's penalised score, an unlabelled case counting as a benign one scored 1
    (``ValueError`` for no results)."""
    rows = _rows(results)
    labels = [r.malignant is True for r in rows]
    scores = [1.0 if (sc := r.penalised_score()) is None else sc for r in rows]
    return pa.statistic(labels, scores, pa.floor_of(len(rows), MIN_CLASS_SHARE))


def pooled_summary(results: Sequence[Any], plugin: str, noise: rel.NoiseSource,
                   spec: rel.ReleaseSpec = RELEASE_SPEC) -> WdbcSummary:
    """The pooled summary (version 3) of every site's cases together (an aggregator's): the
    breakdown under :func:`pooled_release_spec` of ``spec``, then the headline AUROC computed
    exactly and released under :func:`auroc_release_spec`, noise from ``noise`` in that order
    (``ValueError`` for no results)."""
    rows = _rows(results)
    base = contributions(rows)
    malignant = np.asarray([1.0 if r.malignant else 0.0 for r in rows])
    breakdown = np.concatenate([base[:, :1], malignant[:, None], base[:, 1:]], axis=1)
    made = rel.release(breakdown, pooled_release_spec(spec), noise)
    stat = auroc_statistic(rows)
    grid_bits = getattr(noise, "grid_bits", None)
    shares = pa.shares(stat, grid_bits if isinstance(grid_bits, int) else None)
    headline = rel.release(np.asarray(shares, dtype=np.float64)[:, None],
                           auroc_release_spec(spec), noise)
    return WdbcSummary(version=3, plugin=plugin, n_cases=made.n_cases, release=made,
                       auroc=headline, auroc_floor=stat.floor.k)


def _validated(doc: Mapping[str, Any]) -> WdbcSummary:
    try:
        if len(canonical_json(dict(doc))) > _MAX_DOC:
            raise SummaryError("the summary is larger than 1 MiB")
        return WdbcSummary.model_validate(dict(doc))
    except (ValidationError, ValueError, TypeError) as exc:
        raise SummaryError(f"not a {SUMMARY_ID} version {SUMMARY_VERSION} or 3 document"
                           ) from exc


def _refuse(spec: rel.ReleaseSpec, what: str = "release") -> SummaryError:
    loss = (f"Laplace, epsilon {spec.epsilon}" if spec.mechanism == "laplace"
            else f"epsilon {spec.epsilon}, delta {spec.delta}")
    return SummaryError(f"the summary's {what} is not the one declared (content or privacy "
                        f"loss: {loss} per release{', exact' if spec.exact else ''})")


def parse_summary(doc: Mapping[str, Any], spec: rel.ReleaseSpec = RELEASE_SPEC) -> WdbcSummary:
    """A site's summary JSON object (version 2) validated against the schema, whose release is
    of ``spec`` (its content and privacy loss: a summary of another ε, or an exact one, is
    refused); :class:`SummaryError`."""
    summary = _validated(doc)
    if summary.version != SUMMARY_VERSION or not summary.release.matches(spec):
        raise _refuse(spec)
    return summary


def parse_pooled_summary(doc: Mapping[str, Any],
                         spec: rel.ReleaseSpec = RELEASE_SPEC) -> WdbcSummary:
    """A pooled summary JSON object for the site release ``spec``: version 3, its breakdown of
    :func:`pooled_release_spec` and its AUROC of :func:`auroc_release_spec` (both of ``spec``),
    or version 2 (before the headline's own release) of :func:`legacy_pooled_release_spec`;
    :class:`SummaryError`."""
    summary = _validated(doc)
    if summary.version == 2:
        legacy = legacy_pooled_release_spec(spec)
        if not summary.release.matches(legacy):
            raise _refuse(legacy)
        return summary
    breakdown, headline = pooled_release_spec(spec), auroc_release_spec(spec)
    if not summary.release.matches(breakdown):
        raise _refuse(breakdown, "breakdown")
    if summary.auroc is None or not summary.auroc.matches(headline):
        raise _refuse(headline, "AUROC release")
    return summary


def parse_case_result(doc: Mapping[str, Any]) -> WdbcCaseResult:
    """A per-case result JSON object; :class:`SummaryError` when it does not validate."""
    try:
        return WdbcCaseResult.model_validate(dict(doc))
    except ValidationError as exc:
        raise SummaryError("not a WDBC per-case result") from exc


# -- figures from releases -----------------------------------------------------------------------


def counts_of(release: rel.Release) -> binned.Counts:
    """The noisy per-class bin counts of one release and their noise variance."""
    block = release.category(SCORE)
    bins = binned.SCORE_BINS
    return binned.Counts(tuple(block.counts[:bins]), tuple(block.counts[bins:2 * bins]),
                         block.sd ** 2)


def _brier(releases: Sequence[rel.Release]) -> Figure:
    est = rel.pooled_mean([r.column(BRIER) for r in releases], [r.n_cases for r in releases])
    half = rel.Z95 * math.hypot(est.noise_se, est.sampling_se)
    noisy = any(not r.exact for r in releases)
    value = None if noisy and 2 * half > 0.5 * (est.bounds[1] - est.bounds[0]) else est.shown
    return Figure(MetricRef("brier"), value, est.low, est.high)


def _pooled_counts(releases: Sequence[rel.Release]) -> binned.Counts:
    counts = counts_of(releases[0])
    for other in releases[1:]:
        counts = counts + counts_of(other)
    return counts


def _has_pairs(release: rel.Release) -> bool:
    return any(c.key == PAIRS for c in release.columns)


def _auroc(releases: Sequence[rel.Release], counts: binned.Counts) -> Figure:
    if len(releases) == 1 and _has_pairs(releases[0]):
        # a pooled release: the pair count is released, the AUROC exact in method. The class
        # totals: P from the malignant column, N = n - P - unlabelled (cell), so with noises
        # e_P, e_U of variance v each, P·N moves by (N - P)·e_P - P·e_U (+ e_P·(e_P + e_U))
        release = releases[0]
        n, pairs = release.n_cases, release.column(PAIRS)
        column = release.column(MALIGNANT)
        block = release.category(SCORE)
        v = column.sd ** 2
        p_total = column.sum
        n_total = n - p_total - block.counts[-1]
        product_var = (n_total - p_total) ** 2 * v + p_total ** 2 * v + 3 * v * v
        return binned.auroc_from_pairs(n * pairs.sum, (n * pairs.sd) ** 2, p_total, n_total,
                                       product_var, counts).figure(MetricRef("auroc"))
    # read from score bins: its method error (binned.auroc_binning_bound) goes with it
    return binned.auroc(counts).figure(MetricRef("auroc"), bias=binned.auroc_binning_bound(counts))


def _headline(summary: WdbcSummary) -> Figure:
    """A version 3 summary's AUROC: ``T̂ = Δ·(released sum)``, its Laplace scale ``Δ·sd/√2``
    (:func:`.private_auroc.figure`)."""
    assert summary.auroc is not None and summary.auroc_floor is not None
    floor = pa.Floor(summary.n_cases, summary.auroc_floor)
    column = summary.auroc.column(AUROC)
    delta = float(floor.sensitivity)
    return pa.figure(MetricRef("auroc"), delta * column.sum, delta * column.sd / math.sqrt(2),
                     floor, noisy=not summary.auroc.exact)


def _figures(releases: Sequence[rel.Release], auroc: Figure | None = None
             ) -> tuple[Figure, ...]:
    counts = _pooled_counts(releases)
    return (
        auroc if auroc is not None else _auroc(releases, counts),
        # exact in method: 0.5 is a bin edge; the Brier sum is a released column
        binned.sensitivity(counts).figure(MetricRef("sensitivity")),
        binned.specificity(counts).figure(MetricRef("specificity")),
        _brier(releases),
        # not released under differential privacy (the keys stay for older clients)
        Figure(MetricRef("ece"), None),
        Figure(MetricRef("calibration_slope"), None),
        Figure(MetricRef("n_cases"), float(sum(r.n_cases for r in releases))),
    )


def figures(summary: WdbcSummary) -> tuple[Figure, ...]:
    """The presentation's values of ``summary`` (one site: :func:`pool` of it alone; a
    version 3 pooled summary: its AUROC from its own release)."""
    if summary.auroc is not None:
        return _figures([summary.release], _headline(summary))
    return _figures([summary.release])


def _releases(summaries: Sequence[WdbcSummary], spec: rel.ReleaseSpec) -> list[rel.Release]:
    if not summaries:
        raise ValueError("pooling needs at least one summary")
    if any(not s.release.matches(spec) for s in summaries):
        raise ValueError("the summaries' releases are not all of the declared content and "
                         f"privacy loss (epsilon {spec.epsilon}, delta {spec.delta})")
    return [s.release for s in summaries]


def pool(summaries: Sequence[WdbcSummary], spec: rel.ReleaseSpec = RELEASE_SPEC
         ) -> PooledFigures:
    """Pool sites from their releases: the noisy cells added cell by cell (unbiased), the
    figures of :func:`figures` on the pooled cells, intervals combining every site's noise
    (variances add) and sampling. ``ValueError`` for no summary or a release not of ``spec``."""
    releases = _releases(summaries, spec)
    n = sum(r.n_cases for r in releases)
    return PooledFigures(figures=_figures(releases), n_sites=len(releases), n_cases=n)


def auroc_binning_bound(summaries: Sequence[WdbcSummary],
                        spec: rel.ReleaseSpec = RELEASE_SPEC) -> float:
    """The pooled AUROC's binning error (:func:`.binned.auroc_binning_bound` on the pooled
    cells): how far counting same-bin pairs as ties can move it from the raw scores' AUROC."""
    return binned.auroc_binning_bound(_pooled_counts(_releases(summaries, spec)))
