"""The benchmark seam: what a benchmark plug-in provides, and the typed values it hands the cores.

A plug-in is the task (data contract and preparation, case grouping, model contract and inference
runner, per-case scoring, aggregation into the public summary, the summary's schema and
presentation, a demo-data generator). It is found by name through the entry-point group
``sealbench.benchmarks`` (:mod:`sealbench.benchmarks.registry`) and pinned by name and version
(:class:`BenchmarkPin`, written ``<name>/<version>``, the string the run spec carries as
``SEALBENCH_METRICS_VERSION``). The enclave, the registry, the CLI and the dashboard speak only
this module's types; none imports a plug-in by name. The errors, the presentation and most
optional capabilities are in :mod:`~sealbench.benchmarks.errors`,
:mod:`~sealbench.benchmarks.presentation` and :mod:`~sealbench.benchmarks.capabilities`,
re-exported here: a plug-in (and every core) imports this module only.

How a run uses a plug-in (the enclave's steps 3 to 6)::

    runner  = benchmark.load_model(weights)            # ModelContractError: refused
    provider = execution_provider_of(runner)           # CUDA or CPU, None if not reported
    layout  = benchmark.open_dataset(dataset_json)     # CaseError: the dataset is refused
    ids     = layout.group(paths_of_one_object)        # {case_id: files}
    case    = layout.load(files)                       # CaseError: a flagged failure
    pred    = runner.predict(case)                     # InferenceError: a flagged failure
    result  = benchmark.score(case, pred)              # never raises: failures are results
    summary = benchmark.summarise(results)             # public: aggregates only
    doc     = summary.to_json()                        # validated again by parse_summary

Metrics may be **dataset-level** (:attr:`MetricSpec.dataset_level`: AUROC, sensitivity at a
threshold, calibration), computed from all cases at once in :meth:`Benchmark.summarise`; per-case
results then carry what the summary needs (a label and a score) and stay sealed to the data owner.

Pooling across sites (issue 15) has its place here: a summary may carry the plug-in's
**sufficient statistics** (counts, sums, sums of squares, fixed-bin histograms, confusion counts)
and :meth:`Benchmark.pool` turns the summaries of several sites into :class:`PooledFigures`; a
plug-in that cannot pool raises :class:`PoolingNotSupportedError`.
:attr:`Benchmark.small_cell_minimum` is the fewest cases a published summary may describe
(:func:`check_small_cells` refuses one under it with :class:`SmallCellError`). A plug-in whose
summary carries histograms also sets a minimum count per bin and merges or suppresses bins
under it when summarising; its :meth:`Benchmark.parse_summary` refuses a bin under it (BraTS:
3 cases, adjacent bins merged, a histogram under it suppressed).

**Limits** (:class:`RunLimits`, declared by a plug-in through :class:`DeclaresRunLimits`, else
:data:`DEFAULT_RUN_LIMITS`): the time one case may take, the time the plug-in's own work may
add to the cases' (the run may take ``n_cases * case_seconds`` plus that), and the memory the
evaluating process may hold. They are plug-in code, so the pin (and the image digest
the owners approve) fixes them; the enclave enforces them (a case over its time or memory is a
flagged ``timeout`` or ``memory`` failure, the run limit ends the evaluation with the results so
far and flags the rest ``timeout``). A runner's ONNX Runtime calls obey them through
:mod:`sealbench.benchmarks.onnx_runtime`.

Errors every plug-in raises (its own subclasses are fine)::

    BenchmarkError
    ├── CaseError              one case (or the dataset's layout) does not meet the data contract
    ├── InvalidPredictionError a prediction that cannot be scored
    ├── ModelContractError     a model does not meet the model contract (``.differences``)
    ├── InferenceError         the runner failed on a case
    ├── PreparationError       a raw dataset cannot be prepared (``.rejected`` when cases failed)
    ├── SummaryError           a summary document does not validate against the schema
    ├── PoolingNotSupportedError the plug-in cannot pool summaries (yet)
    ├── SmallCellError         a summary describes fewer cases than the small-cell minimum
    └── PluginNotFoundError    no installed plug-in of that name and version (registry)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, runtime_checkable

from sealbench.benchmarks.capabilities import (
    GRID_TOLERANCE_MM,
    ContractVariants,
    DemoModelInput,
    DemoVariant,
    FixesGrid,
    Grid,
    GridError,
    ProvidesDemoModelInput,
    ScoresFiles,
    ShipsDefinitions,
    StoredScores,
    bind_data_contract,
    grid_of,
)
from sealbench.benchmarks.errors import (
    BenchmarkError,
    CaseError,
    InferenceError,
    InvalidPredictionError,
    ModelContractError,
    PluginNotFoundError,
    PoolingNotSupportedError,
    PreparationError,
    SmallCellError,
    SummaryError,
)
from sealbench.benchmarks.presentation import (
    Direction,
    Figure,
    Group,
    MetricRef,
    MetricSpec,
    PooledFigures,
    Presentation,
)
from sealbench.contract.pin import BenchmarkPin

if TYPE_CHECKING:  # numpy-free at run time: the registry's readers import this module
    from .release import NoiseSource, Release, ReleaseSpec

__all__ = [
    "DEFAULT_RUN_LIMITS",
    "EXACT_SUFFIX",
    "GRID_TOLERANCE_MM",
    "POOLED_ONLY_SUFFIX",
    "Benchmark",
    "BenchmarkError",
    "BenchmarkPin",
    "CaseError",
    "CaseRejection",
    "CaseResult",
    "ContractVariants",
    "DatasetLayout",
    "DeclaresRunLimits",
    "DemoModelInput",
    "DemoVariant",
    "Direction",
    "ExactReleases",
    "ExecutionProvider",
    "Figure",
    "FixesGrid",
    "Grid",
    "GridError",
    "Group",
    "InferenceError",
    "InvalidPredictionError",
    "JsonObject",
    "LoadedCase",
    "MetricRef",
    "MetricSpec",
    "ModelContract",
    "ModelContractError",
    "ModelReport",
    "PluginNotFoundError",
    "PooledFigures",
    "PoolingNotSupportedError",
    "PoolsExactly",
    "PreparationError",
    "Prepared",
    "PreparedLayout",
    "Presentation",
    "PrivateSummary",
    "ProgressFn",
    "ProvidesDemoModelInput",
    "PublicSummary",
    "ReportsExecutionProvider",
    "RunLimits",
    "Runner",
    "ScoresFiles",
    "ShippedModel",
    "ShipsDefinitions",
    "SmallCellError",
    "StoredScores",
    "SummaryError",
    "TensorSpec",
    "bind_data_contract",
    "check_small_cells",
    "exact_copy",
    "execution_provider_of",
    "grid_of",
    "pooled_only_copy",
    "publishes_site_release",
    "release_of",
    "run_limits_of",
]

#: A JSON object as Python decodes it (``json.loads``) and pydantic dumps it (``mode="json"``).
JsonObject = dict[str, Any]
#: Called after each case with (cases done, cases in total).
ProgressFn = Callable[[int, int], None]

#: What a pin's version ends with when its releases are exact (``wdbc/1-exact``): the choice is
#: in the pin, so the owners' key-release conditions and approvals bind it (:class:`ExactReleases`).
EXACT_SUFFIX: Final = "-exact"
#: What a pin's version ends with when its sites publish no per-site release (issue 41:
#: ``wdbc/1-pool``, ``brats-2023-gli/1-64x64x48-pool``): the benchmark pools in the TEE and its
#: pooled release is the one public figure per model and pooling round; each run's enclave
#: publishes a withheld summary (rule ``pooled``) and draws no noise. In the pin, like
#: ``-exact``, so the owners' key-release conditions (the uid's pin) bind the choice: neither
#: the hospital's operator nor the registry can turn per-site releases on after consent.
POOLED_ONLY_SUFFIX: Final = "-pool"


# The errors (:mod:`~sealbench.benchmarks.errors`), the presentation
# (:mod:`~sealbench.benchmarks.presentation`) and most optional capabilities
# (:mod:`~sealbench.benchmarks.capabilities`) live in their own modules and are re-exported here:
# a plug-in imports this module only.


# -- hand-offs ---------------------------------------------------------------------------------


class PublicSummary(Protocol):
    """A run's public summary: aggregates over cases only, never a per-case value. Its JSON
    (:meth:`to_json`) is what the registry stores and :meth:`Benchmark.parse_summary` reads."""

    @property
    def n_cases(self) -> int: ...

    def to_json(self) -> JsonObject:
        """The summary as a JSON object (every float finite)."""
        ...


@runtime_checkable
class PrivateSummary(Protocol):
    """A public summary that is a release (:mod:`sealbench.benchmarks.release`): every figure
    in it is post-processing of :attr:`release`, whose privacy loss the registry debits from the
    dataset's budget."""

    @property
    def release(self) -> Release: ...


