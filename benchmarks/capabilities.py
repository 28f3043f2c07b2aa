"""What a plug-in may implement beyond :class:`~sealbench.benchmarks.interface.Benchmark`, each
checked with ``isinstance`` against a runtime-checkable protocol: a model input from demo data,
variants of its data contract, the voxel grid its contract fixes, scoring files on disk, shipped
definitions (re-exported by :mod:`sealbench.benchmarks.interface`, the one import a plug-in
needs; ``ExactReleases``, ``PoolsExactly`` and ``DeclaresRunLimits`` stay there, beside the
hand-offs they use)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from sealbench.benchmarks.errors import BenchmarkError, CaseError

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, JsonObject

__all__ = [
    "GRID_TOLERANCE_MM",
    "ContractVariants",
    "DemoModelInput",
    "DemoVariant",
    "FixesGrid",
    "Grid",
    "GridError",
    "ProvidesDemoModelInput",
    "ScoresFiles",
    "ShipsDefinitions",
    "StoredScores",
    "bind_data_contract",
    "grid_of",
]

#: Spacings closer than this (mm) are the same grid (both come from one contract's JSON).
GRID_TOLERANCE_MM: Final = 1e-6


# -- a model input from demo data (optional) -------------------------------------------------


@dataclass(frozen=True)
class DemoModelInput:
    """One case of the plug-in's demo-data generator as its runner feeds the model: ``array``
    is a float32 array of the model contract's input shape with batch 1 (BraTS:
    ``[1, 4, D, H, W]``, normalised, cropped and padded as the segmenter does), ``description``
    says which case it is (no patient data: demo data is synthetic)."""

    array: Any
    description: str


@runtime_checkable
class ProvidesDemoModelInput(Protocol):
    """Implemented by a plug-in that can hand a model a realistic input built from its demo
    data (``model check`` compares ONNX with PyTorch on it rather than on noise)."""

    def demo_model_input(self, seed: int = 0) -> DemoModelInput:
        """The model input of the demo case of ``seed``."""
        ...


# -- variants of a data contract (optional) ---------------------------------------------------


@dataclass(frozen=True)
class DemoVariant:
    """A variant of the benchmark for quick demo data (BraTS: a small grid): its plug-in bound
    to the variant's contract, and how many times more one case costs under the registered
    contract (to estimate the real time per case)."""

    name: str
    benchmark: Benchmark
    cost_scale: float


@runtime_checkable
class ContractVariants(Protocol):
    """Implemented by a plug-in whose registered benchmarks may publish variants of its data
    contract (BraTS: the same tissues and labels on another grid). A plug-in without variants
    accepts only its own :meth:`Benchmark.data_contract`."""

    def with_data_contract(self, doc: Mapping[str, Any]) -> Benchmark:
        """The plug-in bound to a registered benchmark's data contract; :class:`CaseError`
        when the document is not a variant this plug-in scores."""
        ...

    def demo_variants(self) -> tuple[DemoVariant, ...]:
        """Variants demo data may be generated under (the first is the smallest)."""
        ...


class GridError(BenchmarkError):
    """A data contract states a grid its plug-in cannot read."""


@dataclass(frozen=True)
class Grid:
    """A voxel grid: the number of voxels along each axis and, when stated, their size (mm)."""

    shape: tuple[int, ...]
    spacing_mm: tuple[float, ...] | None = None

    def text(self) -> str:
        """``240x240x155 at 1x1x1 mm``, for messages."""
        spacing = "" if self.spacing_mm is None else (
            " at " + "x".join(f"{s:g}" for s in self.spacing_mm) + " mm")
        return "x".join(map(str, self.shape)) + spacing

    def admits(self, other: Grid, tolerance_mm: float = GRID_TOLERANCE_MM) -> bool:
        """Whether cases on ``other`` are on this grid: the same shape and, when this grid fixes
        a spacing, the same spacing (within ``tolerance_mm``: both come from JSON)."""
        if other.shape != self.shape:
            return False
        if self.spacing_mm is None:
            return True
        return other.spacing_mm is not None and len(other.spacing_mm) == len(self.spacing_mm) \
            and all(abs(a - b) <= tolerance_mm
                    for a, b in zip(other.spacing_mm, self.spacing_mm, strict=True))


@runtime_checkable
class FixesGrid(Protocol):
    """Implemented by a plug-in whose cases are volumes on one voxel grid that its data contract
    fixes (BraTS). The registry and the client ask it, through :func:`grid_of`, whether a dataset
    fits a benchmark; neither reads the contract's keys itself. A plug-in without it (tabular
    data) fixes no grid, and any dataset fits as far as the grid goes."""

    def grid_of(self, contract: Mapping[str, Any]) -> Grid | None:
        """The grid ``contract`` fixes (a registered benchmark's data contract, or the one a
        prepared dataset states): None when it names none, :class:`GridError` when it states
        one this plug-in cannot read."""
        ...


def grid_of(benchmark: Benchmark, contract: Mapping[str, Any]) -> Grid | None:
    """The grid ``contract`` fixes, as ``benchmark``'s plug-in reads it (None for a plug-in that
    fixes no grid); :class:`GridError` when it cannot read it."""
    return benchmark.grid_of(contract) if isinstance(benchmark, FixesGrid) else None


def bind_data_contract(benchmark: Benchmark, doc: Mapping[str, Any]) -> Benchmark:
    """``benchmark`` as a registered benchmark with data contract ``doc`` uses it;
    :class:`CaseError` when the plug-in does not accept that contract."""
    if isinstance(benchmark, ContractVariants):
        return benchmark.with_data_contract(doc)
    if dict(doc) != benchmark.data_contract():
        raise CaseError(f"the data contract is not the one benchmark plug-in {benchmark.ref} "
                        "enforces")
    return benchmark


class StoredScores(Protocol):
    """Predictions on disk scored against truth on disk (:meth:`ScoresFiles.score_files`)."""

    @property
    def n_scored(self) -> int:
        """Cases scored without error."""
        ...

    @property
    def missings(self) -> tuple[str, ...]:
        """Truth files no prediction was found for."""
        ...

    @property
    def extras(self) -> tuple[str, ...]:
        """Predictions no truth file claims."""
        ...

    def to_json(self) -> bytes:
        """The scores as JSON (the task's official summary shape where it has one)."""
        ...

    @property
    def csv_modes(self) -> tuple[str, ...]:
        """The CSV layouts :meth:`to_csv` writes, the default first (a 2025 BraTS pin:
        ``seg`` and ``mets``, the official parser's two modes)."""
        ...

    def to_csv(self, mode: str | None = None,
               options: Mapping[str, float] | None = None) -> bytes:
        """The scores as CSV, a row per case then summary rows, in layout ``mode`` (default:
        the first of :attr:`csv_modes`) with its numeric ``options``; ``ValueError`` for a
        mode not offered or an option it does not take."""
        ...


@runtime_checkable
class ScoresFiles(Protocol):
    """Implemented by a plug-in that scores predictions stored as files against truth stored
    as files, outside any enclave (``benchmark score --pin``: a challenge's validation
    phase)."""

    def score_files(self, truth_dir: Path, predictions_dir: Path, *, keep_going: bool = False,
                    on_case: Callable[[str, int, int], None] | None = None) -> StoredScores:
        """Every truth case scored against its prediction; :class:`CaseError` or
        :class:`InvalidPredictionError` naming the case that cannot be scored (unless
        ``keep_going``: an error row). ``on_case(name, done, total)`` after each case."""
        ...


@runtime_checkable
class ShipsDefinitions(Protocol):
    """Implemented by a plug-in that ships ready-to-publish benchmark definitions
    (``benchmark create --definition brats``)."""

    def definitions(self) -> Mapping[str, JsonObject]:
        """Definition documents by the short name the CLI takes (``sealbench/benchmark-definition``
        version 1: name, version, description, contract, metrics, reference and baseline models;
        the plug-in's pin under ``plugin``)."""
        ...
