"""WDBC as a :class:`~sealbench.benchmarks.interface.Benchmark` plug-in: ``wdbc/1``.

Breast-cancer diagnosis from fine-needle aspirate features (:mod:`.data`): each case is one row
of 30 features and a benign/malignant label, a model returns P(malignant), and the public
summary is a differentially private release (:mod:`.summary`: the Brier score and per-class
counts in 20 logit-spaced score bins, at epsilon 1, delta 1e-6 per release) from which AUROC,
sensitivity and specificity at the fixed threshold 0.5 and the Brier score are computed, for a
site and pooled over sites. Pooled inside a TEE, the AUROC is computed exactly over every case
and released on its own (:mod:`.private_auroc`). Declared in the entry-point group
``sealbench.benchmarks`` as ``wdbc`` (``pyproject.toml``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np

from sealbench.benchmarks import interface as api
from sealbench.benchmarks import release as rel

from . import binned, private_auroc
from . import summary as s
from .data import SITES, WdbcCase, load_wdbc, split_cases, write_raw_csv
from .model import MODEL_CONTRACT, OnnxClassifier, Prediction, check_model
from .prepared import CONTRACT, LAYOUT, RAW_FILE, WdbcLayout, open_dataset, prepare

__all__ = ["PLUGIN", "PLUGIN_REF", "SHIPPED_MODELS", "WdbcBenchmark"]

PLUGIN_REF: Final = api.BenchmarkPin("wdbc", "1")
#: The registry name of the shipped definition.
DEFINITION_NAME: Final = "wdbc-diagnosis"
#: The fewest cases the benchmark admits in a published summary (issue 15 enforces it).
SMALL_CELL_MINIMUM: Final = 10
#: A row of 30 features takes milliseconds: 10 s a case, an hour a run (569 cases at most in
#: the UCI data), 2 GiB of data memory for the whole enclave process.
RUN_LIMITS: Final = api.RunLimits(case_seconds=10.0, run_seconds=3600.0, memory_bytes=2 << 30)

#: The shipped models (``model/<name>.onnx``), reference first, bound by the SHA-256 recorded
#: when :mod:`.train` made them.
SHIPPED_MODELS: Final = (
    api.ShippedModel(
        "wdbc_logreg",
        "sha256:cf5188f86bdc264c2fea40938cea56b69754d213c2cb21b23f384de39a6d43f3",
        "standardised logistic regression (C=1) on the 171-case training split"),
    api.ShippedModel(
        "wdbc_mlp",
        "sha256:8af031192f20cb5640309a89d652b7dd0c7824479ca201f7ac21221a834c533e",
        "standardised MLP (16 hidden units, seed 0) on the same split: overconfident"),
)

_H, _L, _N = api.Direction.HIGHER, api.Direction.LOWER, api.Direction.NEUTRAL
PRESENTATION: Final = api.Presentation(
    metrics=(
        api.MetricSpec("auroc", "AUROC", "", _H, True,
                       "area under the ROC curve, differentially private release: per site on "
                       "20 logit-spaced score bins (same-bin pairs count 1/2), 95% interval with "
                       "release noise and DeLong sampling error; pooled in a TEE computed exactly "
                       "over every case and released alone (Laplace), 95% interval with the "
                       "noise and the Birnbaum-Klose sampling bound"),
        api.MetricSpec("sensitivity", "Sensitivity", "", _H, True,
                       f"malignant cases called malignant at P >= {s.THRESHOLD}, differentially "
                       "private release; 95% interval with release noise and sampling error"),
        api.MetricSpec("specificity", "Specificity", "", _H, True,
                       f"benign cases called benign at P < {s.THRESHOLD}, differentially "
                       "private release; 95% interval with release noise and sampling error"),
        api.MetricSpec("brier", "Brier", "", _L, True,
                       "mean squared error of P(malignant) (an unlabelled case counts 1), "
                       "differentially private release"),
        api.MetricSpec("ece", "ECE", "", _L, True,
                       "expected calibration error: not released under differential privacy"),
        api.MetricSpec("calibration_slope", "Cal. slope", "", _N, True,
                       "logistic recalibration slope: not released under differential privacy"),
        api.MetricSpec("n_cases", "Cases", "cases", _N, True, "cases evaluated"),
    ),
    groups=(),
    headline=api.MetricRef("auroc"),
    columns=(api.MetricRef("auroc"), api.MetricRef("sensitivity"),
             api.MetricRef("specificity"), api.MetricRef("brier")),
)


class _Runner:
    def __init__(self, model_bytes: bytes) -> None:
        self._model = OnnxClassifier(model_bytes)

    def predict(self, case: WdbcCase) -> Prediction:
        return self._model.predict(case)

    @property
    def execution_provider(self) -> api.ExecutionProvider:
        """Always the CPU: the classifier's session asks for nothing else."""
        return api.ExecutionProvider(self._model.providers[0])


