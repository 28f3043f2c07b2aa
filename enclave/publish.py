"""Steps 6 and 7: seal the per-case results to the data owner, build the public summary, attest
both with a second token and upload them (formats in :mod:`sealbench.contract.result`).

**Small-cell rule** (issue 15): the per-case results are always sealed to the data owner, but the
public summary is published only when it meets the benchmark plug-in's rule: at least
``small_cell_minimum`` cases, and a summary the plug-in's own ``parse_summary`` accepts (which
refuses a histogram bin under its per-bin minimum). Otherwise the enclave publishes a
**withheld** summary (:func:`~sealbench.benchmarks.results.public_summary`; a
:class:`~sealbench.contract.result.WithheldSummary` says the rule, the case count and the
minimum; no aggregates). The minimum is the plug-in's, so it is fixed by the
plug-in pin (``SEALBENCH_METRICS_VERSION``) the key-release policy binds, never by an operator
input.

**Pool statistics** (issue 27): every run also seals its exact per-case results (all of them,
failed cases included) for the benchmark's aggregator: the statistics document of
:func:`~sealbench.benchmarks.pooling.seal_statistics` (salted), encrypted under a key derived
from the dataset's DEK (:func:`~sealbench.crypto.pool_statistics.encrypt_statistics`, whose AAD
binds the run id and the commitment), uploaded as ``pool.sealed``. The document's commitment
goes into the public summary (``pool_statistics``), withheld or not, so the result token binds
it; the summary holds nothing else of it. A plug-in whose results do not fit the document fails
the run (:class:`StatisticsUnsealable`), naming no value."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from sealbench.benchmarks.pooling import seal_statistics
from sealbench.benchmarks.release import OpenDPGaussian
from sealbench.benchmarks.results import public_summary
from sealbench.contract.errors import AttestationUnavailable, EnclaveError, ResultUploadError
from sealbench.contract.pool import POOL_STATISTICS_OBJECT
from sealbench.contract.result import (
    SEALED_OBJECT,
    SUMMARY_OBJECT,
    TOKEN_OBJECT,
    PerCaseResults,
    ResultSummary,
)
from sealbench.crypto.attestation import RESULT_AUDIENCE, result_nonce
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.crypto.pool_statistics import encrypt_statistics
from sealbench.crypto.sealing import result_info, seal
from sealbench.enclave.evaluation import Evaluation
from sealbench.enclave.steps import claims_of
from sealbench.enclave.timing import StepTimer
from sealbench.platforms import CloudError
from sealbench.platforms.attester import Attester
from sealbench.platforms.errors import AttesterError

__all__ = ["PublishedResult", "SealedResult", "StatisticsUnsealable", "bound_token", "publish",
           "seal_results"]

_log = logging.getLogger("sealbench.enclave")


class StatisticsUnsealable(EnclaveError):  # noqa: N818 - names the refusal
    """The plug-in's per-case results cannot be put into the pool statistics document (a
    plug-in defect). Exit 1 and code ``enclave``, as any enclave error without its own."""


@dataclass(frozen=True)
class SealedResult:
    """The sealed per-case results, the sealed pool statistics (``pool.sealed``) and the public
    summary (carrying the statistics' commitment), not yet attested."""

    evaluation: Evaluation
    summary: ResultSummary
    summary_bytes: bytes
    sealed: bytes
    sealed_digest: Sha256Digest
    statistics: bytes


def _seal_statistics(evaluation: Evaluation) -> tuple[bytes, str]:
    """``pool.sealed`` and its document's commitment. The plain document is one local of this
    call: only its ciphertext outlives it."""
    keys = evaluation.dataset.model.keys
    run = keys.destination.run
    run_id = run.spec.run_id
    try:
        document, commitment = seal_statistics(run.benchmark.ref, run_id, evaluation.results)
    except Exception as exc:  # the plug-in's results: whatever they raise, translated once
        raise StatisticsUnsealable(
            "the per-case results cannot be sealed for the benchmark's aggregator "
            f"({type(exc).__name__}; a plug-in defect)"
        ) from exc
    return encrypt_statistics(keys.dataset.dek, run_id, commitment, document), commitment


def seal_results(evaluation: Evaluation) -> SealedResult:
    """Step 6: per-case results (private) sealed with HPKE to the recipient, ``info`` binding
    run id, benchmark id and the attested image digest; summary = aggregates only."""
    dataset = evaluation.dataset
    destination = dataset.model.keys.destination
    run = destination.run
    spec = run.spec
    with run.timer.measure("seal"):
        per_case = PerCaseResults(
            run_id=spec.run_id,
            benchmark_id=spec.benchmark_id,
            dataset_id=spec.dataset.asset_id,
            model_id=spec.model.asset_id,
            metrics_version=spec.metrics_version,
            image_digest=run.image_digest,
            cases=tuple(result.to_json() for result in evaluation.results),
        )
        info = result_info(spec.run_id, spec.benchmark_id, run.image_digest)
        sealed = seal(per_case.to_bytes(), destination.recipient, info)
        statistics, commitment = _seal_statistics(evaluation)
        # the release's noise: OpenDP's Gaussian mechanism, from the OS's randomness inside the
        # TEE, fresh per run; its scale is the plug-in's (the pin), never an operator input
        aggregates, withheld = public_summary(run.benchmark, evaluation.results,
                                              OpenDPGaussian())
        summary = ResultSummary(
            run_id=spec.run_id,
            benchmark_id=spec.benchmark_id,
            metrics_version=spec.metrics_version,
            aggregates=aggregates,
            withheld=withheld,
            pool_statistics=commitment,
        )
    _log.info("step 6/7: results sealed to the recipient, statistics sealed for the aggregator")
    if withheld is not None and withheld.rule == "pooled":
        _log.info("step 6/7: no per-site release (the benchmark publishes its pooled release "
                  "only; no noise drawn)")
    elif withheld is not None:
        _log.info("step 6/7: public summary withheld (small-cell rule: %d case(s), minimum %d)",
                  withheld.n_cases, withheld.minimum)
    return SealedResult(evaluation, summary, summary.to_bytes(), sealed, sha256_digest(sealed),
                        statistics)


@dataclass(frozen=True)
class PublishedResult:
    """What was uploaded: the summary, the sealed result's digest and the result token."""

    summary: ResultSummary
    sealed_digest: Sha256Digest
    token: str


def bound_token(attester: Attester, timer: StepTimer, audience: str, nonce: str,
                what: str) -> str:
    """A token of ``audience`` binding ``nonce``, checked to carry both (the launcher's socket
    is trusted inside the TEE, but a token that binds something else is never uploaded);
    :class:`ResultUploadError` naming ``what`` otherwise. The result and the aggregator's
    pooled release both publish through it."""
    with timer.measure("attest"):
        try:
            token = attester.token(audience=audience, nonces=[nonce])
        except AttesterError as exc:
            raise ResultUploadError(f"no {what} attestation token: {exc}") from exc
    try:
        claims = claims_of(token)
    except AttestationUnavailable as exc:
        raise ResultUploadError(str(exc)) from exc
    if nonce not in claims.eat_nonce or claims.aud != audience:
        raise ResultUploadError(
            f"the {what} token does not carry the requested audience and nonce")
    return token


def publish(result: SealedResult) -> PublishedResult:
    """Step 7: a second token (audience ``sealbench-result``, ``eat_nonce`` binding summary (so
    the statistics' commitment) and sealed-result digest), then upload sealed result, pool
    statistics, summary and token, in that order (the token's presence marks a complete
    result)."""
    destination = result.evaluation.dataset.model.keys.destination
    run = destination.run
    nonce = result_nonce(json.loads(result.summary_bytes), result.sealed_digest)
    token = bound_token(run.attester, run.timer, RESULT_AUDIENCE, nonce, "result")
    with run.timer.measure("upload"):
        try:
            destination.store.put_bytes(destination.name(SEALED_OBJECT), result.sealed)
            destination.store.put_bytes(destination.name(POOL_STATISTICS_OBJECT),
                                        result.statistics)
            destination.store.put_bytes(destination.name(SUMMARY_OBJECT), result.summary_bytes)
            destination.store.put_bytes(destination.name(TOKEN_OBJECT), token.encode("ascii"))
        except CloudError as exc:
            raise ResultUploadError(f"the result could not be uploaded: {exc}") from exc
    _log.info("step 7/7: result attested and uploaded")
    return PublishedResult(result.summary, result.sealed_digest, token)