def release_of(summary: PublicSummary) -> Release | None:
    """The release ``summary`` carries, or None for a summary that is no release (a plug-in of
    before releases)."""
    return summary.release if isinstance(summary, PrivateSummary) else None


class CaseResult(Protocol):
    """The private result of one case (sealed to the data owner): its scores, or a flagged
    failure with its reason, which the summary counts and penalises, never drops."""

    @property
    def case_id(self) -> str: ...

    @property
    def failed(self) -> bool: ...

    def to_json(self) -> JsonObject: ...


class LoadedCase(Protocol):
    """A decoded, contract-checked case with its ground truth, ready for the runner."""

    @property
    def case_id(self) -> str: ...


class Runner(Protocol):
    """A model loaded (from bytes, in memory) for inference. A runner also says which ONNX
    Runtime execution provider runs it by implementing :class:`ReportsExecutionProvider`. It
    opens and runs its sessions through :mod:`sealbench.benchmarks.onnx_runtime` (``open_session``
    refuses a model that is not exactly its bytes; ``run`` obeys the enclave's per-case limit)."""

    def predict(self, case: Any) -> Any:
        """The model's prediction for a case the plug-in loaded; :class:`InferenceError`. It
        may consume the case's inputs (:meth:`Benchmark.score` then reads only what scoring
        needs, the truth): a case is predicted once."""
        ...


