"""BraTS as a :class:`~sealbench.benchmarks.interface.Benchmark` plug-in: ``brats-2023-gli/1``.

The plug-in wires this package's contract, preparation, case layout, model contract, ONNX
segmenter, lesion-wise metrics and summary to the interface, unchanged: what it computes is what
:func:`.metrics.score_case` and :func:`.summary.aggregate` compute. It is declared in the
entry-point group ``sealbench.benchmarks`` as ``brats-2023-gli`` (``pyproject.toml``).

**The grid is part of the pin.** ``brats-2023-gli/1`` is the contract on its real grid,
240x240x155 at 1 mm; the same contract on another grid is pinned ``brats-2023-gli/1-XxYxZ``
(``brats-2023-gli/1-64x64x48``: the small demo benchmark, ``brats-small``), a plug-in of its own
(:meth:`BratsBenchmark.pinned`, resolved by :mod:`sealbench.benchmarks.registry`). A plug-in
accepts a prepared dataset only when the contract its ``dataset.json`` states (covered by the
manifest digest the key owners approved) is its own, grid included, and loads a case only when
every volume is on that grid. The pin travels in the run spec as ``SEALBENCH_METRICS_VERSION``,
which the owners' key-release condition pins, so the grid the enclave enforces is attested: it
does not rely on the registry or the operator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Self

import numpy as np
import numpy.typing as npt
from pydantic import Field, TypeAdapter, ValidationError

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel

from . import published
from .cases import (
    CASES_DIR,
    DATASET_FILE,
    STATISTICS_FILE,
    Case,
    case_files_from_manifest_paths,
    load_case_from_bytes,
)
from .contract import BRATS_2023_GLI, BRATS_2023_GLI_SMALL, BratsContract
from .definition import SHIPPED_DEFINITIONS, load_definition, load_model_bytes
from .errors import CaseContractError, InvalidPredictionError, PreparationError
from .inference import OnnxSegmenter, brain_box
from .metrics import (
    BRATS_2023_GLI_METRICS,
    CaseFailure,
    CaseResult,
    CaseScores,
    MetricsSpec,
    score_or_fail,
)
from .model_contract import MAX_MODEL_BYTES, SUPPORTED_OPSETS, check_model_contract
from .normalise import normalise_modalities
from .prepare import DATA_DIR, MANIFEST_FILE, prepare_dataset
from .published import PublishedSummary
from .score_files import FileScores, FolderScorer, lesionwise_2023_scorer, score_folders
from .synthetic import SyntheticCase, case_id_for, generate_case, write_case

if TYPE_CHECKING:  # pydicom and SimpleITK load only when ingestion is asked for
    from .ingest.entry import Ingestion

__all__ = ["LAYOUT", "PLUGIN", "PLUGIN_REF", "SMALL_PLUGIN_REF", "BratsBenchmark",
           "model_contract_of", "pin_for", "pin_of"]

PLUGIN_REF: Final = api.BenchmarkPin("brats-2023-gli", "1")
#: The version of a pin on another grid: ``1-<X>x<Y>x<Z>`` (at most 16 characters).
_GRID_VERSION: Final = re.compile(r"^1-([1-9][0-9]{0,3})x([1-9][0-9]{0,3})x([1-9][0-9]{0,3})$")
_MAX_DATASET_JSON: Final = 1 << 20
#: Cases a published summary must describe at least (issue 15 enforces it).
SMALL_CELL_MINIMUM: Final = 5
#: A case (a whole volume, or a sliding window over a large crop, on the CPU) within a quarter of
#: an hour; a run within two days (1,251 cases at about a minute each); 6 GiB of data memory
#: (a full-size case takes about 1.2 GiB; the default machine, n2d-standard-2, has 8 GB).
RUN_LIMITS: Final = api.RunLimits(case_seconds=900.0, run_seconds=48 * 3600.0,
                                  memory_bytes=6 << 30)



def pin_for(name: str, base: BratsContract, contract: BratsContract) -> api.BenchmarkPin:
    """The pin of ``contract`` under the plug-in ``name`` whose version ``1`` is ``base``:
    ``<name>/1`` on base's grid, ``<name>/1-XxYxZ`` on another; ``ValueError`` when it differs
    from ``base`` in more than its shape (no pin names it)."""
    if contract.with_shape(base.shape) != base:
        differing = sorted(field for field in BratsContract.model_fields if field != "shape"
                           and getattr(contract, field) != getattr(base, field))
        raise ValueError(f"no {name} pin names a contract that differs in {differing}")
    if contract.shape == base.shape:
        return api.BenchmarkPin(name, PLUGIN_REF.version)
    version = "1-" + "x".join(map(str, contract.shape))
    if not _GRID_VERSION.match(version):
        raise ValueError(f"the grid {contract.grid_text()} cannot be pinned (at most 9999 voxels "
                         "an axis)")
    return api.BenchmarkPin(name, version)


def pin_of(contract: BratsContract) -> api.BenchmarkPin:
    """The pin of ``contract``: ``brats-2023-gli/1`` on the real grid, ``brats-2023-gli/1-XxYxZ``
    on another; ``ValueError`` when it differs from :data:`BRATS_2023_GLI` in more than its
    shape (no pin names it)."""
    return pin_for(PLUGIN_REF.name, BRATS_2023_GLI, contract)


#: The small demo benchmark's pin (``brats-small``, 64x64x48).
SMALL_PLUGIN_REF: Final = pin_of(BRATS_2023_GLI_SMALL)

_H = api.Direction.HIGHER
_L = api.Direction.LOWER
_N = api.Direction.NEUTRAL
#: The summary is a release of Dice per region (:mod:`.published`): the one metric it carries.
_METRICS: Final = (
    api.MetricSpec("dice", "Dice", "", _H, False,
                   "voxel overlap over the whole region (mean over cases, differentially "
                   "private release)"),
)
_GROUPS: Final = (
    api.Group("WT", "WT", "whole tumour (NETC + SNFH + ET)"),
    api.Group("TC", "TC", "tumour core (NETC + ET)"),
    api.Group("ET", "ET", "enhancing tumour"),
)
#: The leaderboard ranks by Dice averaged over the regions (the metric's figure without a group).
PRESENTATION: Final = api.Presentation(
    metrics=_METRICS,
    groups=_GROUPS,
    headline=api.MetricRef("dice"),
    columns=tuple(api.MetricRef("dice", g.key) for g in _GROUPS),
)
_CASE_RESULT: Final[TypeAdapter[CaseResult]] = TypeAdapter(
    Annotated[CaseScores | CaseFailure, Field(discriminator="kind")])


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class _Layout:
    """A prepared dataset's layout under the contract its ``dataset.json`` states."""

    contract: BratsContract

    def group(self, paths: Iterable[str]) -> Mapping[str, tuple[str, ...]]:
        grouped = case_files_from_manifest_paths(paths, self.contract)
        return {case_id: tuple(parts.values()) for case_id, parts in grouped.items()}

    def load(self, files: Mapping[str, bytes]) -> Case:
        return load_case_from_bytes(files, self.contract, require_seg=True)


