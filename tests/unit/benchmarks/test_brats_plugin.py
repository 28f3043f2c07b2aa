"""BraTS behind the Benchmark interface: found by name and version, the same numbers as the
package's own functions, and summaries that do not validate refused."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.brats import BratsContract, load_case_from_bytes, score_case
from sealbench.benchmarks.brats.plugin import PLUGIN_REF, BratsBenchmark
from sealbench.benchmarks.registry import PluginRegistry, load
from sealbench.benchmarks.release import InsecureFixedNoise, LocalExact, rho_of
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.manifest import Manifest


@pytest.fixture(scope="module")
def plugin(small_contract: BratsContract) -> BratsBenchmark:
    return BratsBenchmark(small_contract)


def test_installed_plugin_found_by_name_and_version() -> None:
    plugin = load(BenchmarkPin.parse("brats-2023-gli/1"))
    assert plugin.ref == PLUGIN_REF
    assert plugin.presentation.headline == api.MetricRef("dice")
    assert [c.group for c in plugin.presentation.columns] == ["WT", "TC", "ET"]


def test_other_version_of_installed_plugin_refused() -> None:
    with pytest.raises(api.PluginNotFoundError, match="installed at version '1', not '2'"):
        PluginRegistry().load(BenchmarkPin.parse("brats-2023-gli/2"))


def test_prepared_dataset_scored_as_the_package_scores_it(
        plugin: BratsBenchmark, raw_dataset: Callable[[list[int]], Path], tmp_path: Path,
        make_model: Callable[..., bytes]) -> None:
    prepared = plugin.prepare(raw_dataset([1, 2]), tmp_path / "prepared")
    assert len(prepared.accepted) == 2 and not prepared.rejected
    data = tmp_path / "prepared" / plugin.layout.data_dir
    manifest = Manifest.from_bytes((tmp_path / "prepared" / plugin.layout.manifest_file)
                                   .read_bytes())
    assert manifest.digest == prepared.dataset_digest
    layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
    grouped = layout.group(e.path for e in manifest.entries)
    assert sorted(grouped) == sorted(prepared.accepted)
    runner = plugin.load_model(make_model())
    results = []
    expected = []
    for case_id, paths in grouped.items():
        files = {p: (data / p).read_bytes() for p in paths}
        case = layout.load(files)
        prediction = runner.predict(case)
        results.append(plugin.score(case, prediction))
        same = load_case_from_bytes(files, plugin.contract)
        assert same.seg is not None
        expected.append(score_case(prediction, same.seg, plugin.metrics,
                                   plugin.contract.spacing_mm, case_id=case_id))
    assert results == expected
    exact = plugin.summarise(results, LocalExact())
    for region in plugin.metrics.regions:
        assert exact.release.column(f"dice:{region}").sum == pytest.approx(
            sum(e.regions[region].dice for e in expected))
    summary = plugin.summarise(results, InsecureFixedNoise())
    assert summary.release.sigma > 0 and summary.release.epsilon == 1.0
    assert plugin.parse_summary(json.loads(json.dumps(summary.to_json()))) == summary
    for result in results:
        assert plugin.parse_case_result(result.to_json()) == result


def test_unscorable_prediction_is_a_flagged_failure(
        plugin: BratsBenchmark, raw_dataset: Callable[[list[int]], Path], tmp_path: Path) -> None:
    plugin.prepare(raw_dataset([3]), tmp_path / "p")
    data = tmp_path / "p" / "data"
    layout = plugin.open_dataset((data / "dataset.json").read_bytes())
    paths = [str(p.relative_to(data)) for p in data.rglob("*.nii.gz")]
    case = layout.load({p: (data / p).read_bytes() for p in paths})
    wrong = plugin.score(case, np.zeros((2, 2, 2), dtype=np.uint8))
    assert wrong.failed and "shape" in wrong.to_json()["reason"]
    assert plugin.score(case, "not an array").failed
    summary = plugin.summarise([wrong, plugin.failure("BraTS-GLI-00009-000", "inference failed")],
                               LocalExact())
    assert summary.n_cases == 2
    assert all(c.sum == 0.0 for c in summary.release.columns)  # penalised, never dropped


def test_dataset_prepared_under_other_labels_refused(plugin: BratsBenchmark) -> None:
    contract = plugin.contract.model_dump(mode="json")
    contract["modalities"] = list(reversed(contract["modalities"]))
    with pytest.raises(api.CaseError, match="another contract"):
        plugin.open_dataset(json.dumps({"contract": contract}).encode())
    with pytest.raises(api.CaseError):
        plugin.open_dataset(b"[]")


def _summary_doc(plugin: BratsBenchmark) -> dict[str, object]:
    failures = [plugin.failure(f"BraTS-GLI-0000{i}-000", "x") for i in range(3)]
    return plugin.summarise(failures, InsecureFixedNoise()).to_json()


def _raise_epsilon(doc: dict[str, Any]) -> None:
    """An operator's edit: a larger epsilon (less noise), the release made consistent with it."""
    rho = rho_of(10.0, 1e-6)
    sigma = doc["release"]["sensitivity"] / math.sqrt(2 * rho)
    doc["release"].update(epsilon=10.0, rho=rho, sigma=sigma)
    for column in doc["release"]["columns"]:
        column["sd"] = sigma