@dataclass(frozen=True)
class RunLimits:
    """What a run of the benchmark may spend, fixed in the plug-in (part of its pin): seconds per
    case (inference of one case, from ``predict`` to its return), seconds the plug-in's own work
    (loading, scoring) may add to the run, whose limit is ``n_cases * case_seconds +
    run_seconds`` (``sealbench.enclave.evaluation.evaluation_seconds``: a run limit that did not
    grow with the cases let a model fail the other cases by spinning on one), and the bytes of
    data memory (``RLIMIT_DATA``: heap and private mappings) the
    evaluating process may hold from loading the model to the end of the evaluation."""

    case_seconds: float = 900.0
    run_seconds: float = 24 * 3600.0
    memory_bytes: int = 6 << 30

    def __post_init__(self) -> None:
        if not (self.case_seconds > 0 and self.run_seconds > 0 and self.memory_bytes > 0):
            raise ValueError(f"run limits must be positive, received {self}")

    def evaluation_seconds(self, n_cases: int) -> float:
        """What the evaluation of ``n_cases`` cases may take: each case's inference limit and
        the plug-in's allowance for its own work. The enclave ends an evaluation only past it,
        and a launcher must wait at least this long for a run (issue 40: a run limit that did
        not grow with the cases let a model fail the run by spinning on some of them)."""
        return n_cases * self.case_seconds + self.run_seconds


#: The limits of a plug-in that declares none: a quarter of an hour a case, a day a run, 6 GiB
#: (the default confidential VM, n2d-standard-2, has 8 GB).
DEFAULT_RUN_LIMITS: Final = RunLimits()


@runtime_checkable
class DeclaresRunLimits(Protocol):
    """Implemented by a plug-in that declares its own :class:`RunLimits`."""

    @property
    def run_limits(self) -> RunLimits: ...


