"""The compatibility checks as a library, with fake runners (drop-in implementations of the
plug-in's ``Runner`` interface) and a fake clock: each way a model or dataset can fail names its
check and its reason, later checks are skipped only when nothing is left to check, and nothing
passes that the enclave would score differently."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sealbench.benchmarks.brats import Case, InferenceError
from sealbench.benchmarks.brats.definition import load_definition, load_model_bytes
from sealbench.client.runs.compat import (
    CompatReport,
    ModelUnderTest,
    demo_variant,
    run_checks,
    write_demo_dataset,
)
from sealbench.server.schemas import BenchmarkPublic

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _benchmark(**override: Any) -> BenchmarkPublic:
    definition = load_definition()
    fields: dict[str, Any] = {
        "id": 7, "owner_id": 1, "name": "brats", "version": "1", "description": "",
        "data_contract": definition.contract.model_dump(mode="json"),
        "metrics_spec": definition.metrics.model_dump(mode="json"),
        "metrics_version": "brats-2023-gli/1", "image_reference": "x",
        "image_digest": "sha256:" + "1" * 64, "reference_model_id": None, "state": "approved",
        "approved_by_id": None, "approved_at": None, "created_at": NOW, "updated_at": NOW,
    }
    fields.update(override)
    return BenchmarkPublic(**fields)


def _small_checks(benchmark: BenchmarkPublic, *args: Any, **kwargs: Any) -> CompatReport:
    """:func:`run_checks` of the small demo data, under the benchmark's small variant."""
    small = demo_variant(_benchmark(), "small").benchmark
    return run_checks(benchmark, *args, variant=small, **kwargs)


def test_small_demo_data_refused_under_the_full_size_pin_itself(
    prepared: Path, reference: ModelUnderTest
) -> None:
    """Checked under the benchmark's own pin (no variant), small cases fail the data contract
    naming both grids, as the enclave refuses them."""
    report = run_checks(_benchmark(), reference, prepared, data_label="demo")
    data = next(c for c in report.checks if c.name == "data contract")
    assert data.status == "fail" and "grid 64x64x48" in data.detail
    assert "brats-2023-gli/1-64x64x48" in data.detail


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compat")
    variant = demo_variant(_benchmark(), "small")
    return write_demo_dataset(root, variant.benchmark, 2)


@pytest.fixture(scope="module")
def reference() -> ModelUnderTest:
    return ModelUnderTest("reference", load_model_bytes(load_definition().reference_model))


@dataclass
class FakeRunner:
    """Answers every case with the given behaviour: ``truth`` (its own labels), ``crash`` or
    ``wrong-shape``."""

    behaviour: str

    def predict(self, case: Case) -> npt.NDArray[np.uint8]:
        if self.behaviour == "crash":
            raise InferenceError("the fake model ran out of memory")
        if self.behaviour == "wrong-shape":
            return np.zeros((8, 8, 8), dtype=np.uint8)
        assert case.seg is not None
        return case.seg.copy()


def _factory(behaviour: str) -> Any:
    return lambda _benchmark, _bytes: FakeRunner(behaviour)


def _statuses(report: Any) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_perfect_segmenter_scores_dice_one_with_the_enclave_metrics(
    prepared: Path, reference: ModelUnderTest
) -> None:
    report = _small_checks(_benchmark(), reference, prepared, data_label="demo",
                        runner_factory=_factory("truth"))
    assert report.passed, report.checks
    assert report.summary is not None and report.summary.n_cases == 2
    # the exact figures of the demo cases (computed locally: no release noise)
    assert report.summary.release.exact
    assert report.summary.release.column("dice:WT").sum / 2 == pytest.approx(1.0)


def test_crashing_inference_fails_inference_and_metrics(
    prepared: Path, reference: ModelUnderTest
) -> None:
    report = _small_checks(_benchmark(), reference, prepared, data_label="demo",
                        runner_factory=_factory("crash"))
    statuses = _statuses(report)
    assert statuses["inference"] == "fail" and statuses["metrics"] == "fail"
    detail = next(c.detail for c in report.checks if c.name == "inference")
    assert "2 of 2 cases failed" in detail and "ran out of memory" in detail
    assert report.summary is not None
    assert all(c.sum == 0.0 for c in report.summary.release.columns)  # penalised, not dropped


