"""What a run leaves at its result destination: object names and versioned wire formats.

Objects, under the prefix of ``SEALBENCH_RESULT_URI`` (``gs://bucket/prefix/`` or
``file:///dir``)::

    write-check.json   WriteCheck, written first (step 1) so a permission problem fails in
                       seconds; left in place (a write-only ``objectCreator`` grant cannot
                       delete, and its presence tells the operator the run got that far)
    result.sealed      the sealed per-case results: a sealbench.crypto.sealing envelope of the
                       canonical JSON of PerCaseResults, sealed to the recipient key with
                       info = result_info(run_id, benchmark_id, image_digest)
    summary.json       canonical JSON of ResultSummary (public: aggregates only, in the schema of
                       the benchmark plug-in the run pinned, ``metrics_version``)
    result.token       the result attestation token (compact JWS, ASCII): audience
                       "sealbench-result", eat_nonce = result_nonce(summary, sha256(result.sealed))
    failure.json       FailureRecord, written instead of the three above when a run fails
    failure.token      the failure attestation token (compact JWS, ASCII), only when the run
                       failed after it attested: audience "sealbench-failure", eat_nonce =
                       failure_nonce(the exact bytes of failure.json); written before
                       failure.json, so a record's presence means its token is there if any

The three result objects are uploaded only after everything succeeded, sealed result first and
token last, so the token's presence marks a complete result. Every document is canonical JSON
(sealbench.crypto.canonical_json) of the model below; readers parse with ``from_bytes``, which
caps sizes and refuses unknown members and versions. The benchmark-specific parts (the
summary's ``aggregates``, each per-case entry) are JSON objects in the schema of the plug-in
``metrics_version`` names (``<name>/<version>``);
:func:`sealbench.benchmarks.results.summary_aggregates` and
:func:`~sealbench.benchmarks.results.case_results` validate them with that plug-in (this module
knows no plug-in).

What the data owner submits to the registry is ``summary.json`` as a JSON object, the SHA-256
of ``result.sealed`` and ``result.token`` (server.schemas.ResultCreate).
"""

from __future__ import annotations

from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sealbench.contract.pin import Pin
from sealbench.crypto.canonical import canonical_json

__all__ = [
    "FAILURE_OBJECT",
    "FAILURE_TOKEN_OBJECT",
    "SEALED_OBJECT",
    "SUMMARY_OBJECT",
    "TOKEN_OBJECT",
    "WRITE_CHECK_OBJECT",
    "FailureRecord",
    "PerCaseResults",
    "ResultFormatError",
    "ResultSummary",
    "WithheldSummary",
    "WriteCheck",
]

WRITE_CHECK_OBJECT: Final = "write-check.json"
SEALED_OBJECT: Final = "result.sealed"
SUMMARY_OBJECT: Final = "summary.json"
TOKEN_OBJECT: Final = "result.token"  # noqa: S105 - an object name
FAILURE_OBJECT: Final = "failure.json"
FAILURE_TOKEN_OBJECT: Final = "failure.token"  # noqa: S105 - an object name

#: Largest result document a reader accepts.
MAX_DOCUMENT_BYTES: Final = 64 << 20
#: Largest result token a reader accepts.
MAX_TOKEN_BYTES: Final = 64 * 1024

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class ResultFormatError(ValueError):
    """A result document is malformed, too large, or of an unknown format or version."""


class _Document(BaseModel):
    model_config = _FROZEN

    def to_bytes(self) -> bytes:
        """Canonical JSON of the document."""
        return canonical_json(self.model_dump(mode="json"))

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        if len(data) > MAX_DOCUMENT_BYTES:
            raise ResultFormatError(f"{cls.__name__} of {len(data)} bytes exceeds the cap")
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            raise ResultFormatError(
                f"malformed {cls.__name__}: {exc.error_count()} errors"
            ) from exc