def run_limits_of(benchmark: object) -> RunLimits:
    """The limits ``benchmark`` declares, or :data:`DEFAULT_RUN_LIMITS` when it declares none
    (a plug-in of before limits)."""
    if isinstance(benchmark, DeclaresRunLimits) and isinstance(benchmark.run_limits, RunLimits):
        return benchmark.run_limits
    return DEFAULT_RUN_LIMITS


class ExecutionProvider(StrEnum):
    """The ONNX Runtime execution providers a run may report (``ort.get_providers()`` names):
    the set the enclave logs, the client records and the registry accepts; nothing else."""

    CPU = "CPUExecutionProvider"
    CUDA = "CUDAExecutionProvider"
    TENSORRT = "TensorrtExecutionProvider"
    ROCM = "ROCMExecutionProvider"


@runtime_checkable
class ReportsExecutionProvider(Protocol):
    """Implemented by a :class:`Runner` that knows which execution provider runs its model (the
    first of its ONNX Runtime session's providers: CUDA on the GPU image, CPU otherwise)."""

    @property
    def execution_provider(self) -> ExecutionProvider: ...


@runtime_checkable
class ExactReleases(Protocol):
    """Implemented by a plug-in that offers an **exact** (non-private) release of its summary:
    the same content with no noise and no privacy bound, for benchmarks whose data owners each
    consent to publishing exact figures (never a default). The variant's pin is the plug-in's
    version followed by :data:`EXACT_SUFFIX`; the registry of plug-ins binds it."""

    def exact_release(self) -> Benchmark:
        """This plug-in with ``release_spec.exact`` set and ``ref.version`` ending in
        :data:`EXACT_SUFFIX`; everything else unchanged."""
        ...


@runtime_checkable
class PoolsExactly(Protocol):
    """Implemented by a plug-in whose pooled release (several sites' exact per-case results
    pooled inside an attested aggregator, :mod:`sealbench.benchmarks.pooling`) carries more
    than its ordinary summary of all those cases would: WDBC adds the Mann-Whitney pair count
    so that the pooled AUROC is read from the raw scores. A plug-in without it pools by
    :meth:`Benchmark.summarise` over the union of the cases."""

    def pooled_summary(self, results: Sequence[CaseResult], noise: NoiseSource) -> PublicSummary:
        """The public summary of all ``results`` (every site's cases together): one release of
        the pooled release spec, noise drawn once from ``noise``; ``ValueError`` for none."""
        ...

    def parse_pooled_summary(self, doc: Mapping[str, Any]) -> PublicSummary:
        """A pooled summary document validated against the pooled release spec;
        :class:`SummaryError`."""
        ...

    @property
    def pooled_release_spec(self) -> ReleaseSpec:
        """The release a pooled summary carries: the site release's privacy loss, its own
        columns (what a reader of a pooled release checks it against)."""
        ...


_P = TypeVar("_P")


def exact_copy(plugin: _P) -> _P:
    """A shallow copy of ``plugin`` (whose ``ref``, ``release_spec`` and ``description`` are
    plain attributes) bound to the exact release of its summary: what a plug-in's
    :meth:`ExactReleases.exact_release` may return."""
    source: Any = plugin
    bound: Any = copy.copy(plugin)
    ref: BenchmarkPin = source.ref
    spec: ReleaseSpec = source.release_spec
    bound.ref = BenchmarkPin(ref.name, ref.version + EXACT_SUFFIX)
    bound.release_spec = replace(spec, exact=True)
    bound.description = (
        f"{source.description} EXACT RELEASE: this pin publishes each site's "
        "figures without noise and without a privacy bound; every data owner consents to it.")
    result: _P = bound
    return result


