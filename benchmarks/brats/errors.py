"""Errors of the BraTS benchmark package.

    BenchmarkError
    ├── CaseError                 one case cannot be used (the message says why; no patient data)
    │   ├── CaseFormatError       unreadable bytes: corrupt gzip, not NIfTI, over the size cap
    │   └── CaseContractError     readable, but not what the contract says (names, shape, affine,
    │                             non-finite values, unknown labels, missing modality)
    ├── InvalidPredictionError    a prediction that cannot be scored (shape, labels, dtype)
    ├── ModelContractError        an ONNX model does not fit the contract (``.differences``)
    ├── ModelDigestMismatchError  a shipped model's bytes differ from the recorded SHA-256
    ├── InferenceError            ONNX Runtime failed on a case
    ├── PreparationError          a dataset preparation that cannot proceed or produced nothing
    └── StatisticsError           a ``statistics.json`` that is not a version-2 document
        └── StatisticsVersionError  one of another version (version 1 held aggregates over cases)

Each is also the matching error of :mod:`sealbench.benchmarks.interface` (``CaseError`` is an
``interface.CaseError``, ...), so the cores catch them without naming this package.
"""

from __future__ import annotations

from sealbench.benchmarks import interface

__all__ = [
    "BenchmarkError",
    "CaseContractError",
    "CaseError",
    "CaseFormatError",
    "InferenceError",
    "InvalidPredictionError",
    "ModelContractError",
    "ModelDigestMismatchError",
    "PreparationError",
    "StatisticsError",
    "StatisticsVersionError",
]


class BenchmarkError(interface.BenchmarkError):
    """Base of every error raised by ``sealbench.benchmarks.brats``."""


class CaseError(BenchmarkError, interface.CaseError):
    """One case cannot be used."""


class CaseFormatError(CaseError):
    """A case file is not a readable, size-bounded gzip-compressed NIfTI-1 image."""


class CaseContractError(CaseError):
    """A case is readable but differs from the data contract."""


class InvalidPredictionError(BenchmarkError, interface.InvalidPredictionError):
    """A prediction cannot be scored against its ground truth."""


class ModelContractError(BenchmarkError, interface.ModelContractError):
    """An ONNX model does not fit the data contract; ``differences`` names each mismatch."""


class InferenceError(BenchmarkError, interface.InferenceError):
    """ONNX Runtime could not load the model or run a case."""


class PreparationError(BenchmarkError):
    """Dataset preparation cannot proceed (for example the output exists) or kept no case."""


class ModelDigestMismatchError(BenchmarkError):
    """A shipped model file's SHA-256 differs from the one the benchmark definition records."""


class StatisticsError(BenchmarkError):
    """``statistics.json`` is not a BraTS statistics document this version reads."""


class StatisticsVersionError(StatisticsError):
    """``statistics.json`` is of another version: version 1 listed distributions over cases,
    which may reveal patients, and is refused (prepare the dataset again)."""
