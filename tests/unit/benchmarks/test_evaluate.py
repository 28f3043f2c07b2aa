"""``python -m sealbench.benchmarks.brats.evaluate`` scores what the enclave scores: the case a
hospital's preparation writes (reoriented to RAS+, z-scored, stored as int16), loaded from the
prepared bytes by the plug-in's layout, never the generator's arrays."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealbench.benchmarks.brats import BratsContract
from sealbench.benchmarks.brats import evaluate as ev
from sealbench.benchmarks.brats.anatomy import generate_anatomy_case
from sealbench.benchmarks.brats.cases import INTENSITY_SLOPE, Case
from sealbench.benchmarks.brats.metrics import score_case
from sealbench.benchmarks.brats.plugin import BratsBenchmark
from sealbench.benchmarks.brats.postprocess import PostProcess
from sealbench.benchmarks.brats.summary import aggregate
from sealbench.benchmarks.brats.synthetic import case_id_for, write_case
from sealbench.crypto.manifest import Manifest

SEED = 123
MODEL = "brats_small_unet"


@pytest.fixture(scope="module")
def plugin(small_contract: BratsContract) -> BratsBenchmark:
    return BratsBenchmark(small_contract)


def _enclave_case(plugin: BratsBenchmark, seed: int, tmp_path: Path) -> Case:
    """The case of ``seed`` as the enclave gets it: the hospital writes and prepares it with the
    plug-in; the enclave opens the layout from dataset.json, groups the manifest's paths and
    loads the case from their bytes."""
    made = generate_anatomy_case(seed, plugin.contract.shape, plugin.contract)
    write_case(made, tmp_path / "raw", case_id_for(seed), plugin.contract)
    plugin.prepare(tmp_path / "raw", tmp_path / "prepared")
    data = tmp_path / "prepared" / plugin.layout.data_dir
    manifest = Manifest.from_bytes(
        (tmp_path / "prepared" / plugin.layout.manifest_file).read_bytes())
    layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
    (paths,) = layout.group(e.path for e in manifest.entries).values()
    return layout.load({p: (data / p).read_bytes() for p in paths})


def test_evaluate_scores_the_case_the_enclave_loads(plugin: BratsBenchmark,
                                                    tmp_path: Path) -> None:
    contract = plugin.contract
    model = plugin.model_bytes(MODEL)
    enclave = _enclave_case(plugin, SEED, tmp_path)
    assert enclave.seg is not None
    # evaluate's case is the enclave's, array for array.
    (case,) = ev.prepared_cases(1, SEED, "anatomy", plugin)
    assert case.case_id == enclave.case_id == case_id_for(SEED)
    assert np.array_equal(case.affine, enclave.affine)
    assert case.seg is not None and np.array_equal(case.seg, enclave.seg)
    for name in contract.modalities:
        assert np.array_equal(case.modalities[name], enclave.modalities[name])

    runner = plugin.load_model(model)
    in_enclave = plugin.score(enclave, runner.predict(enclave))
    # the runner consumed the volumes (the enclave's peak memory, issue 42); the truth stays
    assert enclave.modalities == {} and enclave.seg is not None
    # ... and evaluate's figure is the one the plug-in computes from the prepared bytes.
    (summary, _), = ev.evaluate_models({MODEL: model}, 1, seed=SEED, contract=contract,
                                       threads=1).values()
    assert summary == aggregate([in_enclave], plugin.metrics)

    # Those are the prepared arrays, not the generator's: RAS+ (x and y flipped from the
    # generator's LPS), z-scored and stored as int16 in steps of 1/1000.
    made = generate_anatomy_case(SEED, contract.shape, contract)
    truth = contract.label_map.from_class_indices(made.classes)
    assert np.array_equal(case.seg, truth[::-1, ::-1, :])
    assert not np.array_equal(case.seg, truth)
    for name in contract.modalities:
        stored = case.modalities[name] / np.float32(INTENSITY_SLOPE)
        assert np.allclose(stored, np.rint(stored), atol=1e-2)
        assert not np.allclose(case.modalities[name], made.modalities[name][::-1, ::-1, :])
    # Scoring the generator's arrays, as evaluate did before, gives another figure.
    raw = Case(case_id=case.case_id, modalities=made.modalities, affine=made.affine, seg=None)
    on_raw = score_case(runner.predict(raw), truth, plugin.metrics, contract.spacing_mm,
                        case_id=case.case_id)
    assert on_raw != in_enclave


def test_tuning_sees_the_prepared_cases(plugin: BratsBenchmark,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_tune(predictions: list[Any], truths: list[Any], spacing: Any) -> Any:
        seen.update(predictions=predictions, truths=truths)
        return PostProcess(min_component_mm3=0, et_min_mm3=0), 0.5

    monkeypatch.setattr(ev, "tune", fake_tune)
    ev.tune_postprocess(plugin.model_bytes(MODEL), 1, seed=SEED, contract=plugin.contract,
                        threads=1)
    (case,) = ev.prepared_cases(1, SEED, "anatomy", plugin)
    assert case.seg is not None
    (truth,) = seen["truths"]
    assert np.array_equal(truth, plugin.contract.label_map.to_class_indices(case.seg))
    (prediction,) = seen["predictions"]
    assert prediction.shape == plugin.contract.shape


def test_prepared_cases_leave_nothing_behind(plugin: BratsBenchmark, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cases = list(ev.prepared_cases(1, SEED, "cartoon", plugin, tumour_free=1))
    assert [c.case_id for c in cases] == [case_id_for(SEED),
                                          case_id_for(SEED + ev.TUMOUR_FREE_OFFSET)]
    assert cases[1].seg is not None and not cases[1].seg.any()
    assert list(tmp_path.iterdir()) == []