def pooled_only_copy(plugin: _P) -> _P:
    """A shallow copy of ``plugin`` pinned ``<version>-pool`` whose runs publish no per-site
    release (:data:`POOLED_ONLY_SUFFIX`; ``site_release`` False): everything else, its pooled
    release included, unchanged."""
    source: Any = plugin
    bound: Any = copy.copy(plugin)
    ref: BenchmarkPin = source.ref
    bound.ref = BenchmarkPin(ref.name, ref.version + POOLED_ONLY_SUFFIX)
    bound.site_release = False
    bound.description = (
        f"{source.description} POOLED ONLY: sites publish no release of their own; each "
        "model's figure is the pooled release drawn inside the benchmark's attested "
        "aggregator over every current site.")
    result: _P = bound
    return result


def publishes_site_release(plugin: object) -> bool:
    """Whether each run of ``plugin`` publishes its own (per-site) release: False for a
    ``-pool`` pin's (:func:`pooled_only_copy`)."""
    return getattr(plugin, "site_release", True) is not False


def execution_provider_of(runner: object) -> ExecutionProvider | None:
    """The execution provider ``runner`` reports, or ``None`` when it reports none or a value
    outside :class:`ExecutionProvider` (a plug-in's free text never travels on)."""
    if not isinstance(runner, ReportsExecutionProvider):
        return None
    try:
        return ExecutionProvider(runner.execution_provider)
    except ValueError:
        return None


class DatasetLayout(Protocol):
    """How a prepared dataset's files group into cases and load, under the contract its
    ``dataset.json`` states (checked by :meth:`Benchmark.open_dataset`)."""

    def group(self, paths: Iterable[str]) -> Mapping[str, tuple[str, ...]]:
        """Case id → its file paths (relative to the prepared data folder); :class:`CaseError`
        for a path that belongs to no case."""
        ...

    def load(self, files: Mapping[str, bytes]) -> Any:
        """One case (a :class:`LoadedCase`) from its files' bytes; :class:`CaseError`."""
        ...


@dataclass(frozen=True)
class CaseRejection:
    """A raw case that was not prepared, and why (no patient data in ``reason``)."""

    case: str
    reason: str


@dataclass(frozen=True)
class PreparedLayout:
    """Where a prepared dataset keeps what the cores read: ``data_dir`` is what gets sealed
    (``dataset_file`` in it states the contract), ``manifest_file`` (beside it) the canonical
    manifest whose digest is the dataset's identity, ``statistics_file`` (in ``data_dir``)
    aggregates safe to publish."""

    data_dir: str = "data"
    manifest_file: str = "manifest.json"
    dataset_file: str = "dataset.json"
    statistics_file: str = "statistics.json"
    cases_dir: str = "cases"


