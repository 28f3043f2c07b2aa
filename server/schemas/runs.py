"""Run status wire types: what a data owner's client reports about each confidential run, what
readers get back, and the benchmark's progress matrix.

A report carries the run's state, a typed failure class or interrupt reason, the ONNX Runtime
execution provider the model ran on (one of :data:`ExecutionProvider`) and the image digest,
never free text: no case id, metric, key or token can ride along. Nothing in it depends on the
cases beyond the release (issue 40): **no step timings** (how long a model took is a channel
from the cases to whoever reads the run, outside any release and any budget: a model that
spins on one patient's record told its owner where that patient is treated), so a report that
carries ``step_seconds`` is refused (422) and :class:`RunPublic` has none; the hospital keeps
its timings in its own run records. A run's times are stored and shown **to the day**
(:func:`day_of`). The one
exception is a failed run's **failure record and its attestation token**, exactly as the enclave
wrote them (``failure.json``, ``failure.token``): the registry verifies the token (audience
``sealbench-failure``, ``eat_nonce`` binding the record, the benchmark's image and the run's
dataset and model) and stores only whether it verified and the record's error class, mapped to
a :data:`FailureClass`; the record's text is never stored. The client numbers its reports per
run (``seq``); the registry keeps the highest, so reports that arrive late or twice change
nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from sealbench.crypto.canonical import canonical_json
from sealbench.server.schemas.common import Digest, Id, JsonObject, WireModel

__all__ = [
    "EXECUTION_PROVIDERS",
    "FAILURE_CLASSES",
    "INTERRUPT_REASONS",
    "MAX_BATCH",
    "MAX_FAILURE_RECORD_BYTES",
    "MAX_FAILURE_TOKEN_CHARS",
    "TERMINAL_STATES",
    "BenchmarkProgress",
    "ExecutionProvider",
    "FailureClass",
    "InterruptReason",
    "ProgressCell",
    "ProgressStatus",
    "RunBatchPublic",
    "RunKey",
    "RunPublic",
    "RunReason",
    "RunReport",
    "RunReportBatch",
    "RunReportItem",
    "RunState",
    "day_of",
]

RunState = Literal["planned", "launching", "running", "succeeded", "failed", "interrupted"]
TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "interrupted"})

#: Why a run failed, by what failed: the enclave's exit codes, then the launcher's own failures.
FailureClass = Literal[
    "key_release_denied",
    "attestation_unavailable",
    "integrity",
    "asset_rejected",
    "spec",
    "destination",
    "storage",
    "result_upload",
    "enclave",
    "killed",
    "timeout",
    "quota",
    "capacity",
    "permission",
    "not_found",
    "image_reference",
    "vm_stopped",
    "launch",
]
#: Why a run was interrupted: the operator stopped it (Ctrl-C, SIGTERM), or the process that
#: owned it died and a later one found its record.
InterruptReason = Literal["stopped", "owner_died"]
RunReason = FailureClass | InterruptReason
FAILURE_CLASSES: frozenset[str] = frozenset(FailureClass.__args__)  # type: ignore[attr-defined]
INTERRUPT_REASONS: frozenset[str] = frozenset(InterruptReason.__args__)  # type: ignore[attr-defined]

#: The ONNX Runtime execution providers a run may report (the enclave's
#: ``sealbench.benchmarks.interface.ExecutionProvider``): anything else is refused.
ExecutionProvider = Literal[
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "ROCMExecutionProvider",
]
EXECUTION_PROVIDERS: frozenset[str] = frozenset(ExecutionProvider.__args__)  # type: ignore[attr-defined]

#: A client's run id (``run-20261203T070000-1a2b3c4d``), unique per reporting user.
RunKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]


def day_of(moment: datetime) -> datetime:
    """``moment`` (UTC) cut to its day: the precision of every time the registry keeps about a
    run, so that when a run started, ran or ended tells no one more than its date."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

#: Largest failure record a report may carry, as canonical JSON (the enclave's are under 3 KiB:
#: its reason is at most 2,000 characters).
MAX_FAILURE_RECORD_BYTES = 8 * 1024
#: Largest failure token a report may carry (real ones are 1-3 KiB).
MAX_FAILURE_TOKEN_CHARS = 16 * 1024


