"""The enclave's progress events: how far a run got, as typed data the client reads instead of
prose.

The enclave writes one event per progress point on its standard output, as one line::

    sealbench-event: {"v":2,"event":"case_done","index":3,"total":20}

the fixed :data:`EVENT_MARKER` at the start of the line, then one JSON object with the format
version ``v`` (:data:`EVENT_VERSION`) and the discriminator ``event``:

================  ==================================================================
``step``          a step started: ``index`` out of ``total`` (0 to 7 of 7), its ``name``
``cases``         the dataset's manifest was verified: ``total`` cases to evaluate
``case_done``     case ``index`` of ``total`` is evaluated (or recorded as failed)
``waiting``       a grant IAM has not applied yet: the ``owner`` (``dataset`` | ``model``)
                  whose ``service`` (``key`` | ``storage``) refused the workload, the
                  ``next_try_s``, and the ``waited_s`` of the run's ``window_s``
``model_loaded``  the model is loaded on ONNX Runtime's execution ``provider``
``done``          the run ended: the seconds per step (``timings``) and the ``provider``
``failed``        the run failed: its ``exit_code``, the failure's ``code``
                  (:data:`~sealbench.contract.errors.FAILURE_CODES`, the code's own exit
                  code), the public one-line ``reason`` (what the enclave's stderr line
                  ``sealbench-enclave: <reason> (exit N)`` says) and, for a key-release
                  refusal whose reason names the condition's clause, that clause's ``rule``
                  (:class:`~sealbench.contract.inputs.Rule`); else ``null``
================  ==================================================================

Version 2 added ``failed`` (version 1 had the other six).

Events carry **no secret and nothing of the data**: no key, token or principal, no case id, no
metric, no image intensity; only counts, indices, whole seconds, step names and execution
provider names, and a failure's public reason (the enclave's error messages' rule,
:mod:`sealbench.contract.errors`, which is why the same text is already on stderr and in the
failure record). They are a display aid, never evidence: the process's output is the operator's
(anyone who launches the workload can print any line), so the result and its attestation token
decide a run, never an event. :func:`parse_event` therefore reads hostile lines: it never
raises, refuses a line over :data:`MAX_EVENT_LINE_CHARS`, a line that does not start with the
marker, an unknown version, an unknown event or member, and any value outside its bounds (all
``None``, as is any other line). A reader ignores what it cannot read; a new kind of event or a
new member is a new version.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from sealbench.contract.errors import KeyReleaseDenied, error_for_code
from sealbench.contract.inputs import Rule

__all__ = [
    "EVENT_MARKER",
    "EVENT_VERSION",
    "MAX_EVENT_LINE_CHARS",
    "MAX_FAILURE_REASON_CHARS",
    "CaseDone",
    "CasesCounted",
    "GrantWaiting",
    "ModelLoaded",
    "RunDone",
    "RunEvent",
    "RunFailed",
    "StepStarted",
    "parse_event",
]

#: What starts every event line (nothing else of the enclave's output starts with it).
EVENT_MARKER: Final = "sealbench-event: "
#: The format's version (``v``); a reader drops the events of any other version.
EVENT_VERSION: Final = 2
#: The longest line :func:`parse_event` reads (the longest event, ``done``, is far shorter).
MAX_EVENT_LINE_CHARS: Final = 4096
#: The longest failure ``reason`` (the failure record's own bound); the enclave shortens one
#: further when its escaped JSON would not fit the line.
MAX_FAILURE_REASON_CHARS: Final = 2000

#: A count of cases (far above any benchmark's dataset; the registry's own bound is lower).
_MAX_CASES: Final = 10_000_000
#: Whole seconds (the run's grant window is at most an hour; a run at most days).
_MAX_SECONDS: Final = 10_000_000

_Count = Annotated[int, Field(ge=0, le=_MAX_CASES)]
_Index = Annotated[int, Field(ge=1, le=_MAX_CASES)]
_Seconds = Annotated[int, Field(ge=0, le=_MAX_SECONDS)]
#: An ONNX Runtime execution provider's name (``CUDAExecutionProvider``); the client keeps only
#: the names it knows.
_Provider = Annotated[str, Field(pattern=r"^[A-Za-z]{1,40}$")]
#: A step's name in the timings (``infer``).
_StepName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")]
_StepSeconds = Annotated[float, Field(ge=0, le=_MAX_SECONDS, allow_inf_nan=False)]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[2] = EVENT_VERSION

    def to_line(self) -> str:
        """The event's line as the enclave writes it (no newline): the marker, then the JSON."""
        return EVENT_MARKER + self.model_dump_json()


