"""Pooling exact statistics under one release: the computation an attested aggregator runs
(issue 27, DESIGN "Releases").

Differential privacy per site has a floor: a hospital with 50 cases cannot publish a mean that
is both private and precise, and pooling sites' private releases adds every site's noise. When
the sites' exact per-case results reach one place nobody can look into (an aggregator workload
inside a TEE, released each site's key only for its approved image), the noise can be drawn
**once**, on the sums over all cases; its standard deviation on a mean then shrinks with the
total case count instead of with each site's.

This module is that computation and the documents it reads:

- :class:`SiteStatistics` is what a site's enclave seals for the aggregator: the pin, the run
  and every case's exact result (the plug-in's per-case result documents: for WDBC each case's
  label and score, so a pooled AUROC is exact; for BraTS each case's region scores). Its
  canonical JSON's SHA-256 is the site's **commitment**. The document also holds 32 random
  bytes (``salt``, fresh per document): the commitment is public (the attested summary carries
  it), and without the salt anyone who can guess the whole document (an all-failed run is
  case ids and fixed reasons; a model owner scoring a public dataset can reproduce its
  scores) could confirm the guess against it. :func:`open_statistics` refuses a
  document whose digest is not the commitment it is asked for (a stale or substituted object)
  or whose results the plug-in does not parse.
- :func:`pool_exact` pools the sites' results into one public summary: the plug-in's own
  pooled release when it declares one (:class:`~sealbench.benchmarks.interface.PoolsExactly`:
  WDBC adds the Mann-Whitney pair count, so its AUROC is read from raw scores, not bins), else
  its ordinary summary of all the cases together (a release over their union, under the pin's
  release spec). Either way the noise is drawn once, from the given source: OpenDP in an
  aggregator, :class:`~sealbench.benchmarks.release.LocalExact` only where a test switches it
  off.

The unit of privacy stays one case of one dataset: the pooled release's sensitivity to
replacing one case is that of a site's (the release specs state it), so one pooled release
costs every included dataset the pin's rho, once.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sealbench.crypto.canonical import canonical_json

from . import interface as api
from .release import NoiseSource, PrivacyLoss, ReleaseSpec

__all__ = [
    "MAX_STATISTICS_BYTES",
    "SALT_BYTES",
    "STATISTICS_FORMAT",
    "STATISTICS_VERSION",
    "PoolingError",
    "SiteStatistics",
    "commitment_of",
    "open_statistics",
    "parse_pooled_summary",
    "pool_exact",
    "pooled_release_spec",
    "seal_statistics",
    "summary_loss",
]

STATISTICS_FORMAT: Final = "sealbench/pool-statistics"
STATISTICS_VERSION: Final = 1
#: The largest statistics document an aggregator reads (a 50,000-case site of 2025 BraTS results
#: is about 40 MiB; anything larger is refused before parsing).
MAX_STATISTICS_BYTES: Final = 256 << 20
#: The salt's size in bytes (hex in the document).
SALT_BYTES: Final = 32
_SALT = re.compile(rf"^[0-9a-f]{{{2 * SALT_BYTES}}}$")


def _fresh_salt() -> str:
    return secrets.token_hex(SALT_BYTES)


class PoolingError(ValueError):
    """A site's statistics cannot be pooled: wrong commitment, another pin, unparsable, empty."""


@dataclass(frozen=True)
class SiteStatistics:
    """One site's exact per-case results for the aggregator: the pin they were scored under,
    the run that produced them, and the results (failures included: they are penalised in the
    pooled release as in the site's own), and the document's salt (module docstring; fresh
    unless given)."""

    pin: api.BenchmarkPin
    run_id: str
    results: tuple[api.CaseResult, ...]
    salt: str = field(default_factory=_fresh_salt, repr=False)

    def to_canonical_json(self) -> bytes:
        return canonical_json({
            "format": STATISTICS_FORMAT,
            "version": STATISTICS_VERSION,
            "pin": str(self.pin),
            "run_id": self.run_id,
            "salt": self.salt,
            "cases": [r.to_json() for r in self.results],
        })


def commitment_of(document: bytes) -> str:
    """The commitment to a statistics document: ``sha256:`` and its hex digest."""
    return "sha256:" + hashlib.sha256(document).hexdigest()


def seal_statistics(pin: api.BenchmarkPin, run_id: str,
                    results: Sequence[api.CaseResult]) -> tuple[bytes, str]:
    """The document a site's enclave seals for the aggregator, and its commitment (what the
    site's attested result carries and the registry stores), under a fresh salt."""
    if not results:
        raise PoolingError("a site with no case results has nothing to pool")
    document = SiteStatistics(pin, run_id, tuple(results)).to_canonical_json()
    return document, commitment_of(document)