def _check_ours(results: Sequence[api.CaseResult], action: str) -> None:
    if not all(isinstance(r, s.WdbcCaseResult) for r in results):
        raise TypeError(f"results of another benchmark cannot be {action} here")


class WdbcBenchmark:
    """The WDBC diagnostic classification benchmark behind the interface."""

    def __init__(self) -> None:
        self.ref = PLUGIN_REF
        self.description = (
            "Breast-cancer diagnosis on the Wisconsin Diagnostic Breast Cancer data (real "
            "cases: 30 features of a digitised fine-needle aspirate, benign or malignant); "
            "models output P(malignant); scored on the whole dataset and published as a "
            "differentially private release (epsilon "
            f"{s.RELEASE_SPEC.epsilon:g}, delta {s.RELEASE_SPEC.delta:g} per release): AUROC on "
            f"20 logit-spaced score bins, sensitivity and specificity at P >= {s.THRESHOLD}, "
            "Brier score, each with a 95% interval including the release noise.")
        self.presentation = PRESENTATION
        self.model_contract = MODEL_CONTRACT
        self.layout = LAYOUT
        self.small_cell_minimum = SMALL_CELL_MINIMUM
        self.release_spec = s.RELEASE_SPEC
        self.shipped_models = SHIPPED_MODELS
        self.run_limits = RUN_LIMITS

    # -- data contract -------------------------------------------------------------------------

    def data_contract(self) -> api.JsonObject:
        return CONTRACT.model_dump(mode="json")

    def exact_release(self) -> WdbcBenchmark:
        """This plug-in publishing exact (non-private) figures, pinned ``<version>-exact``: only
        for benchmarks whose every data owner consents (never a default)."""
        return api.exact_copy(self)

    def metrics_spec(self) -> api.JsonObject:
        spec = self.release_spec
        return {"summary": s.SUMMARY_ID, "version": s.SUMMARY_VERSION,
                "threshold": s.THRESHOLD, "positive_class": "malignant",
                "score_bins": binned.SCORE_BIN_SCHEME,
                "release": {"columns": [c.key for c in spec.columns],
                            "categories": {c.key: list(c.keys) for c in spec.categories},
                            **({"exact": True} if spec.exact else
                               {"epsilon": spec.epsilon, "delta": spec.delta})},
                "auroc_interval": "release noise (delta method) + DeLong on the bins",
                "proportion_interval": "release noise (delta method) + binomial (Wilson centre)",
                "failed_case_score": "the worst: 0 if malignant, 1 if benign; unlabelled: "
                                     "Brier 1"}

    def prepare(self, raw_dir: Path, out_dir: Path, *, progress: api.ProgressFn | None = None,
                strict: bool = False) -> api.Prepared:
        return prepare(raw_dir, out_dir, progress=progress, strict=strict)

    def open_dataset(self, dataset_json: bytes) -> WdbcLayout:
        return open_dataset(dataset_json)

    # -- model contract ------------------------------------------------------------------------

    def check_model(self, model_bytes: bytes) -> api.ModelReport:
        return check_model(model_bytes)

    def load_model(self, model_bytes: bytes) -> _Runner:
        return _Runner(model_bytes)

    # -- scoring and summary -------------------------------------------------------------------

    def score(self, case: WdbcCase, prediction: Any) -> s.WdbcCaseResult:
        if not isinstance(prediction, Prediction):
            return s.WdbcCaseResult(case_id=case.case_id, malignant=case.malignant, score=None,
                                    reason="the prediction is not a probability")
        if prediction.score is None:
            return s.WdbcCaseResult(case_id=case.case_id, malignant=case.malignant, score=None,
                                    reason=prediction.reason or "no probability")
        score = float(prediction.score)
        if not (np.isfinite(score) and 0.0 <= score <= 1.0):
            return s.WdbcCaseResult(case_id=case.case_id, malignant=case.malignant, score=None,
                                    reason="the prediction is not a probability")
        return s.WdbcCaseResult(case_id=case.case_id, malignant=case.malignant, score=score)

    def failure(self, case_id: str, reason: str) -> s.WdbcCaseResult:
        return s.WdbcCaseResult(case_id=case_id, malignant=None, score=None, reason=reason)

    def summarise(self, results: Sequence[api.CaseResult],
                  noise: rel.NoiseSource) -> s.WdbcSummary:
        _check_ours(results, "summarised")
        return s.summarise(results, str(self.ref), noise, self.release_spec)

    def parse_summary(self, doc: Mapping[str, Any]) -> s.WdbcSummary:
        return self._parse(doc, self.release_spec)

    def _parse(self, doc: Mapping[str, Any], spec: rel.ReleaseSpec) -> s.WdbcSummary:
        summary = s.parse_summary(doc, spec)
        if summary.plugin != str(self.ref):
            raise api.SummaryError(f"summary of {summary.plugin}, expected {self.ref}")
        return summary

    # pooled in an aggregator (api.PoolsExactly): the AUROC computed exactly over every case
    # and released on its own (Laplace), the breakdown beside it (summary.py, private_auroc.py)

    def pooled_summary(self, results: Sequence[api.CaseResult],
                       noise: rel.NoiseSource) -> s.WdbcSummary:
        _check_ours(results, "pooled")
        return s.pooled_summary(results, str(self.ref), noise, self.release_spec)

    def parse_pooled_summary(self, doc: Mapping[str, Any]) -> s.WdbcSummary:
        summary = s.parse_pooled_summary(doc, self.release_spec)
        if summary.plugin != str(self.ref):
            raise api.SummaryError(f"summary of {summary.plugin}, expected {self.ref}")
        return summary

    @property
    def pooled_release_spec(self) -> rel.ReleaseSpec:
        """The breakdown's release, carrying the headline AUROC's: its ``loss`` is the whole
        pooled release's (:class:`.summary.PooledReleaseSpec`), what a pool debits."""
        return s.pooled_release_spec(self.release_spec)

    def parse_case_result(self, doc: Mapping[str, Any]) -> s.WdbcCaseResult:
        return s.parse_case_result(doc)

    @property
    def headline_spread(self) -> float:
        """The AUROC's typical per-case spread for planning (:class:`sealbench.benchmarks.
        planning.PlansFigures`): its sampling variance is at most ``A(1 - A)/min(P, N)``
        (Birnbaum-Klose), ``3·A(1 - A)/n`` at the declared class share of a third, so ``s =
        √(3·A(1 - A))``: 0.3 at an AUROC of 0.97, the shipped models' on the demo sites."""
        return 0.3

    def figure_noise_se(self, metric: str, n_cases: int, *, epsilon: float,
                        tee_pooled: bool) -> float | None:
        """The release noise's standard error on the TEE-pooled AUROC over ``n_cases``, a
        pooled release costing ``epsilon`` in all (:class:`sealbench.benchmarks.planning.
        StatesFigureNoise`): its headline share of ``epsilon`` buys Laplace noise of scale
        ``Δ(n, k)/ε_A`` on the AUROC (:mod:`.private_auroc`), standard deviation √2 times
        that. None for every other figure (their noise follows from the release's columns)
        and for a site's AUROC, read from its noisy score bins."""
        if metric != "auroc" or not tee_pooled or n_cases < 2 or not epsilon > 0:
            return None
        floor = private_auroc.floor_of(n_cases, s.MIN_CLASS_SHARE)
        scale = float(floor.sensitivity) / (s.AUROC_EPSILON_SHARE * epsilon)
        return math.sqrt(2.0) * scale

    def figures(self, summary: api.PublicSummary) -> tuple[api.Figure, ...]:
        if not isinstance(summary, s.WdbcSummary):
            raise TypeError("a summary of another benchmark")
        return s.figures(summary)

    def pool(self, summaries: Sequence[api.PublicSummary]) -> api.PooledFigures:
        ours = [x for x in summaries if isinstance(x, s.WdbcSummary)]
        if len(ours) != len(summaries):
            raise TypeError("summaries of another benchmark")
        return s.pool(ours, self.release_spec)

    # -- shipped models, definitions and demo data ---------------------------------------------

    def definitions(self) -> Mapping[str, api.JsonObject]:
        """The shipped definition (``benchmark create --definition wdbc``): this plug-in's
        contract and metrics, the logistic regression as reference model and the MLP as a
        baseline, both bound by SHA-256; the evaluation image is filled in at publication."""

        def model(shipped: api.ShippedModel) -> api.JsonObject:
            return {"name": shipped.name, "file": f"{shipped.name}.onnx",
                    "sha256": shipped.sha256, "description": shipped.description}

        reference, *baselines = self.shipped_models
        return {"wdbc": {
            "format": "sealbench/benchmark-definition", "format_version": 1,
            "plugin": str(self.ref), "name": DEFINITION_NAME, "version": "1.0.0",
            "description": self.description, "contract": self.data_contract(),
            "metrics": self.metrics_spec(), "reference_model": model(reference),
            "baseline_models": [model(b) for b in baselines],
            "evaluation_image_reference": None, "evaluation_image_digest": None}}


    def model_bytes(self, name: str) -> bytes:
        for shipped in self.shipped_models:
            if shipped.name == name:
                data = (resources.files("sealbench.benchmarks.wdbc") / "model"
                        / f"{name}.onnx").read_bytes()
                actual = "sha256:" + hashlib.sha256(data).hexdigest()
                if actual != shipped.sha256:
                    raise api.ModelContractError(
                        (f"shipped model {name} has {actual}, the plug-in records "
                         f"{shipped.sha256}",))
                return data
        raise KeyError(name)

    def write_demo_dataset(self, out_dir: Path, n_cases: int, *, seed: int = 0) -> tuple[str, ...]:
        """Write ``out_dir/cases.csv`` with ``n_cases`` real WDBC cases (``sealbench[datasets]``).

        Seeds 0, 1, 2 are the demo sites (referral, screening, general: disjoint, with different
        case mixes; the first ``n_cases`` of the site in a seeded, class-stratified order);
        other seeds draw from all 569 cases. ``ValueError`` when fewer cases are available."""
        cases = _demo_cases(seed)
        if not 1 <= n_cases <= len(cases):
            raise ValueError(f"demo seed {seed} has {len(cases)} cases; asked for {n_cases}")
        order = np.random.default_rng(seed).permutation(len(cases))
        # Interleave the classes (each case ranked within its class) so that any prefix keeps
        # the site's case mix.
        ranks: dict[str, float] = {}
        for label in (True, False):
            members = [cases[i] for i in order if cases[i].malignant is label]
            for k, case in enumerate(members):
                ranks[case.case_id] = (k + 0.5) / len(members)
        chosen = sorted(cases, key=lambda c: (ranks[c.case_id], c.malignant))[:n_cases]
        chosen.sort(key=lambda c: c.case_id)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_raw_csv(out_dir / RAW_FILE, chosen)
        return tuple(c.case_id for c in chosen)


def _demo_cases(seed: int) -> tuple[WdbcCase, ...]:
    every = load_wdbc()
    if 0 <= seed < len(SITES):
        return split_cases(every).sites[SITES[seed].name]
    return every


#: The entry point's object (``wdbc``).
PLUGIN: Final[api.Benchmark] = WdbcBenchmark()
