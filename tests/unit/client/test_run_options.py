"""The library behind ``sealbench run``: :class:`RunOptions` refuses a selection the command
refused, with the same messages, and :class:`RunBatch` hands back what the command returned
and raised."""

from __future__ import annotations

import dataclasses

import pytest

from sealbench.client.errors import ClientError, ConfigError
from sealbench.client.runs.batch import RunOutcome, StageTimeouts
from sealbench.client.runs.launch import RunBatch
from sealbench.client.runs.options import RunOptions


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (RunOptions(benchmark=1, dataset=2), "name --model ID or --all-approved (not both)"),
        (RunOptions(benchmark=1, dataset=2, model=3, all_approved=True),
         "name --model ID or --all-approved (not both)"),
        (RunOptions(benchmark=1, model=3),
         "name --dataset ID (or --all-approved for each of your datasets)"),
    ],
)
def test_a_selection_without_pairs_is_refused(options: RunOptions, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        options.check()


def test_valid_selections_pass_and_the_defaults_are_the_commands() -> None:
    RunOptions(benchmark=1, dataset=2, model=3).check()
    RunOptions(benchmark=1, all_approved=True).check()
    options = RunOptions(benchmark=1, all_approved=True)
    assert options.timeouts == StageTimeouts()
    assert (options.tee, options.parallel, options.force) == ("mock", 1, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.parallel = 2  # type: ignore[misc]


def test_a_batch_without_errors_returns_skipped_then_succeeded() -> None:
    batch = RunBatch(RunOutcome(records=(), skipped=(), interrupted=False), ())
    batch.raise_first_error()
    assert batch.records == [] and not batch.interrupted


def test_a_batch_raises_its_first_client_error() -> None:
    first, second = ConfigError("first"), ConfigError("second")
    batch = RunBatch(RunOutcome(records=(), skipped=(), interrupted=False), (first, second))
    with pytest.raises(ClientError) as caught:
        batch.raise_first_error()
    assert caught.value is first