def _noise_off(doc: dict[str, Any]) -> None:
    doc["release"].update(mechanism="exact", epsilon=None, delta=None, rho=None, sigma=0.0)
    for column in doc["release"]["columns"]:
        column["sd"] = 0.0


@pytest.mark.parametrize("tamper", [
    lambda d: d.update(n_cases=4),
    lambda d: d.update(n_cases=0),
    lambda d: d["release"]["columns"].pop(),
    lambda d: d["release"]["columns"][0].update(sum=math.nan),
    lambda d: d["release"]["columns"][0].update(low=-1.0),
    lambda d: d["release"].update(sigma=1.0),
    _raise_epsilon,
    _noise_off,
    lambda d: d.update(metrics_version=2),
    lambda d: d.update(extra="x"),
    lambda d: d.update(version=1),
], ids=["counts", "zero-cases", "missing-region", "nan", "bounds", "sigma", "epsilon-raised",
        "noise-off", "version", "extra", "old-version"])
def test_tampered_summary_refused(plugin: BratsBenchmark,
                                  tamper: Callable[[dict[str, Any]], None]) -> None:
    doc = _summary_doc(plugin)
    plugin.parse_summary(doc)
    tamper(doc)
    with pytest.raises(api.SummaryError):
        plugin.parse_summary(doc)


def test_figures_headline_is_the_mean_over_regions(plugin: BratsBenchmark) -> None:
    failures = [plugin.failure(f"BraTS-GLI-0000{i}-000", "x") for i in range(3)]
    exact = plugin.summarise(failures, LocalExact())
    figures = {f.ref: f for f in plugin.figures(exact)}
    assert figures[api.MetricRef("dice")].value == 0.0
    assert plugin.presentation.label(api.MetricRef("dice", "WT")) == "Dice WT"
    pooled = plugin.pool([exact])  # one site pools to itself
    assert (pooled.n_sites, pooled.n_cases) == (1, exact.n_cases)
    assert {f.ref: f.value for f in pooled.figures}[api.MetricRef("dice")] == 0.0


def test_noisy_figure_at_three_cases_is_not_shown(plugin: BratsBenchmark) -> None:
    """At 3 cases the release's noise spans the whole range: no value, only the interval."""
    summary = plugin.parse_summary(_summary_doc(plugin))
    figures = {f.ref: f for f in plugin.figures(summary)}
    assert figures[api.MetricRef("dice", "WT")].value is None
    assert figures[api.MetricRef("dice")].value is None
    assert (figures[api.MetricRef("dice")].low, figures[api.MetricRef("dice")].high) == (0.0, 1.0)


def test_shipped_model_checked_against_the_model_contract() -> None:
    plugin = BratsBenchmark()
    reference = plugin.shipped_models[0]
    report = plugin.check_model(plugin.model_bytes(reference.name))
    assert report.inputs[0].shape[1] == 4 and report.outputs[0].shape[1] == 4
    with pytest.raises(api.ModelContractError):
        plugin.check_model(b"not onnx")
    with pytest.raises(KeyError):
        plugin.model_bytes("nope")
