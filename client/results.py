"""Opening a run's result as its data owner (the library behind ``sealbench result open``).

:func:`open_result` takes the three objects a run uploaded (``summary.json``, ``result.sealed``,
``result.token``; names and formats in :mod:`sealbench.enclave.result`) and the owner's X25519
private key, and checks, in order:

1. the token's audience is ``sealbench-result`` and its ``eat_nonce`` is
   ``result_nonce(summary, sha256(result.sealed))``: neither the summary nor the sealed result
   was altered or swapped after the enclave attested them (with ``jwks`` and ``issuer`` given,
   the token's signature and lifetime are verified too; the registry always does that);
2. the sealed result opens with the private key under ``result_info(run_id, benchmark_id,
   image_digest)``, the image digest taken from the token;
3. the per-case results name the same run, benchmark and benchmark plug-in
   (``metrics_version``) as the summary, both validate against that plug-in, and re-aggregating
   the per-case results with it gives exactly the summary's aggregates; or, for a **withheld**
   summary (the enclave's small-cell rule, :func:`sealbench.enclave.result.public_summary`),
   exactly the same withholding (rule, case count, minimum). The owner still gets every per-case
   result and, in :attr:`OpenedResult.aggregates`, their aggregate computed locally (never
   submitted: the registry receives the withheld summary the token binds).

Any failure raises :class:`ResultVerificationError` naming the check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sealbench.benchmarks.interface import Benchmark, BenchmarkError, CaseResult, PublicSummary
from sealbench.benchmarks.registry import load as load_benchmark
from sealbench.cloud import BlobStore, CloudError, join_name
from sealbench.cloud.platform import AttestedWorkload, UnknownPlatformError, platform_for_issuer
from sealbench.crypto.attestation import RESULT_AUDIENCE, Jwks, result_nonce
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import open_sealed, result_info
from sealbench.enclave.errors import AttestationUnavailable
from sealbench.enclave.result import (
    MAX_DOCUMENT_BYTES,
    MAX_TOKEN_BYTES,
    SEALED_OBJECT,
    SUMMARY_OBJECT,
    TOKEN_OBJECT,
    PerCaseResults,
    ResultFormatError,
    ResultSummary,
    public_summary,
)
from sealbench.enclave.steps import claims_of

__all__ = [
    "OpenedResult",
    "ResultObjects",
    "ResultVerificationError",
    "download_result",
    "open_result",
]


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
                        benchmark, aggregates, cases)


def _check_consistent(
    summary: ResultSummary, per_case: PerCaseResults
) -> tuple[Benchmark, PublicSummary, tuple[CaseResult, ...]]:
    for field in ("run_id", "benchmark_id", "metrics_version"):
        if getattr(summary, field) != getattr(per_case, field):
            raise ResultVerificationError(f"summary and sealed result differ in {field}")
    try:
        benchmark = load_benchmark(per_case.metrics_version)
        cases = per_case.results(benchmark)
        if not cases:
            raise ResultVerificationError("the sealed result holds no case")
        published, withheld = public_summary(benchmark, cases)
        if summary.withheld is not None:
            if withheld != summary.withheld:
                raise ResultVerificationError(
                    "the summary is withheld, but not as the small-cell rule withholds the "
                    "sealed results")
            return benchmark, benchmark.summarise(cases), cases
        aggregates = summary.summary(benchmark)
    except (BenchmarkError, ResultFormatError) as exc:
        raise ResultVerificationError(str(exc)) from exc
    if withheld is not None or published != aggregates.to_json():
        raise ResultVerificationError("the summary is not the aggregate of the sealed results")
    return benchmark, aggregates, cases
