"""How long the client waits for a run follows from the benchmark's per-case limits (issue 40):
a per-run limit shorter than what the cases may take lets a model fail a run on purpose (spin
on enough cases, each up to its limit), a failure every reader of the run sees."""

from __future__ import annotations

import pytest

from sealbench.benchmarks.interface import RunLimits, run_limits_of
from sealbench.benchmarks.registry import load
from sealbench.client.errors import ConfigError
from sealbench.client.runs.batch import StageTimeouts
from sealbench.client.runs.launch import RUN_OVERHEAD_S, run_timeout_for
from sealbench.contract.pin import BenchmarkPin

BRATS = run_limits_of(load(BenchmarkPin.parse("brats-2023-gli/1")))


def test_default_wait_covers_every_case_spinning_to_its_limit() -> None:
    """A BraTS dataset of 1,251 cases at 900 s each: the old 6 h default let a model that spun
    on 24 cases time the run out; the default now waits for all of them."""
    waited = run_timeout_for(BRATS, {3: 1251, 4: 40}, None)
    assert waited == 1251 * BRATS.case_seconds + BRATS.run_seconds + RUN_OVERHEAD_S
    assert waited > StageTimeouts.workload_s


def test_small_dataset_keeps_the_usual_default() -> None:
    limits = RunLimits(case_seconds=10.0, run_seconds=60.0)
    assert run_timeout_for(limits, {1: 12}, None) == StageTimeouts.workload_s


def test_run_timeout_shorter_than_the_cases_may_take_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        run_timeout_for(BRATS, {3: 1251}, 6 * 3600.0)
    assert "dataset 3" in str(refused.value) and "1251 cases" in str(refused.value)
    assert refused.value.hint is not None and "at least" in refused.value.hint


def test_longer_run_timeout_kept() -> None:
    limits = RunLimits(case_seconds=10.0, run_seconds=60.0)
    asked = 12 * 10.0 + 60.0 + RUN_OVERHEAD_S + 1
    assert run_timeout_for(limits, {1: 12}, asked) == asked
