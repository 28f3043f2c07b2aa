"""The WDBC plug-in through the interface, as the enclave and the registry use it: found by
name, preparation (whole or nothing, rows rejected with reasons, reproducible digest), the
layout the enclave reads (tampered or foreign files refused), the model contract, scoring with
failures penalised, the public summary (a differentially private release: no case id, round
trip, forgeries and other privacy losses refused) and pooling cell by cell."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from sklearn.metrics import roc_auc_score

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import InsecureFixedNoise, LocalExact
from sealbench.benchmarks.wdbc import binned
from sealbench.benchmarks.wdbc import summary as wdbc_summary
from sealbench.benchmarks.wdbc.data import FEATURES, format_raw_csv, load_wdbc, split_cases
from sealbench.benchmarks.wdbc.model import Prediction
from sealbench.benchmarks.wdbc.plugin import WdbcBenchmark
from sealbench.benchmarks.wdbc.prepared import statistics_of
from sealbench.benchmarks.wdbc.summary import WdbcCaseResult, WdbcSummary
from sealbench.crypto.manifest import build_manifest

EXACT = replace(wdbc_summary.RELEASE_SPEC, exact=True)


@pytest.fixture(scope="module")
def plugin() -> api.Benchmark:
    found = PluginRegistry().get("wdbc")
    assert isinstance(found, WdbcBenchmark) and str(found.ref) == "wdbc/1"
    return found


def _raw(tmp_path: Path, text: bytes, name: str = "raw") -> Path:
    raw = tmp_path / name
    raw.mkdir()
    (raw / "cases.csv").write_bytes(text)
    return raw


def _evaluate(plugin: api.Benchmark, prepared: Path, model: bytes) -> list[api.CaseResult]:
    """What the enclave does with the files of a prepared dataset, case by case."""
    data = prepared / plugin.layout.data_dir
    layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
    runner = plugin.load_model(model)
    manifest = build_manifest(data)
    paths = [e.path for e in manifest.entries if e.path.startswith("cases/")]
    assert len({p.split("/")[1] for p in paths}) == -(-len(paths) // 64)  # 64 cases an object
    results = []
    for case_id, files in sorted(layout.group(paths).items()):
        case = layout.load({p: (data / p).read_bytes() for p in files})
        assert case.case_id == case_id
        results.append(plugin.score(case, runner.predict(case)))
    return results


def test_prepared_dataset_is_reproducible_and_holds_counts_only(
    plugin: api.Benchmark, tmp_path: Path
) -> None:
    site = split_cases(load_wdbc()).sites["referral"]
    raw = _raw(tmp_path, format_raw_csv(site))
    first = plugin.prepare(raw, tmp_path / "a")
    second = plugin.prepare(raw, tmp_path / "b")
    assert first.dataset_digest == second.dataset_digest
    assert first.dataset_digest == build_manifest(tmp_path / "a" / "data").digest
    assert len(first.accepted) == 100 and not first.rejected
    # What registration sends: counts of cases and rejections and the contract, no class count
    # (two datasets one case apart would give that case's diagnosis) and no feature value.
    assert first.statistics == {
        "format": "sealbench/wdbc-statistics", "version": 2, "n_cases": 100, "n_rejected": 0,
        "contract_id": "sealbench/wdbc-contract", "contract_version": 1, "n_features": 30}
    stats = (tmp_path / "a" / "data" / "statistics.json").read_text()
    assert json.loads(stats) == first.statistics == statistics_of(tmp_path / "a")
    assert not re.search(r"wdbc-\d{4}", stats)  # no case id in what is published


def test_statistics_of_version_1_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "statistics.json").write_text(json.dumps({
        "format": "sealbench/wdbc-statistics", "version": 1, "n_cases": 100,
        "n_malignant": 60, "n_benign": 40}))
    with pytest.raises(api.PreparationError, match="prepare the dataset again"):
        statistics_of(tmp_path)


def test_invalid_rows_are_rejected_with_reasons_and_strict_writes_nothing(
    plugin: api.Benchmark, tmp_path: Path
) -> None:
    cases = load_wdbc()[:5]
    text = format_raw_csv(cases).decode().splitlines()
    text[2] = text[2].replace(",M,", ",X,").replace(",B,", ",X,")
    text.append("wdbc-9999,M," + ",".join(["nan"] * len(FEATURES)))
    raw = _raw(tmp_path, "\n".join(text).encode())
    with pytest.raises(api.PreparationError) as strict:
        plugin.prepare(raw, tmp_path / "strict", strict=True)
    assert {r.case for r in strict.value.rejected} == {cases[1].case_id, "wdbc-9999"}
    assert not list(tmp_path.glob("*strict*"))  # nothing written, not even a partial folder
    prepared = plugin.prepare(raw, tmp_path / "lenient")
    assert len(prepared.accepted) == 4
    reasons = {r.case: r.reason for r in prepared.rejected}
    assert "diagnosis must be M or B" in reasons[cases[1].case_id]
    assert "finite" in reasons["wdbc-9999"]


def test_a_raw_folder_without_the_csv_is_refused_with_the_format(
    plugin: api.Benchmark, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        api.PreparationError, match=r"no cases.csv .* case_id,diagnosis,radius_mean"
    ):
        plugin.prepare(tmp_path / "empty", tmp_path / "out")


@pytest.fixture(scope="module")
def prepared_site(plugin: api.Benchmark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    plugin.write_demo_dataset(root / "raw", 120, seed=1)
    plugin.prepare(root / "raw", root / "prepared")
    return root / "prepared"


def test_layout_refuses_foreign_and_tampered_files(
    plugin: api.Benchmark, prepared_site: Path
) -> None:
    data = prepared_site / "data"
    layout = plugin.open_dataset((data / "dataset.json").read_bytes())
    for foreign in ("cases/../../etc/x.json", "cases/a/wdbc-0001.json",
                    "cases/b0000/wdbc-0001.txt", "cases/b0000/x/wdbc-0001.json",
                    "dataset.json"):
        with pytest.raises(api.CaseError):
            layout.group([foreign])
    paths = sorted(p.relative_to(data).as_posix() for p in data.glob("cases/*/*.json"))
    grouped = layout.group(paths)
    assert len(grouped) == 120  # every case, whatever object holds it
    assert len({p.split("/")[1] for p in paths}) == 2  # in objects of 64 cases
    path = paths[0]
    good = (data / path).read_bytes()
    other_id = path.rsplit("/", 1)[0] + "/wdbc-0000.json"
    with pytest.raises(api.CaseError, match="id differs"):
        layout.load({other_id: good})
    with pytest.raises(api.CaseError, match="not a valid prepared WDBC case"):
        layout.load({path: good.replace(b'"malignant":', b'"malignant":"x","m":')})
    with pytest.raises(api.CaseError, match="more than"):
        layout.load({path: b" " * 20_000})
    with pytest.raises(api.CaseError, match="holds 2 files"):
        layout.load({path: good, paths[1]: good})
    doc = json.loads((data / "dataset.json").read_bytes())
    doc["contract"]["features"] = doc["contract"]["features"][::-1]
    with pytest.raises(api.CaseError, match="another WDBC contract"):
        plugin.open_dataset(json.dumps(doc).encode())


def test_shipped_models_meet_the_contract(plugin: api.Benchmark) -> None:
    for shipped in plugin.shipped_models:
        report = plugin.check_model(plugin.model_bytes(shipped.name))
        assert report.outputs[0].name == "probabilities"
    with pytest.raises(KeyError):
        plugin.model_bytes("nope")


def _identity_model(width: int, out_name: str = "probabilities") -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], [out_name])], "wrong",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["N", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def test_a_model_outside_the_contract_is_refused_with_every_difference(
    plugin: api.Benchmark,
) -> None:
    with pytest.raises(api.ModelContractError) as error:
        plugin.check_model(_identity_model(12))
    assert any("input shape" in d for d in error.value.differences)
    assert any("output shape" in d for d in error.value.differences)
    with pytest.raises(api.ModelContractError, match="no output named 'probabilities'"):
        plugin.check_model(_identity_model(30, "scores"))
    with pytest.raises(api.ModelContractError, match="not a loadable ONNX model"):
        plugin.check_model(b"not onnx")


def test_summary_is_a_release_of_the_scored_cases_and_names_no_case(
    plugin: api.Benchmark, prepared_site: Path
) -> None:
    results = _evaluate(plugin, prepared_site, plugin.model_bytes("wdbc_logreg"))
    summary = plugin.summarise(results, InsecureFixedNoise())  # the declared scale, no noise
    assert isinstance(summary, WdbcSummary) and isinstance(summary, api.PrivateSummary)
    assert summary.release.matches(plugin.release_spec) and summary.n_cases == 120
    rows = [r for r in results if isinstance(r, WdbcCaseResult)]
    y = np.array([bool(r.malignant) for r in rows])
    p = np.array([float(r.score or 0.0) for r in rows])
    counts = wdbc_summary.counts_of(summary.release)
    assert sum(counts.malignant) == 18 and sum(counts.benign) == 102  # the screening site
    assert summary.release.column("brier").sum == pytest.approx(float(((p - y) ** 2).sum()))
    auc = binned.auroc(counts).estimate
    assert auc is not None
    assert abs(auc - roc_auc_score(y, p)) <= binned.auroc_binning_bound(counts) + 1e-12
    document = summary.to_json()
    assert not re.search(r"wdbc-\d{4}", json.dumps(document))
    assert plugin.parse_summary(json.loads(json.dumps(document))) == summary
    figures = {f.ref.metric: f for f in plugin.figures(summary)}
    assert set(figures) == {m.key for m in plugin.presentation.metrics}
    assert figures["n_cases"].value == 120
    # at epsilon 1 a 120-case site's 18 malignant cases are within the noise: no AUROC shown
    assert figures["auroc"].value is None and figures["sensitivity"].value is None
    assert figures["ece"].value is None and figures["calibration_slope"].value is None


def test_failed_cases_are_penalised_not_dropped(plugin: api.Benchmark) -> None:
    case = load_wdbc()[0]  # malignant
    benign = next(c for c in load_wdbc() if not c.malignant)
    good = [plugin.score(c, Prediction(1.0 if c.malignant else 0.0)) for c in (case, benign)]
    broken = plugin.score(case, Prediction(None, "output is not finite"))
    assert broken.failed and "not finite" in (broken.to_json()["reason"] or "")
    summary = plugin.summarise([*good, broken], LocalExact())  # the hospital's own view
    assert isinstance(summary, WdbcSummary) and summary.n_cases == 3
    figures = {f.ref.metric: f.value for f in plugin.figures(summary)}
    assert figures["sensitivity"] == pytest.approx(0.5)  # the failure counts as missed
    assert figures["brier"] == pytest.approx(1 / 3)
    unloaded = plugin.failure("wdbc-0002", "case could not be loaded")
    assert unloaded.failed and unloaded.to_json()["malignant"] is None
    with_unlabelled = plugin.summarise([*good, unloaded], LocalExact())
    assert isinstance(with_unlabelled, WdbcSummary)
    block = with_unlabelled.release.category("score")
    assert dict(zip(block.keys, block.counts, strict=True))["unlabelled"] == 1
    shown = {f.ref.metric: f.value for f in plugin.figures(with_unlabelled)}
    assert shown["brier"] == pytest.approx(1 / 3)  # an unlabelled case counts the worst, 1
    assert shown["sensitivity"] == 1.0  # and enters no class


def test_a_forged_summary_is_refused(plugin: api.Benchmark, prepared_site: Path) -> None:
    results = _evaluate(plugin, prepared_site, plugin.model_bytes("wdbc_mlp"))
    document = plugin.summarise(results, InsecureFixedNoise()).to_json()
    plugin.parse_summary(document)
    raised = wdbc_summary.summarise(results, "wdbc/1", InsecureFixedNoise(),
                                    wdbc_summary.release_spec(epsilon=10)).to_json()
    exact = plugin.summarise(results, LocalExact()).to_json()
    for forged in ({**document, "plugin": "wdbc/2"}, {**document, "n_failed": 5},
                   {**document, "extra": 1}, {**document, "version": 1},
                   {**document, "n_cases": 119}, raised, exact):
        with pytest.raises(api.SummaryError):
            plugin.parse_summary(forged)


def test_pooled_sites_are_the_union_cell_by_cell(plugin: api.Benchmark, tmp_path: Path) -> None:
    model = plugin.model_bytes("wdbc_mlp")
    summaries, everything = [], []
    for seed in range(3):
        plugin.write_demo_dataset(tmp_path / f"raw{seed}", 40 + 10 * seed, seed=seed)
        plugin.prepare(tmp_path / f"raw{seed}", tmp_path / f"site{seed}")
        results = _evaluate(plugin, tmp_path / f"site{seed}", model)
        everything += results
        summaries.append(plugin.summarise(results, InsecureFixedNoise()))
    union = plugin.summarise(everything, InsecureFixedNoise())
    ours = [x for x in summaries if isinstance(x, WdbcSummary)]
    assert isinstance(union, WdbcSummary) and len(ours) == 3
    parts = [wdbc_summary.counts_of(x.release) for x in ours]
    pooled_counts = parts[0] + parts[1] + parts[2]
    whole = wdbc_summary.counts_of(union.release)
    assert (pooled_counts.malignant, pooled_counts.benign) == (whole.malignant, whole.benign)
    assert pooled_counts.variance == pytest.approx(3 * whole.variance)  # three sites' noise
    pooled = plugin.pool(summaries)
    assert pooled.n_sites == 3 and pooled.n_cases == 150
    figures = {f.ref.metric: f for f in pooled.figures}
    assert figures["n_cases"].value == 150
    exact_union = wdbc_summary.pool([wdbc_summary.parse_summary(
        plugin.summarise(everything, LocalExact()).to_json(), EXACT)], EXACT)
    truth = {f.ref.metric: f.value for f in exact_union.figures}
    brier = figures["brier"]
    assert brier.low is not None and brier.high is not None
    assert brier.low <= truth["brier"] <= brier.high  # no noise drawn: the interval is wider
    assert wdbc_summary.auroc_binning_bound(ours) == pytest.approx(
        binned.auroc_binning_bound(whole))


def test_demo_sites_keep_their_case_mix_in_any_prefix(plugin: api.Benchmark,
                                                      tmp_path: Path) -> None:
    ids = plugin.write_demo_dataset(tmp_path / "a", 20, seed=0)
    assert len(ids) == 20
    text = (tmp_path / "a" / "cases.csv").read_text()
    assert text.count(",M,") == 12  # the referral site is 60% malignant
    with pytest.raises(ValueError, match="has 100 cases"):
        plugin.write_demo_dataset(tmp_path / "b", 101, seed=0)
    assert len(plugin.write_demo_dataset(tmp_path / "c", 569, seed=7)) == 569
    np.testing.assert_equal(plugin.write_demo_dataset(tmp_path / "d", 20, seed=0), ids)


def test_shipped_definition_binds_contract_metrics_and_models(plugin: api.Benchmark) -> None:
    definitions = plugin.definitions()  # type: ignore[attr-defined]
    doc = definitions["wdbc"]
    assert doc["plugin"] == "wdbc/1" and doc["format"] == "sealbench/benchmark-definition"
    assert doc["contract"] == plugin.data_contract() and doc["metrics"] == plugin.metrics_spec()
    named = [doc["reference_model"], *doc["baseline_models"]]
    assert [m["name"] for m in named] == [m.name for m in plugin.shipped_models]
    for ref in named:
        data = plugin.model_bytes(ref["name"])
        assert "sha256:" + hashlib.sha256(data).hexdigest() == ref["sha256"]
    json.dumps(doc, allow_nan=False)  # a JSON document as the registry stores it