def open_statistics(plugin: api.Benchmark, document: bytes, commitment: str, *,
                    run_id: str) -> SiteStatistics:
    """A site's statistics, checked against the ``commitment`` the registry holds for
    ``run_id`` and parsed by ``plugin`` (whose pin they must name); :class:`PoolingError`
    otherwise, naming the run and never a case's value."""
    if len(document) > MAX_STATISTICS_BYTES:
        raise PoolingError(f"run {run_id}: the statistics are larger than "
                           f"{MAX_STATISTICS_BYTES >> 20} MiB")
    if commitment_of(document) != commitment:
        raise PoolingError(f"run {run_id}: the statistics do not match the site's commitment "
                           "(stale or substituted)")
    try:
        doc = json.loads(document)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PoolingError(f"run {run_id}: the statistics are not JSON") from exc
    if not isinstance(doc, dict) or (doc.get("format"), doc.get("version")) != (
            STATISTICS_FORMAT, STATISTICS_VERSION):
        raise PoolingError(f"run {run_id}: not a {STATISTICS_FORMAT} version "
                           f"{STATISTICS_VERSION} document")
    if doc.get("run_id") != run_id:
        raise PoolingError(f"run {run_id}: the statistics are those of another run")
    if doc.get("pin") != str(plugin.ref):
        raise PoolingError(f"run {run_id}: statistics scored under {doc.get('pin')!r}, not "
                           f"{plugin.ref}")
    salt = doc.get("salt")
    if not isinstance(salt, str) or not _SALT.match(salt):
        raise PoolingError(f"run {run_id}: the statistics carry no {SALT_BYTES}-byte salt")
    cases = doc.get("cases")
    if not isinstance(cases, list) or not cases:
        raise PoolingError(f"run {run_id}: the statistics hold no cases")
    try:
        results = tuple(plugin.parse_case_result(case) for case in cases)
    except (api.SummaryError, TypeError, ValueError) as exc:
        raise PoolingError(f"run {run_id}: a case result does not parse under "
                           f"{plugin.ref}") from exc
    return SiteStatistics(plugin.ref, run_id, results, salt)


def pool_exact(plugin: api.Benchmark, sites: Sequence[SiteStatistics],
               noise: NoiseSource) -> api.PublicSummary:
    """The pooled public summary of every site's cases: one release, noise drawn once from
    ``noise`` (module docstring). :class:`PoolingError` for no site, a run twice, or a site of
    another pin."""
    if not sites:
        raise PoolingError("pooling needs at least one site")
    runs = [s.run_id for s in sites]
    if len(set(runs)) != len(runs):
        raise PoolingError("a run appears twice among the sites")
    if any(s.pin != plugin.ref for s in sites):
        raise PoolingError(f"every site must have been scored under {plugin.ref}")
    results = [r for s in sites for r in s.results]
    if isinstance(plugin, api.PoolsExactly):
        return plugin.pooled_summary(results, noise)
    return plugin.summarise(results, noise)


def pooled_release_spec(plugin: api.Benchmark) -> ReleaseSpec | None:
    """The release a pooled summary of ``plugin`` carries: its pooled release's where it
    declares one, else its site release's (None for a plug-in without releases)."""
    if isinstance(plugin, api.PoolsExactly):
        return plugin.pooled_release_spec
    spec: ReleaseSpec | None = getattr(plugin, "release_spec", None)
    return spec


def summary_loss(summary: api.PublicSummary) -> PrivacyLoss | None:
    """What ``summary`` cost, all its releases together: those it lists in ``releases`` where a
    plug-in splits one release between a headline and a breakdown (WDBC's pooled summary: its
    AUROC by Laplace, the rest Gaussian), else its one release's (None for a summary without
    releases). What a pooled release must have been authorized to debit, exactly."""
    releases = getattr(summary, "releases", None)
    if releases is None:
        one = api.release_of(summary)
        return None if one is None else one.loss
    total = PrivacyLoss()
    for part in releases:
        total = total + part.loss
    return total


def parse_pooled_summary(plugin: api.Benchmark, doc: Any) -> api.PublicSummary:
    """A pooled summary document validated by ``plugin``: its pooled release's schema where it
    declares one, else its ordinary summary's; :class:`~sealbench.benchmarks.interface.
    SummaryError`."""
    if isinstance(plugin, api.PoolsExactly):
        return plugin.parse_pooled_summary(doc)
    return plugin.parse_summary(doc)