class StepStarted(_Event):
    """Step ``index`` of ``total`` started (step 0 reads the run specification)."""

    event: Literal["step"] = "step"
    index: Annotated[int, Field(ge=0, le=99)]
    total: Annotated[int, Field(ge=1, le=99)]
    #: What the step does (``verify the dataset manifest``): printable ASCII, one line.
    name: Annotated[str, Field(pattern=r"^[\x20-\x7e]{1,120}$")]

    @model_validator(mode="after")
    def _within(self) -> Self:
        if self.index > self.total:
            raise ValueError(f"step {self.index} of {self.total}")
        return self


class CasesCounted(_Event):
    """The dataset's manifest is verified: ``total`` cases to evaluate."""

    event: Literal["cases"] = "cases"
    total: _Count


class CaseDone(_Event):
    """Case ``index`` of ``total`` is evaluated (or recorded as failed)."""

    event: Literal["case_done"] = "case_done"
    index: _Index
    total: _Index

    @model_validator(mode="after")
    def _within(self) -> Self:
        if self.index > self.total:
            raise ValueError(f"case {self.index} of {self.total}")
        return self


class GrantWaiting(_Event):
    """An owner's ``service`` refused the workload after a successful token exchange (a grant
    IAM has not applied yet): the next try in ``next_try_s``, ``waited_s`` of ``window_s``
    waited so far (whole seconds)."""

    event: Literal["waiting"] = "waiting"
    owner: Literal["dataset", "model"]
    service: Literal["key", "storage"]
    next_try_s: _Seconds
    waited_s: _Seconds
    window_s: _Seconds


class ModelLoaded(_Event):
    """The model is loaded and runs on ONNX Runtime's ``provider``."""

    event: Literal["model_loaded"] = "model_loaded"
    provider: _Provider


class RunDone(_Event):
    """The run ended: seconds spent per step, and the provider the model ran on (``None`` when
    the plug-in's runner does not say)."""

    event: Literal["done"] = "done"
    timings: Annotated[dict[_StepName, _StepSeconds], Field(max_length=32)]
    provider: _Provider | None = None


class RunFailed(_Event):
    """The run failed: the process exits ``exit_code``, the failure's ``code`` (whose class has
    that exit code, :func:`~sealbench.contract.errors.error_for_code`), its public ``reason``
    on one line, and the key-release condition's ``rule`` a refusal's reason names (only with
    ``key_release_denied``; ``None`` when the reason names none, as Google's STS does not)."""

    event: Literal["failed"] = "failed"
    exit_code: Annotated[int, Field(ge=1, le=125)]
    code: Annotated[str, Field(pattern=r"^[a-z_]{1,40}$")]
    #: Printable text on one line: no control character (C0, DEL or C1).
    reason: Annotated[
        str, Field(pattern=r"^[^\x00-\x1f\x7f-\x9f]+$", max_length=MAX_FAILURE_REASON_CHARS)
    ]
    rule: Rule | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        error = error_for_code(self.code)
        if error is None:
            raise ValueError(f"unknown failure code {self.code!r}")
        if error.exit_code != self.exit_code:
            raise ValueError(f"{self.code} exits {error.exit_code}, not {self.exit_code}")
        if self.rule is not None and not issubclass(error, KeyReleaseDenied):
            raise ValueError("only a key-release refusal names a rule")
        return self


#: Any event of this version, told apart by its ``event`` member.
RunEvent = Annotated[
    StepStarted | CasesCounted | CaseDone | GrantWaiting | ModelLoaded | RunDone | RunFailed,
    Field(discriminator="event"),
]

_ADAPTER: Final[TypeAdapter[RunEvent]] = TypeAdapter(RunEvent)


def parse_event(line: str) -> RunEvent | None:
    """The event ``line`` holds, or ``None``: for any other line (prose, a marker that does not
    start the line), and for a line with the marker whose body is not an event of this version
    (malformed JSON, unknown version, event or member, a value out of bounds, a line over
    :data:`MAX_EVENT_LINE_CHARS`). Never raises: the line is the operator's."""
    if not isinstance(line, str) or len(line) > MAX_EVENT_LINE_CHARS:
        return None
    text = line.strip()
    if not text.startswith(EVENT_MARKER):
        return None
    try:
        event = _ADAPTER.validate_json(text[len(EVENT_MARKER):])
    except Exception:  # noqa: BLE001 - a hostile line is no event, whatever it breaks
        return None
    # the version is stated, never assumed (the default only spares the enclave writing it)
    return event if "v" in event.model_fields_set else None