@dataclass(frozen=True)
class _Runner:
    segmenter: OnnxSegmenter

    def predict(self, case: Case) -> npt.NDArray[np.uint8]:
        """The case's label map. The case's volumes are consumed (:meth:`OnnxSegmenter.
        segment_raw`): :meth:`BratsBenchmark.score` reads its truth alone, and the enclave's
        peak memory is the model's activations, not those plus the volumes (issue 42)."""
        return self.segmenter.segment(case, consume=True)

    @property
    def execution_provider(self) -> api.ExecutionProvider:
        """The provider ONNX Runtime runs the model on (its session's first, preferred one)."""
        return api.ExecutionProvider(self.segmenter.providers[0])


def _tensor(name: str | None, channels: int) -> api.TensorSpec:
    return api.TensorSpec(name, "float32", ("N", channels, "D", "H", "W"))


def model_contract_of(contract: BratsContract) -> api.ModelContract:
    """What a model must look like for ``contract``: its modalities in, its label map's classes
    out, dynamic spatial axes."""
    classes = contract.label_map.n_classes
    return api.ModelContract(
        inputs=(_tensor(None, len(contract.modalities)),),
        outputs=(_tensor(None, classes),),
        opsets=(SUPPORTED_OPSETS.start, SUPPORTED_OPSETS.stop - 1),
        max_bytes=MAX_MODEL_BYTES,
        description=(
            f"one float input [N,{len(contract.modalities)},D,H,W] "
            f"({', '.join(contract.modalities)}) and one float output [N,{classes},D,H,W] "
            f"(background, {', '.join(contract.label_map.tissues)}) with dynamic spatial "
            f"axes, opset {SUPPORTED_OPSETS.start}-{SUPPORTED_OPSETS.stop - 1}"),
    )


