"""The BraTS 2025 pins as plug-ins: ``brats-2025-gli/1`` and ``brats-2025-met/1``.

Each is the BraTS plug-in machinery (:class:`~.plugin.BratsBenchmark`: preparation, case
layout, ONNX segmenter, pins per grid, exact releases) on a 2025 contract (the 2023 modalities
and grid, label 4 RC added, ``BraTS-GLI-`` / ``BraTS-MET-`` case names) with the official 2025
scoring (:mod:`.scoring2025`, :mod:`.results2025`) in place of the 2023 lesion-wise metrics. A
model outputs five classes (background, NETC, SNFH, ET, RC). Declared in the entry-point group
``sealbench.benchmarks`` as ``brats-2025-gli`` and ``brats-2025-met`` (``pyproject.toml``).

Their demo data come from the task's generator (:mod:`.tasks2025`): post-treatment cases with a
resection cavity for ``gli``, several metastases for ``met``. Each ships a definition with a
reference U-Net and a weak baseline (:func:`.definition.load_2025_definition`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, ClassVar, Final, Self

import numpy as np
import numpy.typing as npt
from pydantic import Field, TypeAdapter, ValidationError

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel

from . import published
from .cases import Case
from .contract import BRATS_2025_GLI, BRATS_2025_MET, BratsContract
from .definition import SHIPPED_2025_DEFINITIONS, BenchmarkDefinition
from .errors import InvalidPredictionError
from .inference import OnnxSegmenter
from .metrics import CaseFailure
from .plugin import SMALL_CELL_MINIMUM, BratsBenchmark, _Runner, pin_for
from .results2025 import (
    RELEASED_2025,
    CaseResult2025,
    CaseScores2025,
    Metrics2025,
    contributions,
    figures_as_v1,
    release_spec_v1,
)
from .results2025 import figures as figures_2025
from .results2025 import release_spec as release_spec_2025
from .score_files import FolderScorer, official_2025_scorer
from .scoring2025 import (
    GLI_2025,
    MET_2025,
    Scoring2025,
    score_case,
    score_stored_volumes,
    summary_json,
)
from .synthetic import SyntheticCase
from .tasks2025 import Kind, generate_task_case

__all__ = ["GLI_PLUGIN", "MET_PLUGIN", "Brats2025Benchmark", "Brats2025Gli", "Brats2025Met"]

#: A case result of a 2025 pin: its scores or a flagged failure (a 2023 pin's).
_CASE_RESULT: Final[TypeAdapter[CaseResult2025]] = TypeAdapter(
    Annotated[CaseScores2025 | CaseFailure, Field(discriminator="kind")])
_H = api.Direction.HIGHER
_METRICS: Final = (
    api.MetricSpec("pq_dsc", "PQ", "", _H, False,
                   "panoptic quality: mean Dice of the matched lesions x F1 of lesion detection "
                   "(mean over the cases where the group is defined, as the official parser "
                   "averages; differentially private release)"),
    api.MetricSpec("dsc", "Dice", "", _H, False,
                   "voxel overlap over the whole group (mean over the cases where the group is "
                   "defined, as the official parser averages; differentially private release)"),
)
_GROUP_TEXT: Final = {
    "netc": "non-enhancing tumour core", "snfh": "surrounding FLAIR hyperintensity",
    "et": "enhancing tumour", "rc": "resection cavity", "tc": "tumour core (NETC + ET)",
    "wt": "whole tumour (NETC + SNFH + ET)"}


def _presentation(config: Scoring2025) -> api.Presentation:
    groups = tuple(api.Group(g.name, g.name.upper(), _GROUP_TEXT[g.name])
                   for g in config.groups)
    return api.Presentation(metrics=_METRICS, groups=groups, headline=api.MetricRef("pq_dsc"),
                            columns=tuple(api.MetricRef("pq_dsc", g.key) for g in groups))


class Brats2025Benchmark(BratsBenchmark):
    """A BraTS 2025 task behind the interface, on the grid of its contract (its :attr:`ref`:
    ``<name>/1`` on 240x240x155, ``<name>/1-XxYxZ`` on another)."""

    scoring: ClassVar[Scoring2025]
    demo_kind: ClassVar[Kind]
    case_prefix: ClassVar[str]
    title: ClassVar[str]

    def __init__(self, contract: BratsContract | None = None) -> None:
        contract = self.base_contract if contract is None else contract
        config = self.scoring
        self.contract = contract
        self.spec = Metrics2025.of(config)
        self.ref = pin_for(self.plugin_name, self.base_contract, contract)
        labels = zip(contract.label_map.tissues, contract.label_map.values, strict=True)
        self.description = (
            f"{self.title} segmentation in the BraTS 2025 format: four MRI modalities "
            f"({', '.join(contract.modalities)}) on {contract.grid_text()}; labels "
            f"{', '.join(f'{t}={v}' for t, v in labels)}; "
            f"scored as the official evaluator ({config.source}) scores it: per group "
            f"({', '.join(g.name for g in config.groups)}) instance-wise Dice, NSD and HD95 after "
            "maximum bipartite matching, detection F1 and panoptic quality, and global Dice, "
            "NSD and HD95.")
        self.presentation = _presentation(config)
        self.small_cell_minimum = SMALL_CELL_MINIMUM
        self.release_spec = release_spec_2025(config)
        self._init_machinery(contract)
        # The task's shipped models (trained on the full grid; on another grid, as they are).
        self._models = tuple({m.name: m for d in self._shipped().values()
                              for m in (d.reference_model, *d.baseline_models)}.values())
        self.shipped_models = tuple(api.ShippedModel(m.name, m.sha256, m.description)
                                    for m in self._models)

    def _bound(self, contract: BratsContract) -> Self:
        return type(self)(contract)

    def metrics_spec(self) -> api.JsonObject:
        return self.spec.model_dump(mode="json")

    def _shipped(self) -> dict[str, BenchmarkDefinition]:
        """The shipped definitions of this task (:data:`.definition.SHIPPED_2025_DEFINITIONS`
        whose metrics are this pin's)."""
        return {name: d for name, d in ((n, load()) for n, load in
                                         SHIPPED_2025_DEFINITIONS.items())
                if d.metrics == self.spec}

    def definitions(self) -> Mapping[str, api.JsonObject]:
        """The task's shipped definition (``brats-2025-gli`` or ``brats-2025-met``), with its
        pin."""
        return {name: {**d.model_dump(mode="json"),
                       "plugin": str(pin_for(self.plugin_name, self.base_contract, d.contract))}
                for name, d in self._shipped().items()}

    def load_model(self, model_bytes: bytes) -> _Runner:
        """The model's segmenter, its output post-processed only as the model declares (the
        2023 default is tuned for four classes: a 2025 model that declares nothing gets none,
        as ``evaluate2025`` scores it)."""
        return _Runner(OnnxSegmenter(model_bytes, self.contract, undeclared=None))

    # -- scoring files outside an enclave (a challenge's validation phase) ---------------------

    def score_volumes(self, prediction: npt.NDArray[np.generic], truth: npt.NDArray[np.generic],
                      zooms: Sequence[float]) -> dict[str, dict[str, Any]]:
        """One case's official per-group dictionaries from its stored NIfTI volumes ((x, y, z)
        arrays and the header's zooms), as the official command scores the files
        (:func:`.scoring2025.score_stored_volumes`); :class:`InvalidPredictionError` for a
        label no group names or a shape mismatch (``benchmark score --pin`` scores whole
        folders through :meth:`score_files`)."""
        return score_stored_volumes(prediction, truth, zooms, self.scoring)

    def _folder_scorer(self) -> FolderScorer:
        """The official per-group dictionaries and the official parser's CSV."""
        return official_2025_scorer(self.scoring)

    @staticmethod
    def official_summary(rows: Sequence[tuple[str, Mapping[str, Mapping[str, Any]] | str]],
                         missings: Sequence[str] = ()) -> dict[str, Any]:
        """The official summary JSON of scored rows (:func:`.scoring2025.summary_json`)."""
        return summary_json(rows, missings)

    # -- scoring and summary -------------------------------------------------------------------

    # The 2025 results are not the 2023 ones: these pins override the 2023 pin's result types
    # (each is still an interface CaseResult), hence the ignores.
    def score(self, case: Case, prediction: Any) -> CaseResult2025:  # type: ignore[override]
        if case.seg is None:
            return CaseFailure(case_id=case.case_id, reason="the case has no ground truth")
        if not isinstance(prediction, np.ndarray):
            return CaseFailure(case_id=case.case_id,
                               reason=str(InvalidPredictionError("prediction is not an array")))
        try:
            groups = score_case(prediction, case.seg, self.contract.spacing_mm, self.scoring)
        except InvalidPredictionError as exc:
            return CaseFailure(case_id=case.case_id, reason=str(exc))
        return CaseScores2025.from_official(case.case_id, self.scoring.task, groups)

    def summarise(self, results: Sequence[api.CaseResult],
                  noise: rel.NoiseSource) -> published.PublishedSummary:
        ours = [r for r in results if isinstance(r, CaseScores2025 | CaseFailure)]
        if len(ours) != len(results):
            raise TypeError("results of another benchmark cannot be summarised here")
        if not ours:
            raise ValueError("cannot summarise zero cases")
        made = rel.release(contributions(ours, self.scoring), self.release_spec, noise)
        return published.PublishedSummary(metrics_id=self.spec.metrics_id,
                                          metrics_version=self.spec.version,
                                          n_cases=made.n_cases, release=made)

    def _check_summary_ids(self, summary: published.PublishedSummary) -> None:
        if (summary.metrics_id != self.spec.metrics_id
                or summary.metrics_version not in (1, self.spec.version)):
            raise api.SummaryError(
                f"summary of metrics {summary.metrics_id}/{summary.metrics_version}, expected "
                f"{self.spec.metrics_id}/{self.spec.version} (or 1, read as published)")

    def parse_summary(self, doc: Mapping[str, Any]) -> published.PublishedSummary:
        """A summary of this pin: metric definition version 2 (means over the defined cases),
        or a version 1 summary published before, whose release is version 1's (an undefined
        group counted as 1) at this pin's privacy loss; read, never made."""
        summary = super().parse_summary(doc) if _version(doc) != 1 else self._parse_v1(doc)
        return summary

    def _parse_v1(self, doc: Mapping[str, Any]) -> published.PublishedSummary:
        try:
            summary = published.PublishedSummary.model_validate(doc)
        except ValidationError as exc:
            raise api.SummaryError(
                f"not a {self.ref} summary ({exc.error_count()} errors)") from exc
        self._check_summary_ids(summary)
        spec = release_spec_v1(self.scoring, epsilon=self.release_spec.epsilon,
                               delta=self.release_spec.delta)
        if self.release_spec.exact:
            spec = replace(spec, exact=True)
        if summary.n_cases != summary.release.n_cases or not summary.release.matches(spec):
            raise api.SummaryError(f"the summary's release is not the one {self.ref} declared "
                                   "in metric definition version 1")
        return summary

    def parse_case_result(  # type: ignore[override]
            self, doc: Mapping[str, Any]) -> CaseResult2025:
        try:
            return _CASE_RESULT.validate_python(doc)
        except ValidationError as exc:
            raise api.SummaryError(
                f"not a {self.ref} case result ({exc.error_count()} errors)") from exc

    def _groups(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.scoring.groups)

    def figures(self, summary: api.PublicSummary) -> tuple[api.Figure, ...]:
        if not isinstance(summary, published.PublishedSummary):
            raise TypeError("a summary of another benchmark")
        return self.pool([summary]).figures

    def pool(self, summaries: Sequence[api.PublicSummary]) -> api.PooledFigures:
        """Each group's mean over the cases where it is defined, pooled over the sites
        (:func:`.results2025.figures`); version 1 summaries as they were published
        (:func:`.published.pool_releases`), and both versions together on version 1's scale
        (:func:`.results2025.figures_as_v1`). ``ValueError`` for summaries of different
        content or privacy."""
        ours = [x for x in summaries if isinstance(x, published.PublishedSummary)]
        if len(ours) != len(summaries):
            raise TypeError("summaries of another benchmark")
        if not ours:
            raise ValueError("pooling needs at least one summary")
        versions = {x.metrics_version for x in ours}
        if versions == {1}:
            return published.pool_releases(ours, self._groups(), RELEASED_2025)
        if len({x.release.exact for x in ours}) != 1:
            raise ValueError("the summaries release different content")
        if len(versions) != 1:
            return api.PooledFigures(
                figures=tuple(figures_as_v1([x.release for x in ours], self._groups())),
                n_sites=len(ours), n_cases=sum(x.n_cases for x in ours))
        releases = [x.release for x in ours]
        shapes = {tuple((c.key, c.low, c.high) for c in r.columns) for r in releases}
        if len(shapes) != 1 or len({r.exact for r in releases}) != 1:
            raise ValueError("the summaries release different content")
        return api.PooledFigures(figures=tuple(figures_2025(releases, self._groups())),
                                 n_sites=len(ours), n_cases=sum(r.n_cases for r in releases))

    def _demo_case_id(self, index: int) -> str:
        """``BraTS-<GLI|MET>-<index>-000``."""
        return f"{self.case_prefix}-{index:05d}-000"

    def _demo_case(self, seed: int) -> SyntheticCase:
        """The demo case of ``seed``: the task's generator (:mod:`.tasks2025`: a resection
        cavity for ``gli``, several metastases for ``met``) on the geometric anatomy, which
        needs no extra package (as the 2023 pin's demo data)."""
        return generate_task_case(self.demo_kind, seed, self.contract.shape, self.contract,
                                  anatomy="geometric")


class Brats2025Gli(Brats2025Benchmark):
    """``brats-2025-gli``: adult glioma, pre- and post-treatment (``config_gli``)."""

    plugin_name = "brats-2025-gli"
    base_contract = BRATS_2025_GLI
    scoring = GLI_2025
    demo_kind = "post-treatment"
    case_prefix = "BraTS-GLI"
    title = "Adult glioma (pre- and post-treatment)"


class Brats2025Met(Brats2025Benchmark):
    """``brats-2025-met``: brain metastases (``config_mets``)."""

    plugin_name = "brats-2025-met"
    base_contract = BRATS_2025_MET
    scoring = MET_2025
    demo_kind = "metastases"
    case_prefix = "BraTS-MET"
    title = "Brain metastases"


def _version(doc: Mapping[str, Any]) -> object:
    return doc.get("metrics_version") if isinstance(doc, Mapping) else None


#: The entry points' objects (``brats-2025-gli``, ``brats-2025-met``).
GLI_PLUGIN: Final[api.Benchmark] = Brats2025Gli()
MET_PLUGIN: Final[api.Benchmark] = Brats2025Met()
