"""Opening a run's result as its data owner (the library behind ``sealbench result open``).

:func:`open_result` takes the three objects a run uploaded (``summary.json``, ``result.sealed``,
``result.token``; names and formats in :mod:`sealbench.contract.result`) and the owner's X25519
private key, and checks, in order:

1. the token's audience is ``sealbench-result`` and its ``eat_nonce`` is
   ``result_nonce(summary, sha256(result.sealed))``: neither the summary nor the sealed result
   was altered or swapped after the enclave attested them; with ``jwks`` and ``issuer`` given,
   the token's signature and lifetime are verified too against the platform of ``issuer``
   (the registry always does that; ``sealbench result open`` does on every profile, with the
   keys of :mod:`sealbench.client.runs.attestation_keys`, and without them only when told
   ``--unverified``: :attr:`OpenedResult.signature_verified` is then False);
2. the sealed result opens with the private key under ``result_info(run_id, benchmark_id,
   image_digest)``, the image digest taken from the token;
3. the per-case results name the same run, benchmark and benchmark plug-in
   (``metrics_version``) as the summary, both validate against that plug-in, and the summary is a
   release of the per-case results: re-aggregating them without noise gives the same summary
   but for the released sums, each within six noise standard deviations of the exact one (the
   noise the enclave drew is never known, not even to the hospital); or, for a **withheld**
   summary (the enclave's small-cell rule, :func:`sealbench.benchmarks.results.public_summary`),
   exactly the same withholding (rule, case count, minimum). The owner still gets every per-case
   result and, in :attr:`OpenedResult.aggregates`, their aggregate computed locally (never
   submitted: the registry receives the withheld summary the token binds).

Any failure raises :class:`ResultVerificationError` naming the check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sealbench.benchmarks.interface import (
    Benchmark,
    BenchmarkError,
    CaseResult,
    PublicSummary,
    publishes_site_release,
)
from sealbench.benchmarks.release import LocalExact, Release, ReleaseError
from sealbench.benchmarks.results import case_results, summary_aggregates
from sealbench.client.plugins import installed
from sealbench.contract.errors import AttestationUnavailable
from sealbench.contract.result import (
    MAX_DOCUMENT_BYTES,
    MAX_TOKEN_BYTES,
    SEALED_OBJECT,
    SUMMARY_OBJECT,
    TOKEN_OBJECT,
    PerCaseResults,
    ResultFormatError,
    ResultSummary,
)
from sealbench.crypto.attestation import RESULT_AUDIENCE, Jwks, result_nonce
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import open_sealed, result_info
from sealbench.enclave.steps import claims_of
from sealbench.platforms import BlobStore, CloudError, join_name
from sealbench.platforms.platform import AttestedWorkload, UnknownPlatformError, platform_for_issuer

__all__ = [
    "UNVERIFIED",
    "OpenedResult",
    "ResultObjects",
    "ResultVerificationError",
    "download_result",
    "open_result",
]


#: The marker every rendering of a result opened without checking its signature carries.
UNVERIFIED: Final = "UNVERIFIED: signature not checked"


class ResultVerificationError(Exception):
    """A result does not verify or open; the message names the failed check."""


@dataclass(frozen=True)
class ResultObjects:
    """The three uploaded objects of a successful run, as bytes."""

    summary: bytes
    sealed: bytes
    token: str


@dataclass(frozen=True)
class OpenedResult:
    """A verified, opened result: what the owner reviews and what it submits to the registry
    (``summary_json``, ``sealed_result_sha256``, ``token``)."""

    summary: ResultSummary
    summary_json: dict[str, object]
    per_case: PerCaseResults
    sealed_result_sha256: Sha256Digest
    token: str
    claims: AttestedWorkload
    #: The plug-in the run pinned, and the summary and per-case results it validated (for a
    #: withheld summary, ``aggregates`` is the aggregate of the per-case results, computed here).
    benchmark: Benchmark
    aggregates: PublicSummary
    cases: tuple[CaseResult, ...]
    #: Whether the token's signature was checked against the attestation verifier's keys (False:
    #: opened without them, on the user's explicit ``--unverified``; :data:`UNVERIFIED`).
    signature_verified: bool = False

    @property
    def withheld(self) -> bool:
        """Whether the enclave withheld the public summary (small-cell rule)."""
        return self.summary.withheld is not None


def download_result(store: BlobStore, prefix: str) -> ResultObjects:
    """Read ``summary.json``, ``result.sealed`` and ``result.token`` under ``prefix``."""
    try:
        summary = store.get_bytes(join_name(prefix, SUMMARY_OBJECT), MAX_DOCUMENT_BYTES)
        sealed = store.get_bytes(join_name(prefix, SEALED_OBJECT), MAX_DOCUMENT_BYTES)
        token = store.get_bytes(join_name(prefix, TOKEN_OBJECT), MAX_TOKEN_BYTES)
    except CloudError as exc:
        raise ResultVerificationError(f"the result is incomplete or unreadable: {exc}") from exc
    try:
        return ResultObjects(summary, sealed, token.decode("ascii").strip())
    except UnicodeDecodeError as exc:
        raise ResultVerificationError("the result token is not ASCII") from exc


def _claims(
    token: str, jwks: Jwks | None, issuer: str | None, now: float | None
) -> AttestedWorkload:
    if jwks is None:
        try:
            return claims_of(token)
        except AttestationUnavailable as exc:
            raise ResultVerificationError(f"the result token cannot be read: {exc}") from exc
    if issuer is None or now is None:
        raise ValueError("verifying the token's signature needs issuer and now")
    try:
        platform = platform_for_issuer(issuer)
    except UnknownPlatformError as exc:
        raise ResultVerificationError(f"the result token cannot be verified: {exc}") from exc
    try:
        return platform.verify(token, jwks, issuer=issuer, audience=RESULT_AUDIENCE, now=now)
    except CryptoError as exc:
        raise ResultVerificationError(f"the result token does not verify: {exc}") from exc


def open_result(
    objects: ResultObjects,
    private_key: X25519PrivateKey,
    *,
    jwks: Jwks | None = None,
    issuer: str | None = None,
    now: float | None = None,
) -> OpenedResult:
    """Verify and open a result (checks in the module docstring)."""
    try:
        summary = ResultSummary.from_bytes(objects.summary)
        summary_json = json.loads(objects.summary)
    except (ResultFormatError, ValueError) as exc:
        raise ResultVerificationError(f"summary.json is not a result summary: {exc}") from exc
    sealed_digest = sha256_digest(objects.sealed)
    claims = _claims(objects.token, jwks, issuer, now)
    if claims.aud != RESULT_AUDIENCE:
        raise ResultVerificationError(
            f"the token's audience is {claims.aud[:80]!r}, not {RESULT_AUDIENCE!r}"
        )
    nonce = result_nonce(summary_json, sealed_digest)
    if nonce not in claims.eat_nonce:
        raise ResultVerificationError(
            "the token's nonce does not bind this summary and sealed result (altered or swapped)"
        )
    image_digest = claims.image_digest
    try:
        info = result_info(summary.run_id, summary.benchmark_id, image_digest)
        plaintext = open_sealed(objects.sealed, private_key, info)
        per_case = PerCaseResults.from_bytes(plaintext)
    except (CryptoError, ResultFormatError, ValueError) as exc:
        raise ResultVerificationError(f"the sealed result does not open: {exc}") from exc
    benchmark, aggregates, cases = _check_consistent(summary, per_case)
    return OpenedResult(summary, summary_json, per_case, sealed_digest, objects.token, claims,
                        benchmark, aggregates, cases, signature_verified=jwks is not None)


def _check_consistent(
    summary: ResultSummary, per_case: PerCaseResults
) -> tuple[Benchmark, PublicSummary, tuple[CaseResult, ...]]:
    for field in ("run_id", "benchmark_id", "metrics_version"):
        if getattr(summary, field) != getattr(per_case, field):
            raise ResultVerificationError(f"summary and sealed result differ in {field}")
    try:
        benchmark = installed(per_case.metrics_version)
        cases = case_results(per_case, benchmark)
        if not cases:
            raise ResultVerificationError("the sealed result holds no case")
        # the hospital's own exact figures: the release the enclave made, without its noise
        local = benchmark.summarise(cases, LocalExact())
        minimum = benchmark.small_cell_minimum
        if summary.withheld is not None:
            held = summary.withheld
            pooled_only = not publishes_site_release(benchmark)
            if (held.n_cases, held.minimum) != (len(cases), minimum) or (
                    (held.rule == "pooled") != pooled_only) or (
                    held.rule != "pooled" and (held.rule == "cases") != (len(cases) < minimum)):
                raise ResultVerificationError(
                    "the summary is withheld, but not as the small-cell rule withholds the "
                    "sealed results")
            return benchmark, local, cases
        aggregates = summary_aggregates(summary, benchmark)
    except (BenchmarkError, ResultFormatError) as exc:
        raise ResultVerificationError(str(exc)) from exc
    if len(cases) < minimum or not _release_of(aggregates.to_json(), local.to_json()):
        raise ResultVerificationError("the summary is not a release of the sealed results")
    return benchmark, aggregates, cases


#: How far (in noise standard deviations) a released sum may lie from the exact one before
#: ``result open`` calls the release foreign to the sealed results (about 2e-9 per sum by chance).
_NOISE_TOLERANCE = 6.0


def _close(noisy: float, exact: float, sd: float) -> bool:
    return abs(noisy - exact) <= (_NOISE_TOLERANCE * sd if sd > 0 else 1e-9 * max(1.0, abs(exact)))


def _release_of(published: dict[str, Any], exact: dict[str, Any]) -> bool:
    """Whether ``published`` is ``exact`` (the same summary, released without noise) up to the
    release's noise: every member equal but the release, whose content (keys, bounds, case
    count) is the same and whose every sum lies within :data:`_NOISE_TOLERANCE` of its noise
    standard deviations from the exact one. A summary without a release (a plug-in of before
    releases) must equal the recomputed one."""
    pub, ex = dict(published), dict(exact)
    pub_rel, ex_rel = pub.pop("release", None), ex.pop("release", None)
    if pub != ex or (pub_rel is None) != (ex_rel is None):
        return False
    if pub_rel is None or ex_rel is None:
        return True
    try:
        noisy, truth = Release.from_json(pub_rel), Release.from_json(ex_rel)
    except ReleaseError:
        return False
    if noisy.n_cases != truth.n_cases or [(c.key, c.low, c.high) for c in noisy.columns] != [
            (c.key, c.low, c.high) for c in truth.columns] or [
            (c.key, c.keys) for c in noisy.categories] != [
            (c.key, c.keys) for c in truth.categories]:
        return False
    pairs = [(a.sum, b.sum, a.sd) for a, b in zip(noisy.columns, truth.columns, strict=True)]
    pairs += [(x, y, a.sd) for a, b in zip(noisy.categories, truth.categories, strict=True)
              for x, y in zip(a.counts, b.counts, strict=True)]
    return all(_close(x, y, sd) for x, y, sd in pairs)
