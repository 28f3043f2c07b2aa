"""Which series is which modality: rules in a mapping file the hospital can read and edit.

The mapping file (JSON, ``sealbench/sequence-mapping`` version 1)::

    {"format": "sealbench/sequence-mapping", "version": 1,
     "sequences": {"t1c": {"description": ["t1"], "contrast": true}, ...},
     "annotation_labels": {"1": "NETC", "2": "SNFH", "4": "ET"}}

A series *matches* a modality when one of its ``description`` patterns (Python regular
expressions, case-insensitive, searched in the series description and the protocol name) matches
and every stated parameter holds: ``contrast`` (a contrast agent is recorded or not),
``inversion_ms`` (``[low, high]`` in ms, or ``"none"`` for no inversion pulse),
``repetition_ms`` and ``echo_ms`` (``[low, high]``). Each modality of the contract must be
matched by exactly one series and no series may match two modalities; otherwise the study
stops with the reason (the series *numbers* involved, never their descriptions). Nothing is
guessed.

``segment_labels`` does the same for DICOM-SEG segments, by their label.
``annotation_labels`` maps each label value of the hospital's annotations to one of the
contract's tissues (the BraTS 2023 names NETC, SNFH, ET), so annotations drawn in another
convention (BraTS 2021's {1, 2, 4}, a local one) are mapped, and an unknown value stops the case.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..contract import BratsContract
from .dicom import Series
from .errors import IngestError, SequenceError

__all__ = ["DEFAULT_MAPPING", "MAX_MAPPING_BYTES", "SequenceMapping", "SequenceRule",
           "load_mapping", "recognise"]

MAX_MAPPING_BYTES = 1 << 20
_FROZEN = ConfigDict(frozen=True, extra="forbid")
Range = tuple[float, float]


class SequenceRule(BaseModel):
    """What a series of one modality looks like."""

    model_config = _FROZEN

    description: tuple[str, ...] = Field(min_length=1)
    contrast: bool | None = None
    #: ``[low, high]`` in ms, ``"none"`` for no inversion pulse, ``null`` to not look at it.
    inversion_ms: Range | Literal["none"] | None = None
    repetition_ms: Range | None = None
    echo_ms: Range | None = None

    @field_validator("description")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") \
                    from exc
        return patterns

    def matches(self, series: Series) -> bool:
        text = f"{series.description}\n{series.protocol}"
        if not any(re.search(p, text, re.IGNORECASE) for p in self.description):
            return False
        if self.contrast is not None and series.contrast != self.contrast:
            return False
        if self.inversion_ms == "none":
            if series.inversion_ms:
                return False
        elif not _within(series.inversion_ms, self.inversion_ms):
            return False
        return _within(series.repetition_ms, self.repetition_ms) and \
            _within(series.echo_ms, self.echo_ms)


def _within(value: float | None, bounds: Range | None) -> bool:
    if bounds is None:
        return True
    return value is not None and bounds[0] <= value <= bounds[1]


class SequenceMapping(BaseModel):
    """The hospital's mapping file: a rule per modality and its annotations' label values."""

    model_config = _FROZEN

    format: Literal["sealbench/sequence-mapping"] = "sealbench/sequence-mapping"
    version: Literal[1] = 1
    sequences: dict[str, SequenceRule]
    annotation_labels: dict[int, str]
    #: DICOM-SEG segment label (case-insensitive) -> tissue; the tissue names by default.
    segment_labels: dict[str, str] = {"NETC": "NETC", "SNFH": "SNFH", "ET": "ET"}

    def check(self, contract: BratsContract) -> None:
        """Refuse a mapping that does not name every modality or maps to unknown tissues."""
        missing = [m for m in contract.modalities if m not in self.sequences]
        extra = [m for m in self.sequences if m not in contract.modalities]
        if missing or extra:
            raise IngestError(f"the mapping file must give a rule for each of "
                              f"{contract.modalities}: missing {missing}, unknown {extra}")
        unknown = sorted((set(self.annotation_labels.values()) | set(self.segment_labels.values()))
                         - set(contract.label_map.tissues))
        if unknown:
            raise IngestError(f"the annotation labels name tissues {unknown}; the contract's are "
                              f"{contract.label_map.tissues}")
        if 0 in self.annotation_labels:
            raise IngestError("annotation label 0 is the background; map only tumour labels")

    def to_json(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()


#: The mapping used when the hospital gives none (written out by ``--write-mapping`` to edit):
#: T1 with and without contrast told apart by the recorded agent, FLAIR by its inversion time.
DEFAULT_MAPPING = SequenceMapping(
    sequences={
        "t1c": SequenceRule(description=(r"t1",), contrast=True),
        "t1n": SequenceRule(description=(r"t1",), contrast=False, inversion_ms="none"),
        "t2w": SequenceRule(description=(r"t2",), contrast=False, inversion_ms="none"),
        "t2f": SequenceRule(description=(r"flair",), inversion_ms=(1500.0, 3500.0)),
    },
    annotation_labels={1: "NETC", 2: "SNFH", 3: "ET"},
)


def load_mapping(path: Path, contract: BratsContract) -> SequenceMapping:
    """Read and check the mapping file at ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"cannot read the mapping file {path}: {exc.strerror}") from exc
    if len(data) > MAX_MAPPING_BYTES:
        raise IngestError(f"the mapping file {path} is over {MAX_MAPPING_BYTES} bytes")
    try:
        mapping = SequenceMapping.model_validate_json(data)
    except ValidationError as exc:
        raise IngestError(f"the mapping file {path} is not a valid sequence mapping: "
                          f"{exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from exc
    mapping.check(contract)
    return mapping


def recognise(series: Sequence[Series], mapping: SequenceMapping,
              modalities: Sequence[str]) -> Mapping[str, Series]:
    """The one series of each modality; :class:`SequenceError` when one is missing, several
    series match a modality, or a series matches several modalities."""
    matches = {m: [s for s in series if mapping.sequences[m].matches(s)] for m in modalities}
    problems: list[str] = []
    by_series: dict[int, list[str]] = {}
    for modality, found in matches.items():
        for s in found:
            by_series.setdefault(s.number, []).append(modality)
    for number, names in sorted(by_series.items()):
        if len(names) > 1:
            problems.append(f"series {number} matches {', '.join(names)}")
    for modality, found in matches.items():
        if not found:
            problems.append(f"{modality}: no series matches")
        elif len(found) > 1:
            problems.append(f"{modality}: {len(found)} series match "
                            f"({', '.join(str(s.number) for s in found)})")
    if problems:
        raise SequenceError("sequences not recognised: " + "; ".join(problems)
                            + " (edit the mapping file, or remove the extra series)")
    return {m: found[0] for m, found in matches.items()}