class RunReport(WireModel):
    """The whole current state of one run (``PUT /runs/{run_id}``); ``seq`` grows with every
    report of the run. ``reason`` is a :data:`FailureClass` when failed, an
    :data:`InterruptReason` when interrupted, absent otherwise; ``result_id`` links the
    submitted result of a succeeded run."""

    benchmark_id: Id
    dataset_id: Id
    model_id: Id
    state: RunState
    seq: int = Field(ge=0, le=2**31 - 1)
    reason: RunReason | None = None
    image_digest: Digest
    #: The launcher backend that ran it (``sealbench run --tee``): a shipped one or one an
    #: installed platform brings, so a name, not a list (the registry runs no launcher).
    tee: str = Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")
    attempts: int = Field(default=0, ge=0, le=100)
    #: Refused unless empty: step timings depend on the cases (a model can spin on one case to
    #: signal it), so the registry takes none. Kept only so that a client of before issue 40
    #: gets this explanation rather than "extra field".
    step_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="refused unless empty: the registry takes no step timings (issue 40)",
        json_schema_extra={"maxProperties": 0})
    #: Which execution provider ran the model, as the enclave logged it (absent: not known).
    execution_provider: ExecutionProvider | None = None
    result_id: Id | None = None
    #: A failed run's ``failure.json`` as the enclave wrote it (a JSON object; the registry
    #: checks its token against its canonical JSON), with ``failure_token``, the enclave's
    #: attestation of it (``failure.token``). Both or neither; only on a failed run.
    failure_record: JsonObject | None = None
    failure_token: str | None = Field(default=None, min_length=1,
                                      max_length=MAX_FAILURE_TOKEN_CHARS)

    @model_validator(mode="after")
    def _consistent(self) -> RunReport:
        if (self.failure_record is None) != (self.failure_token is None):
            raise ValueError("a failure record comes with its failure token, or neither comes")
        if self.failure_record is not None:
            if self.state != "failed":
                raise ValueError(f"only a failed run carries a failure record, not a "
                                 f"{self.state} one")
            size = len(canonical_json(self.failure_record))
            if size > MAX_FAILURE_RECORD_BYTES:
                raise ValueError(f"a failure record of at most {MAX_FAILURE_RECORD_BYTES} bytes, "
                                 f"received {size}")
        if self.step_seconds:
            raise ValueError(
                "the registry takes no step timings: they vary with the cases a model sees, "
                "so a model could signal its owner through them; the hospital keeps them in "
                "its own run records (upgrade the client)"
            )
        if self.state == "failed" and self.reason not in FAILURE_CLASSES:
            raise ValueError(f"a failed run names its failure class, received {self.reason!r}")
        if self.state == "interrupted" and self.reason not in INTERRUPT_REASONS:
            raise ValueError(f"an interrupted run names why, received {self.reason!r}")
        if self.state not in ("failed", "interrupted") and self.reason is not None:
            raise ValueError(f"a {self.state} run has no reason, received {self.reason!r}")
        if self.result_id is not None and self.state != "succeeded":
            raise ValueError("only a succeeded run links a result")
        return self


#: Reports one batch may carry (a site's whole plan of a FeTS-sized benchmark is 41).
MAX_BATCH = 500


class RunReportItem(RunReport):
    """One report of a batch: the run's id and its report."""

    run_id: RunKey


class RunReportBatch(WireModel):
    """``POST /runs/reports``: several runs' reports applied in one transaction (a client
    reports its whole plan at once); each is applied as ``PUT /runs/{run_id}`` would."""

    reports: tuple[RunReportItem, ...] = Field(min_length=1, max_length=MAX_BATCH)


class RunPublic(WireModel):
    id: int
    run_id: str
    reporter_id: int
    benchmark_id: int
    dataset_id: int
    model_id: int
    state: RunState
    reason: str | None
    image_digest: str
    tee: str
    attempts: int
    execution_provider: str | None = None
    result_id: int | None
    #: True when the run's failure (``reason``) is the enclave's own record, whose token the
    #: registry verified; False for every other report (the hospital's claim).
    failure_attested: bool = False
    seq: int
    #: The day the run was first reported and last changed (midnight UTC): never finer.
    created_at: datetime
    updated_at: datetime


class RunBatchPublic(WireModel):
    """The runs of a batch, as stored after it, in the batch's order."""

    runs: tuple[RunPublic, ...]


ProgressStatus = Literal["pending", "planned", "running", "failed", "interrupted", "done"]


class ProgressCell(WireModel):
    """One approved (model, dataset) pair: its latest run for the benchmark's current image
    (none: ``pending``), or ``done`` when a verified result of that image exists.

    ``attested`` is true for ``done`` (the registry verified the result's attestation token) and
    for an **attested failure**: ``failed`` with the enclave's own failure record, whose token
    the registry verified, its ``reason`` the record's error class. Every other status, with its
    ``reason`` and timings, is what the data owner's client reported (``reported_by_id``), which
    the registry cannot check: a failure without a verified token (``integrity``, say) is the
    hospital's claim. A cell carries no timing and ``updated_at`` only to the day."""

    model_id: int
    model_name: str
    dataset_id: int
    dataset_name: str
    status: ProgressStatus
    run_id: str | None = None
    reason: str | None = None
    execution_provider: str | None = None
    result_id: int | None = None
    #: The day the run last changed (midnight UTC), never finer.
    updated_at: datetime | None = None
    #: True for ``done`` (a result of this image whose attestation the registry verified) and for
    #: a ``failed`` run whose failure record the enclave attested and the registry verified.
    attested: bool = False
    #: The account whose client reported the latest run (the dataset's owner); None: no run.
    reported_by_id: int | None = None


class BenchmarkProgress(WireModel):
    """``GET /benchmarks/{id}/progress``: the cells the caller may see (the authority all of
    them, a data owner its datasets' cells, a model owner its models' cells)."""

    benchmark_id: int
    image_digest: str
    cells: tuple[ProgressCell, ...]
    counts: dict[str, int]
