"""Errors of DICOM and native-NIfTI ingestion.

::

    sealbench.benchmarks.brats.errors.CaseError
    └── StudyError                 one study cannot be ingested; the others go on
        ├── SeriesError            a series cannot be converted faithfully (named by its number)
        ├── SequenceError          a modality is missing, or more than one series could be it
        ├── AnnotationError        the annotation is missing, unreadable or on no series' grid
        └── RegistrationError      a registration or the brain extraction failed its checks
    sealbench.benchmarks.brats.errors.PreparationError
    └── IngestError                the run itself cannot go on (folders, mapping file, pseudonyms)

Messages name series by their number and modalities by the contract's names; they never quote
a header's free text, a file name or any other patient identifier.
"""

from __future__ import annotations

from ..errors import CaseError, PreparationError

__all__ = ["AnnotationError", "IngestError", "RegistrationError", "SequenceError", "SeriesError",
           "StudyError"]


class StudyError(CaseError):
    """One study cannot be ingested (the reason holds no identifier)."""


class SeriesError(StudyError):
    """A series cannot be converted faithfully: mixed, missing slices, inconsistent spacing."""


class SequenceError(StudyError):
    """A modality is missing from a study, or several series could be it."""


class AnnotationError(StudyError):
    """The study's annotation is missing, unreadable, or on no series' grid."""


class RegistrationError(StudyError):
    """A registration or the brain extraction failed its checks."""


class IngestError(PreparationError):
    """The ingestion run cannot go on: a folder, the mapping file or the pseudonym file."""