def test_prediction_on_another_grid_cannot_be_scored(
    prepared: Path, reference: ModelUnderTest
) -> None:
    report = _small_checks(_benchmark(), reference, prepared, data_label="demo",
                        runner_factory=_factory("wrong-shape"))
    statuses = _statuses(report)
    assert statuses["inference"] == "pass" and statuses["metrics"] == "fail"
    assert "could not be scored" in next(c.detail for c in report.checks if c.name == "metrics")


def test_slow_model_fails_the_time_check_estimated_at_the_full_grid(
    prepared: Path, reference: ModelUnderTest
) -> None:
    ticks: Iterator[float] = iter(np.arange(0.0, 100.0, 0.5))  # 0.5 s per case measured
    scale = demo_variant(_benchmark(), "small").cost_scale
    report = _small_checks(_benchmark(), reference, prepared, data_label="demo",
                        runner_factory=_factory("truth"), clock=lambda: float(next(ticks)),
                        max_seconds_per_case=10.0, cost_scale=scale)
    timing = next(c for c in report.checks if c.name == "time per case")
    assert timing.status == "fail"
    # 0.5 s on 64x64x48 is about 22.7 s on 240x240x155 (voxel ratio 45.4)
    assert "0.50 s per case" in timing.detail and "about 22.7 s" in timing.detail


def test_unknown_metrics_version_fails_and_skips_everything_else(
    prepared: Path, reference: ModelUnderTest
) -> None:
    report = _small_checks(_benchmark(metrics_version="brats-2030/9"), reference, prepared,
                        data_label="demo")
    statuses = _statuses(report)
    assert statuses["benchmark"] == "fail"
    assert {s for n, s in statuses.items() if n != "benchmark"} == {"skip"}
    assert not report.passed


def test_registered_contract_that_differs_from_the_enforced_one_is_flagged(
    prepared: Path, reference: ModelUnderTest
) -> None:
    other = load_definition().contract.model_dump(mode="json")
    other["spacing_mm"] = [2.0, 2.0, 2.0]
    report = _small_checks(_benchmark(data_contract=other), reference, prepared,
                        data_label="demo", runner_factory=_factory("truth"))
    bench = next(c for c in report.checks if c.name == "benchmark")
    assert bench.status == "fail" and "data contract" in bench.detail
    assert _statuses(report)["metrics"] == "pass"  # scored by what the enclave enforces


def test_dataset_prepared_under_another_contract_is_refused_as_the_enclave_would(
    tmp_path: Path, reference: ModelUnderTest
) -> None:
    from sealbench.benchmarks.brats import BRATS_2023_GLI, prepare_dataset
    from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case

    foreign = BRATS_2023_GLI.model_copy(update={"spacing_mm": (1.0, 1.0, 2.0)}).with_shape(
        (32, 32, 24))  # a contract no pin names
    write_case(generate_case(1, foreign.shape, foreign), tmp_path / "raw", case_id_for(1), foreign)
    prepared = tmp_path / "prepared"
    prepare_dataset(tmp_path / "raw", prepared, foreign)
    report = run_checks(_benchmark(), reference, prepared, data_label="theirs")
    data = next(c for c in report.checks if c.name == "data contract")
    assert data.status == "fail" and "another contract" in data.detail
    assert _statuses(report)["inference"] == "skip"


def test_model_digest_differing_from_the_registry_fails(prepared: Path) -> None:
    data = load_model_bytes(load_definition().reference_model)
    model = ModelUnderTest("mine", data, registry_id=3, registered_digest="sha256:" + "0" * 64)
    report = _small_checks(_benchmark(), model, prepared, data_label="demo",
                        runner_factory=_factory("truth"))
    digest = next(c for c in report.checks if c.name == "model digest")
    assert digest.status == "fail" and "registry model 3" in digest.detail
    assert not report.passed
