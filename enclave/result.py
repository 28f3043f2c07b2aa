"""What a run leaves at its result destination: object names and versioned wire formats.

Objects, under the prefix of ``SEALBENCH_RESULT_URI`` (``gs://bucket/prefix/`` or
``file:///dir``)::

    write-check.json   WriteCheck, written first (step 1) so a permission problem fails in
                       seconds; left in place (a write-only ``objectCreator`` grant cannot
                       delete, and its presence tells the operator the run got that far)
    result.sealed      the sealed per-case results: a sealbench.crypto.sealing envelope of the
                       canonical JSON of PerCaseResults, sealed to the recipient key with
                       info = result_info(run_id, benchmark_id, image_digest)
    summary.json       canonical JSON of ResultSummary (public: aggregates only)
    result.token       the result attestation token (compact JWS, ASCII): audience
                       "sealbench-result", eat_nonce = result_nonce(summary, sha256(result.sealed))
    failure.json       FailureRecord, written instead of the three above when a run fails

The three result objects are uploaded only after everything succeeded, sealed result first and
token last, so the token's presence marks a complete result. Every document is canonical JSON
(sealbench.crypto.canonical_json) of the model below; readers parse with ``from_bytes``, which
caps sizes and refuses unknown members and versions.

What the data owner submits to the registry is ``summary.json`` as a JSON object, the SHA-256
of ``result.sealed`` and ``result.token`` (server.schemas.ResultCreate).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sealbench.benchmarks.brats import CaseFailure, CaseScores, PublicSummary
from sealbench.crypto.canonical import canonical_json

__all__ = [
    "FAILURE_OBJECT",
    "SEALED_OBJECT",
    "SUMMARY_OBJECT",
    "TOKEN_OBJECT",
    "WRITE_CHECK_OBJECT",
    "FailureRecord",
    "PerCaseResults",
    "ResultFormatError",
    "ResultSummary",
    "WriteCheck",
]

WRITE_CHECK_OBJECT: Final = "write-check.json"
SEALED_OBJECT: Final = "result.sealed"
SUMMARY_OBJECT: Final = "summary.json"
TOKEN_OBJECT: Final = "result.token"  # noqa: S105 - an object name
FAILURE_OBJECT: Final = "failure.json"

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


class ResultSummary(_Document):
    """The public summary (version 1): run coordinates and aggregates over cases only, with the
    count of failed cases (``aggregates.n_failed``); never a per-case value."""

    format: Literal["sealbench/result-summary"] = "sealbench/result-summary"
    version: Literal[1] = 1
    run_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=_ID)
    metrics_version: str
    aggregates: PublicSummary


CaseEntry = Annotated[CaseScores | CaseFailure, Field(discriminator="kind")]


class PerCaseResults(_Document):
    """The private per-case results (version 1), sealed to the data owner. ``cases`` is sorted
    by case id; a failed case is a flagged :class:`CaseFailure` with its reason."""

    format: Literal["sealbench/per-case-results"] = "sealbench/per-case-results"
    version: Literal[1] = 1
    run_id: str = Field(pattern=_ID)
    benchmark_id: str = Field(pattern=_ID)
    dataset_id: str = Field(pattern=_ID)
    model_id: str = Field(pattern=_ID)
    metrics_version: str
    image_digest: str
    cases: tuple[CaseEntry, ...]


class FailureRecord(_Document):
    """Why a run failed (version 1): the step, the error class and its safe one-line reason.
    ``run_id`` is None when the run spec itself could not be read."""

    format: Literal["sealbench/run-failure"] = "sealbench/run-failure"
    version: Literal[1] = 1
    run_id: str | None
    step: str
    error: str
    reason: str = Field(max_length=2000)
    exit_code: int
