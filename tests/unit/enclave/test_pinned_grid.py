"""The grid is part of the attested plug-in pin: the enclave refuses a dataset prepared on
another grid than the pinned contract's (the whole run, before any case), and a case whose
volumes are on another grid than the one its dataset states (that case, flagged, with its
reason), under every pin."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from sealbench.benchmarks.brats import BRATS_2023_GLI, CaseFailure
from sealbench.benchmarks.brats.synthetic import case_id_for, generate_case, write_case
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.contract.errors import AssetRejected
from sealbench.contract.result import FAILURE_OBJECT, SUMMARY_OBJECT, FailureRecord
from sealbench.platforms import LocalBlobStore


@pytest.mark.parametrize(
    "pin", ["brats-2023-gli/1", "brats-2023-gli/1-64x64x48", "brats-2023-gli/1-32x32x32"]
)
def test_dataset_on_another_grid_than_the_pin_is_refused(world: Any, pin: str) -> None:
    # world's dataset is prepared on 32x32x24; each pin fixes another grid.
    with pytest.raises(AssetRejected, match=r"grid 32x32x24 .* takes cases on") as info:
        world.run(world.with_spec(metrics_version=pin))
    assert pin in str(info.value) and "brats-2023-gli/1-32x32x24" in str(info.value)
    assert not (world.results() / SUMMARY_OBJECT).exists()
    record = FailureRecord.from_bytes((world.results() / FAILURE_OBJECT).read_bytes())
    assert record.exit_code == 15 and "grid 32x32x24" in record.reason


def test_the_pin_of_the_datasets_grid_evaluates_it(world: Any) -> None:
    world.run()  # brats-2023-gli/1-32x32x24
    opened = open_result(download_result(LocalBlobStore(world.results()), ""), world.recipient)
    assert str(opened.summary.metrics_version) == "brats-2023-gli/1-32x32x24"
    assert len(opened.cases) == 3 and not any(isinstance(c, CaseFailure) for c in opened.cases)


def test_case_on_another_grid_than_its_dataset_states_is_a_flagged_failure(
    tmp_path: Path, prepared_factory: Any, world_factory: Any
) -> None:
    """dataset.json states the pinned grid, but one case's volumes are 16x16x16 (sealed as
    they are): that case fails with the shape in its reason, the others are scored."""
    prepared = prepared_factory(tmp_path / "p", (4, 5))
    victim = sorted((prepared / "data" / "cases").iterdir())[0]
    other = BRATS_2023_GLI.with_shape((16, 16, 16))
    raw = tmp_path / "off-grid"
    write_case(generate_case(4, other.shape, other), raw, case_id_for(4), other)
    for path in victim.iterdir():
        shutil.copyfile(raw / victim.name / path.name, path)
    world = world_factory(tmp_path / "w", prepared=prepared)
    world.run()
    opened = open_result(download_result(LocalBlobStore(world.results()), ""), world.recipient)
    failures = [c for c in opened.cases if isinstance(c, CaseFailure)]
    assert [f.case_id for f in failures] == [victim.name] and len(opened.cases) == 2
    assert failures[0].flagged and "(16, 16, 16)" in failures[0].reason
    assert "(32, 32, 24)" in failures[0].reason