@dataclass(frozen=True)
class Prepared:
    """The outcome of a preparation: accepted case ids, rejections with reasons, the dataset's
    digest and its public statistics."""

    accepted: tuple[str, ...]
    rejected: tuple[CaseRejection, ...]
    dataset_digest: str
    statistics: JsonObject = field(default_factory=dict)
    #: What the preparation did that its user should know (a raw layout it converted, ...).
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TensorSpec:
    """One ONNX input or output: name (``None``: any), element type, shape (an int is fixed,
    a string names a dynamic axis, ``None`` is any)."""

    name: str | None
    dtype: str
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True)
class ModelContract:
    """The ONNX models a benchmark accepts (checked before registration)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    opsets: tuple[int, int]
    max_bytes: int
    description: str

    def hint(self) -> str:
        """One line telling a model owner what to export."""
        return self.description


@dataclass(frozen=True)
class ModelReport:
    """What the check found in a conforming model (registered as the model's I/O contract)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    opset: int
    details: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class ShippedModel:
    """A model the plug-in ships (its reference model, baselines), bound by SHA-256."""

    name: str
    sha256: str
    description: str


# -- the plug-in -------------------------------------------------------------------------------


class Benchmark(Protocol):
    """A benchmark plug-in. Everything a core needs from a task goes through these members."""

    @property
    def ref(self) -> BenchmarkPin:
        """Name and version, the pin in registry and run spec."""
        ...

    @property
    def description(self) -> str: ...

    @property
    def presentation(self) -> Presentation: ...

    @property
    def model_contract(self) -> ModelContract: ...

    @property
    def layout(self) -> PreparedLayout: ...

    @property
    def small_cell_minimum(self) -> int:
        """The fewest cases a published summary may describe (issue 15 enforces it)."""
        ...

    # data contract
    def data_contract(self) -> JsonObject:
        """The data contract as published in the benchmark definition."""
        ...

    def metrics_spec(self) -> JsonObject:
        """The metric parameters as published in the benchmark definition."""
        ...

    def prepare(self, raw_dir: Path, out_dir: Path, *, progress: ProgressFn | None = None,
                strict: bool = False) -> Prepared:
        """Validate and prepare ``raw_dir`` into ``out_dir`` (which must not exist): written
        whole or not at all. :class:`PreparationError` (with ``rejected`` when no case passed, or
        when ``strict`` and one failed)."""
        ...

    def open_dataset(self, dataset_json: bytes) -> DatasetLayout:
        """The layout of a prepared dataset whose ``dataset.json`` is ``dataset_json``;
        :class:`CaseError` when it was prepared under another contract."""
        ...

    # model contract
    def check_model(self, model_bytes: bytes) -> ModelReport:
        """Check an ONNX model against :attr:`model_contract`; :class:`ModelContractError`."""
        ...

    def load_model(self, model_bytes: bytes) -> Runner:
        """The inference runner; :class:`ModelContractError` or :class:`InferenceError`."""
        ...

    # scoring and summary
    def score(self, case: Any, prediction: Any) -> CaseResult:
        """Score one case; never raises (an unscorable prediction is a flagged failure)."""
        ...

    def failure(self, case_id: str, reason: str) -> CaseResult:
        """The flagged failure of a case that could not be loaded or predicted."""
        ...

    @property
    def release_spec(self) -> ReleaseSpec:
        """What the public summary releases and at what privacy loss per release (part of the
        pin: the key-release condition binds it, the registry checks every summary against
        it)."""
        ...

    def summarise(self, results: Sequence[CaseResult], noise: NoiseSource) -> PublicSummary:
        """The public summary of every case's result (failures penalised): a release under
        :attr:`release_spec` with noise from ``noise`` (:func:`sealbench.benchmarks.release.
        release`), and figures computed from that release alone; ``ValueError`` for no
        results."""
        ...

    def parse_summary(self, doc: Mapping[str, Any]) -> PublicSummary:
        """A summary JSON object validated against the schema; :class:`SummaryError`."""
        ...

    def parse_case_result(self, doc: Mapping[str, Any]) -> CaseResult:
        """A per-case result JSON object; :class:`SummaryError` when it does not validate."""
        ...

    def figures(self, summary: PublicSummary) -> tuple[Figure, ...]:
        """The values of :attr:`presentation`'s metrics in ``summary``."""
        ...

    def pool(self, summaries: Sequence[PublicSummary]) -> PooledFigures:
        """Pool several sites' summaries from their sufficient statistics (issue 15);
        :class:`PoolingNotSupportedError` until the plug-in defines them."""
        ...

    # shipped models
    @property
    def shipped_models(self) -> tuple[ShippedModel, ...]:
        """The reference model first, then any baselines the plug-in ships."""
        ...

    def model_bytes(self, name: str) -> bytes:
        """A shipped model's ONNX bytes, checked against its digest (``KeyError`` if none)."""
        ...

    # demo data
    def write_demo_dataset(self, out_dir: Path, n_cases: int, *, seed: int = 0) -> tuple[str, ...]:
        """Write ``n_cases`` synthetic raw cases into ``out_dir`` (for tests, the demo and the
        compatibility check); returns their case ids."""
        ...


def check_small_cells(benchmark: Benchmark, summary: PublicSummary) -> None:
    """:class:`SmallCellError` when ``summary`` describes fewer cases than
    ``benchmark.small_cell_minimum`` (the per-bin minimum is the plug-in's own check)."""
    if summary.n_cases < benchmark.small_cell_minimum:
        raise SmallCellError(
            f"the summary describes {summary.n_cases} case(s), under {benchmark.ref}'s "
            f"small-cell minimum of {benchmark.small_cell_minimum}")