class WriteCheck(_Document):
    """Proof that the destination accepted a write (no content beyond the run id)."""

    format: Literal["sealbench/write-check"] = "sealbench/write-check"
    version: Literal[1] = 1
    run_id: str = Field(pattern=_ID)


class WithheldSummary(BaseModel):
    """Why the enclave published no aggregates (issue 15's small-cell rule), in counts only.

    ``rule`` is ``"cases"`` when the run had fewer cases than the plug-in's
    ``small_cell_minimum`` (``n_cases`` and ``minimum`` say how many), ``"bins"`` when the
    plug-in's own summary broke its per-bin minimum (its ``parse_summary`` refused it: a plug-in
    defect the enclave will not publish), or ``"pooled"`` when the benchmark's pin ends in
    ``-pool`` (issue 41): its sites publish no release of their own, only the pooled release
    drawn inside the aggregator (``n_cases``: the run's cases; no noise was drawn)."""

    model_config = _FROZEN
    rule: Literal["cases", "bins", "pooled"]
    n_cases: int = Field(ge=0)
    minimum: int = Field(ge=1)


class ResultSummary(_Document):
    """The public summary (version 1): run coordinates and the aggregates over cases only (the
    plug-in's summary, with the count of failed cases); never a per-case value.

    A **withheld** summary (``withheld`` set, ``aggregates`` empty) is what the enclave publishes
    when the plug-in's summary would break the small-cell rule: the per-case results are still
    sealed to the data owner, the registry files the result as withheld and never ranks it. The
    member is left out of the canonical JSON when it is None, so published summaries read as
    before."""

    format: Literal["sealbench/result-summary"] = "sealbench/result-summary"
    version: Literal[1] = 1
    run_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=_ID)
    metrics_version: Pin
    aggregates: dict[str, Any]
    withheld: WithheldSummary | None = None
    #: The commitment (``sha256:`` of its bytes) to the site's exact statistics sealed for the
    #: benchmark's aggregator (``pool.sealed``, :mod:`sealbench.contract.pool`); None (left out
    #: of the canonical JSON) when the run sealed none. The result token binds it with the rest.
    pool_statistics: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")

    def to_bytes(self) -> bytes:
        doc = self.model_dump(mode="json")
        if doc["withheld"] is None:
            del doc["withheld"]
        elif doc["aggregates"]:
            raise ResultFormatError("a withheld summary carries no aggregates")
        if doc["pool_statistics"] is None:
            del doc["pool_statistics"]
        return canonical_json(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        doc = super().from_bytes(data)
        if doc.withheld is not None and doc.aggregates:
            raise ResultFormatError("malformed ResultSummary: a withheld summary carries "
                                    "aggregates")
        return doc


class PerCaseResults(_Document):
    """The private per-case results (version 1), sealed to the data owner. ``cases`` is sorted
    by case id; each is the plug-in's per-case result (a failed case flagged, with its
    reason)."""

    format: Literal["sealbench/per-case-results"] = "sealbench/per-case-results"
    version: Literal[1] = 1
    run_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=_ID)
    dataset_id: str = Field(pattern=_ID)
    model_id: str = Field(pattern=_ID)
    metrics_version: Pin
    image_digest: str
    cases: tuple[dict[str, Any], ...]


class FailureRecord(_Document):
    """Why a run failed (version 1): the step, the error class and its safe one-line reason.
    ``run_id`` is None when the run spec itself could not be read. A run that failed after it
    attested signs the record's exact bytes with a token (``failure.token``, see the module
    docstring), so the registry can tell the enclave's account from a hospital's claim; the
    record therefore holds nothing secret and no case data (the error messages' rule,
    :mod:`sealbench.contract.errors`)."""

    format: Literal["sealbench/run-failure"] = "sealbench/run-failure"
    version: Literal[1] = 1
    run_id: str | None
    step: str
    error: str
    reason: str = Field(max_length=2000)
    exit_code: int
