"""The errors every benchmark plug-in raises through the seam (re-exported by
:mod:`sealbench.benchmarks.interface`, the one import a plug-in needs; the tree is drawn there)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import CaseRejection

__all__ = [
    "BenchmarkError",
    "CaseError",
    "InferenceError",
    "InvalidPredictionError",
    "ModelContractError",
    "PluginNotFoundError",
    "PoolingNotSupportedError",
    "PreparationError",
    "SmallCellError",
    "SummaryError",
]


class BenchmarkError(Exception):
    """Base of every error a benchmark plug-in raises through this interface."""


class CaseError(BenchmarkError):
    """One case, or the dataset's layout, does not meet the data contract. Messages name no
    patient data (the enclave shows them to the operator)."""


class InvalidPredictionError(BenchmarkError):
    """A prediction cannot be scored against its ground truth."""


class ModelContractError(BenchmarkError):
    """A model does not meet the benchmark's model contract; ``differences`` names each
    mismatch."""

    def __init__(self, differences: tuple[str, ...]) -> None:
        self.differences = differences
        super().__init__("model does not fit the contract: " + "; ".join(differences))


class InferenceError(BenchmarkError):
    """The runner could not load the model or run a case."""


class PreparationError(BenchmarkError):
    """A raw dataset cannot be prepared; nothing was written. ``rejected`` lists the cases that
    failed the contract when that is the reason (empty otherwise)."""

    rejected: tuple[CaseRejection, ...] = ()


class SummaryError(BenchmarkError):
    """A summary document does not validate against the plug-in's schema."""


class PoolingNotSupportedError(BenchmarkError):
    """The plug-in's summaries carry no sufficient statistics to pool sites from."""


class SmallCellError(BenchmarkError):
    """A summary describes fewer cases than the benchmark's small-cell minimum: it must not be
    published, pooled or shown."""


class PluginNotFoundError(BenchmarkError):
    """No installed benchmark plug-in has the requested name (or that version)."""