#: Where a prepared dataset keeps its parts (every BraTS pin's).
LAYOUT: Final = api.PreparedLayout(data_dir=DATA_DIR, manifest_file=MANIFEST_FILE,
                                   dataset_file=DATASET_FILE, statistics_file=STATISTICS_FILE,
                                   cases_dir=CASES_DIR)


class BratsBenchmark:
    """The BraTS 2023 GLI benchmark (contract, lesion-wise metrics) behind the interface, on the
    grid of its contract, which its :attr:`ref` names (:func:`pin_of`; ``ValueError`` for a
    contract no pin names)."""

    #: The plug-in's name and the contract its version ``1`` names (a subclass, another pin,
    #: names its own; :meth:`_bound` makes an instance of it on another grid).
    plugin_name: ClassVar[str] = PLUGIN_REF.name
    base_contract: ClassVar[BratsContract] = BRATS_2023_GLI

    def __init__(self, contract: BratsContract = BRATS_2023_GLI,
                 metrics: MetricsSpec = BRATS_2023_GLI_METRICS) -> None:
        self.contract = contract
        self.metrics = metrics
        self.ref = pin_for(self.plugin_name, self.base_contract, contract)
        self.description = load_definition(contract, metrics).description
        self.presentation = PRESENTATION
        self.small_cell_minimum = SMALL_CELL_MINIMUM
        self.release_spec = published.release_spec(metrics)
        self._init_machinery(contract)
        # The models of the shipped definitions on this contract (the small grid has its own),
        # else those of the full-size definition re-gridded.
        definitions = [d for d in (load() for load in SHIPPED_DEFINITIONS.values())
                       if d.contract == contract] or [load_definition(contract, metrics)]
        models = {m.name: m for d in definitions
                  for m in (d.reference_model, *d.baseline_models)}
        self._models = tuple(models.values())
        self.shipped_models = tuple(api.ShippedModel(m.name, m.sha256, m.description)
                                    for m in self._models)

    def _init_machinery(self, contract: BratsContract) -> None:
        """What every BraTS pin shares: the run limits, the prepared layout, the model contract
        (the contract's modalities in, its label map's classes out)."""
        self.run_limits = RUN_LIMITS
        self.layout = LAYOUT
        self.model_contract = model_contract_of(contract)

    def _bound(self, contract: BratsContract) -> Self:
        """This plug-in on ``contract`` (another grid of :attr:`base_contract`)."""
        return type(self)(contract, self.metrics)

    def _pin_text(self, contract: BratsContract) -> str:
        """The pin of ``contract`` in a message (a grid may be too large to pin)."""
        try:
            return str(pin_for(self.plugin_name, self.base_contract, contract))
        except ValueError:
            return "no pin (the grid is too large)"

    # -- data contract -------------------------------------------------------------------------

    def data_contract(self) -> api.JsonObject:
        return self.contract.model_dump(mode="json")

    def exact_release(self) -> BratsBenchmark:
        """This plug-in publishing exact (non-private) figures, pinned ``<version>-exact``: only
        for benchmarks whose every data owner consents (never a default)."""
        return api.exact_copy(self)

    def metrics_spec(self) -> api.JsonObject:
        return self.metrics.model_dump(mode="json")

    @property
    def ingestion(self) -> Ingestion:
        """DICOM or native-NIfTI studies into this pin's raw layout (:mod:`.ingest`; needs the
        ``prepare`` extra, so it is imported only when asked for)."""
        from .ingest.entry import Ingestion

        return Ingestion(self.contract)

    def prepare(self, raw_dir: Path, out_dir: Path, *, progress: api.ProgressFn | None = None,
                strict: bool = False) -> api.Prepared:
        try:
            report = prepare_dataset(raw_dir, out_dir, self.contract, progress, strict=strict)
        except PreparationError as exc:
            error = api.PreparationError(str(exc))
            error.rejected = tuple(api.CaseRejection(r.case, r.reason)
                                   for r in getattr(exc, "rejected", ()))
            raise error from exc
        return api.Prepared(
            accepted=report.accepted,
            rejected=tuple(api.CaseRejection(r.case, r.reason) for r in report.rejected),
            dataset_digest=report.dataset_digest,
            statistics=report.statistics.model_dump(mode="json"),
            notes=() if report.layout == "brats2023" else (
                f"read the raw cases in the {report.layout} layout: renamed and relabelled into "
                "the contract's (BraTS2021_XXXXX becomes BraTS-GLI-XXXXX-000)",))

    def pinned(self, version: str) -> Self:
        """This plug-in on the grid the pin's ``version`` names (``1``: 240x240x155;
        ``1-64x64x48``); :class:`~sealbench.benchmarks.interface.PluginNotFoundError` for any
        other version (``1-240x240x155`` included: the real grid's pin is ``1``)."""
        found = _GRID_VERSION.match(version)
        base = self.base_contract
        if version == PLUGIN_REF.version:
            return self if self.contract == base else self._bound(base)
        if found is None:
            raise api.PluginNotFoundError(
                f"benchmark plug-in {self.plugin_name!r} is installed at version "
                f"{PLUGIN_REF.version!r}, not {version!r} (it takes '1' for "
                f"{base.grid_text()} or '1-<X>x<Y>x<Z>' for another grid)")
        x, y, z = (int(g) for g in found.groups())
        bound = self._bound(base.with_shape((x, y, z)))
        if str(bound.ref) != f"{self.plugin_name}/{version}":
            raise api.PluginNotFoundError(f"benchmark plug-in version {version!r} is not "
                                          f"canonical (it would be {bound.ref.version!r})")
        return bound

    def contract_for_dataset(self, dataset_json: bytes) -> BratsContract:
        """This plug-in's contract, when the dataset states it, grid included;
        :class:`CaseContractError` naming the grid (and the pin that takes it) or the fields that
        differ otherwise."""
        if len(dataset_json) > _MAX_DATASET_JSON:
            raise CaseContractError("dataset.json is larger than 1 MiB")
        try:
            doc = json.loads(dataset_json)
            stated = BratsContract.model_validate(doc["contract"])
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise CaseContractError("dataset.json does not state a valid data contract") from exc
        if stated.with_shape(self.contract.shape) == self.contract and stated != self.contract:
            raise CaseContractError(
                f"the dataset's cases are on the grid {stated.grid_text()}, but benchmark "
                f"plug-in {self.ref} takes cases on {self.contract.grid_text()} only (cases on "
                f"{stated.grid_text()} belong to a benchmark pinning {self._pin_text(stated)})")
        if stated != self.contract:
            differing = sorted(name for name in BratsContract.model_fields
                               if getattr(stated, name) != getattr(self.contract, name))
            raise CaseContractError(
                f"the dataset was prepared under another contract (differs in {differing})")
        return self.contract

    def grid_of(self, contract: Mapping[str, Any]) -> api.Grid | None:
        """The grid a BraTS contract fixes: its ``shape`` and ``spacing_mm`` (the contract's own
        keys; a contract without ``shape`` fixes none). Read leniently, so that a registered
        contract can be compared before it is validated whole: :class:`~api.GridError` when
        ``shape`` is not a list of positive voxel counts or ``spacing_mm`` not one of positive
        millimetres of the same length."""
        if "shape" not in contract:
            return None
        shape, spacing = contract.get("shape"), contract.get("spacing_mm")
        if not (isinstance(shape, list | tuple) and 1 <= len(shape) <= 4
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1_000_000
                        for n in shape)):
            raise api.GridError(f"the grid shape {_short(shape)} is not a list of positive "
                                "voxel counts")
        if spacing is None:
            return api.Grid(tuple(shape))
        if not (isinstance(spacing, list | tuple) and len(spacing) == len(shape)
                and all(isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1e6
                        for v in spacing)):
            raise api.GridError(f"the grid spacing {_short(spacing)} is not {len(shape)} "
                                "positive millimetres")
        return api.Grid(tuple(shape), tuple(float(v) for v in spacing))

    def with_data_contract(self, doc: Mapping[str, Any]) -> Self:
        """This plug-in, when ``doc`` is its contract (grid included: another grid is another
        pin, ``brats-small``'s is ``brats-2023-gli/1-64x64x48``); :class:`CaseContractError`
        naming what differs otherwise."""
        try:
            registered = BratsContract.model_validate(doc)
        except ValidationError as exc:
            raise CaseContractError(
                f"not a BraTS data contract ({exc.error_count()} errors)") from exc
        if registered.with_shape(self.contract.shape) == self.contract and (
                registered != self.contract):
            raise CaseContractError(
                f"the data contract's grid {registered.grid_text()} is not the grid of "
                f"{self.ref} ({self.contract.grid_text()}); a benchmark on that grid pins "
                f"{self._pin_text(registered)}")
        if registered != self.contract:
            differing = sorted(name for name in BratsContract.model_fields
                               if getattr(registered, name) != getattr(self.contract, name))
            raise CaseContractError(f"the data contract differs from {self.ref}'s in "
                                    f"{differing}")
        return self

    def definitions(self) -> Mapping[str, api.JsonObject]:
        """The shipped definitions (``brats``, ``brats-small``), each with the pin of its
        contract's grid."""
        out: dict[str, api.JsonObject] = {}
        for name, load in SHIPPED_DEFINITIONS.items():
            definition = load()
            out[name] = {**definition.model_dump(mode="json"),
                         "plugin": str(pin_of(definition.contract))}
        return out

    def demo_variants(self) -> tuple[api.DemoVariant, ...]:
        small = self._bound(self.base_contract.with_shape(BRATS_2023_GLI_SMALL.shape))
        return (api.DemoVariant("small", small, self.contract.n_voxels / small.contract.n_voxels),
                api.DemoVariant("full", self, 1.0))

    def open_dataset(self, dataset_json: bytes) -> _Layout:
        return _Layout(self.contract_for_dataset(dataset_json))

    # -- model contract ------------------------------------------------------------------------

    def check_model(self, model_bytes: bytes) -> api.ModelReport:
        report = check_model_contract(model_bytes, self.contract)
        return api.ModelReport(
            inputs=(_tensor(report.input_name, report.input_channels),),
            outputs=(_tensor(report.output_name, report.output_classes),),
            opset=report.opset,
            details={"input": report.input_name, "output": report.output_name,
                     "input_channels": report.input_channels,
                     "output_classes": report.output_classes, "opset": report.opset})

    def load_model(self, model_bytes: bytes) -> _Runner:
        return _Runner(OnnxSegmenter(model_bytes, self.contract))

    # -- scoring and summary -------------------------------------------------------------------

    def score(self, case: Case, prediction: Any) -> CaseResult:
        if case.seg is None:
            return CaseFailure(case_id=case.case_id, reason="the case has no ground truth")
        if not isinstance(prediction, np.ndarray):
            return CaseFailure(case_id=case.case_id,
                               reason=str(InvalidPredictionError("prediction is not an array")))
        return score_or_fail(case.case_id, prediction, case.seg, self.metrics,
                             self.contract.spacing_mm)

    def score_files(self, truth_dir: Path, predictions_dir: Path, *, keep_going: bool = False,
                    on_case: Callable[[str, int, int], None] | None = None) -> FileScores:
        """Predictions on disk scored against truth on disk with this pin's metrics, files
        paired as the official evaluator pairs them (:func:`.score_files.score_folders`)."""
        return score_folders(truth_dir, predictions_dir, self._folder_scorer(),
                             keep_going=keep_going, on_case=on_case)

    def _folder_scorer(self) -> FolderScorer:
        return lesionwise_2023_scorer(self.metrics)

    def failure(self, case_id: str, reason: str) -> CaseFailure:
        return CaseFailure(case_id=case_id, reason=reason)

    def summarise(self, results: Sequence[api.CaseResult],
                  noise: rel.NoiseSource) -> PublishedSummary:
        ours = [r for r in results if isinstance(r, CaseScores | CaseFailure)]
        if len(ours) != len(results):
            raise TypeError("results of another benchmark cannot be summarised here")
        return published.publish(ours, self.metrics, self.release_spec, noise)

    def parse_summary(self, doc: Mapping[str, Any]) -> PublishedSummary:
        try:
            summary = PublishedSummary.model_validate(doc)
        except ValidationError as exc:
            raise api.SummaryError(
                f"not a {self.ref} summary ({exc.error_count()} errors)") from exc
        self._check_summary_ids(summary)
        if summary.n_cases != summary.release.n_cases:
            raise api.SummaryError("the summary's case count is not its release's")
        if not summary.release.matches(published.read_spec(summary, self.release_spec)):
            raise api.SummaryError(
                f"the summary's release is not the one {self.ref} declares (content or privacy "
                f"loss: epsilon {self.release_spec.epsilon}, delta {self.release_spec.delta} "
                "per release)")
        return summary

    def _check_summary_ids(self, summary: PublishedSummary) -> None:
        """Refuse a summary of another metric definition (id and version)."""
        if (summary.metrics_id, summary.metrics_version) != (self.metrics.metrics_id,
                                                             self.metrics.version):
            raise api.SummaryError(
                f"summary of metrics {summary.metrics_id}/{summary.metrics_version}, expected "
                f"{self.metrics.metrics_id}/{self.metrics.version}")

    def parse_case_result(self, doc: Mapping[str, Any]) -> CaseResult:
        try:
            return _CASE_RESULT.validate_python(doc)
        except ValidationError as exc:
            raise api.SummaryError(
                f"not a {self.ref} case result ({exc.error_count()} errors)") from exc

    def figures(self, summary: api.PublicSummary) -> tuple[api.Figure, ...]:
        if not isinstance(summary, PublishedSummary):
            raise TypeError("a summary of another benchmark")
        return published.figures(summary, self.metrics)

    def pool(self, summaries: Sequence[api.PublicSummary]) -> api.PooledFigures:
        ours = [x for x in summaries if isinstance(x, PublishedSummary)]
        if len(ours) != len(summaries):
            raise TypeError("summaries of another benchmark")
        return published.pool(ours, self.metrics)

    # -- shipped models and demo data ----------------------------------------------------------

    def model_bytes(self, name: str) -> bytes:
        for ref in self._models:
            if ref.name == name:
                return load_model_bytes(ref)
        raise KeyError(name)

    def write_demo_dataset(self, out_dir: Path, n_cases: int, *, seed: int = 0) -> tuple[str, ...]:
        """Synthetic cases from seeds ``seed..``, on this contract's grid (case index: the seed
        modulo 100000, as case ids have five digits)."""
        ids = []
        for case_seed in range(seed, seed + n_cases):
            case_id = self._demo_case_id(case_seed % 100_000)
            write_case(self._demo_case(case_seed), out_dir, case_id, self.contract)
            ids.append(case_id)
        return tuple(ids)

    def _demo_case(self, seed: int) -> SyntheticCase:
        """The demo case of ``seed`` on this contract (the geometric 2023 generator)."""
        return generate_case(seed, self.contract.shape, self.contract)

    def _demo_case_id(self, index: int) -> str:
        """A demo case's id (``BraTS-GLI-<index>-000``)."""
        return case_id_for(index)

    def demo_model_input(self, seed: int = 0, *, size_divisor: int = 16) -> api.DemoModelInput:
        """The synthetic case of ``seed`` on the small demo grid (whatever grid this plug-in is
        bound to: a check needs a realistic input, not a full-size one), as
        :class:`OnnxSegmenter` feeds it to the model: modalities z-scored inside the brain,
        cropped to the brain's box and zero-padded to a multiple of ``size_divisor``."""
        contract = BRATS_2023_GLI_SMALL
        case = generate_case(seed, contract.shape, contract)
        image = normalise_modalities({m: case.modalities[m] for m in contract.modalities})
        box = brain_box(image) or tuple(slice(0, n) for n in image.shape[1:])
        cropped = image[(slice(None), *box)]
        pad = [(0, 0)] + [(0, -(-n // size_divisor) * size_divisor - n)
                          for n in cropped.shape[1:]]
        array = np.pad(cropped, pad).astype(np.float32)[None]
        spatial = "x".join(str(n) for n in array.shape[2:])
        return api.DemoModelInput(
            array, f"demo case {case_id_for(seed % 100_000)} of {self.ref.name} (synthetic, "
            f"{contract.grid_text()} grid, normalised and cropped as the segmenter does: "
            f"{spatial})")


#: The entry point's object (``brats-2023-gli``).
PLUGIN: Final[api.Benchmark] = BratsBenchmark()
