"""``sealbench next``: the one step a profile takes now, for each state of a participant's path
(:func:`sealbench.client.runs.next_step.next_step` is pure: each test builds the standing the
registry and this machine would give), and once through the CLI against a live registry."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sealbench.client.cli import app
from sealbench.client.runs.inbox import InboxItem, InboxView
from sealbench.client.runs.next_step import NextStep, OwnedAsset, Standing, next_step
from sealbench.server.schemas import BenchmarkPublic

EMPTY = InboxView((), 0, False)


def _view(*items: InboxItem, evaluated: int = 0) -> InboxView:
    return InboxView(items, evaluated, False)


def _dataset(*, sealed: bool = True, status: str | None = None) -> OwnedAsset:
    links = ((1, status),) if status else ()
    return OwnedAsset("dataset", 7, "site-a", sealed, links, benchmark_id=1)


def _model(*, sealed: bool = True, status: str | None = None) -> OwnedAsset:
    return OwnedAsset("model", 3, "unet", sealed, ((1, status),) if status else ())


def _benchmark(state: str = "approved") -> BenchmarkPublic:
    """The fields the step reads (the rest of a registry's answer does not matter here)."""
    return BenchmarkPublic.model_construct(id=1, owner_id=2, name="brats", version="1.0",
                                           state=state)


def _hospital(view: InboxView = EMPTY, **dataset: Any) -> Standing:
    return Standing(view, True, (_dataset(**dataset),), open_benchmarks=(1,))


def _runnable(step: NextStep) -> list[str]:
    """The command's words (each ``&&`` part starts with sealbench)."""
    assert step.command is not None
    for part in step.command.split("&&"):
        assert shlex.split(part)[0] == "sealbench", step.command
    return shlex.split(step.command)


# -- a hospital, step by step -------------------------------------------------------------------


def test_a_profile_without_its_result_key_makes_it_first() -> None:
    step = next_step(Standing(EMPTY, False, open_benchmarks=(1,)), "hospital")
    assert _runnable(step) == ["sealbench", "keys", "init"]


def test_no_dataset_prepare_and_register_for_the_one_open_benchmark() -> None:
    step = next_step(Standing(EMPTY, True, open_benchmarks=(1,)), "hospital")
    words = _runnable(step)
    assert words[:3] == ["sealbench", "dataset", "prepare"] and "register" in words
    assert words.count("--benchmark") == 2 and "1" in words


@pytest.mark.parametrize("open_benchmarks", [(), (1, 2)])
def test_no_dataset_and_no_single_open_benchmark_leaves_the_choice_to_the_hospital(
    open_benchmarks: tuple[int, ...],
) -> None:
    step = next_step(Standing(EMPTY, True, open_benchmarks=open_benchmarks), "hospital")
    words = _runnable(step)
    assert words[:3] == ["sealbench", "dataset", "prepare"]
    assert [words[i + 1] for i, w in enumerate(words) if w == "--benchmark"] == ["BENCHMARK"] * 2


def test_registered_but_not_sealed_says_seal() -> None:
    step = next_step(_hospital(sealed=False))
    assert _runnable(step)[:3] == ["sealbench", "dataset", "seal"]
    assert "--dataset 7" in str(step.command)


def test_registered_not_associated_says_associate_with_its_benchmark() -> None:
    step = next_step(_hospital())
    assert step.command == "sealbench dataset associate --dataset 7 --benchmark 1"
    # a rejected or withdrawn request is no longer a link: ask again
    assert next_step(_hospital(status="withdrawn")).command == step.command


def test_association_pending_waits_for_the_authority() -> None:
    waiting = InboxItem("waiting", "your request: dataset site-a (#7) to join benchmark brats "
                        "1.0 (#1); waits for the benchmark's owner (user 2)", None)
    step = next_step(_hospital(_view(waiting), status="pending"))
    assert not step.yours and step.command is None and "waits for" in step.what


def test_approved_with_grants_lagging_says_policy_sync_first() -> None:
    sync = InboxItem("policy sync needed", "dataset site-a (#7): its approvals changed",
                     "sealbench policy sync --dataset 7")
    run = InboxItem("run", "dataset site-a (#7) x model unet 1 (#3): not evaluated yet",
                    "sealbench run --benchmark 1 --dataset 7 --model 3")
    step = next_step(_hospital(_view(run, sync), status="approved"))
    assert step.command == "sealbench policy sync --dataset 7"


def test_approved_with_no_run_says_run() -> None:
    run = InboxItem("run", "dataset site-a (#7) x model unet 1 (#3): not evaluated yet",
                    "sealbench run --benchmark 1 --dataset 7 --model 3")
    step = next_step(_hospital(_view(run), status="approved"))
    assert step.yours and step.command == "sealbench run --benchmark 1 --dataset 7 --model 3"


def test_a_succeeded_run_not_submitted_says_submit() -> None:
    submit = InboxItem("submit", "dataset site-a (#7) x model unet 1 (#3): run r-1 succeeded, "
                       "result not submitted", "sealbench result open r-1 && "
                       "sealbench result submit r-1")
    run = InboxItem("run", "dataset site-a (#7) x model weak 1 (#4): not evaluated yet",
                    "sealbench run --benchmark 1 --dataset 7 --model 4")
    step = next_step(_hospital(_view(run, submit), status="approved"))
    assert "sealbench result submit r-1" in str(step.command)
    _runnable(step)


def test_everything_submitted_nothing_to_do() -> None:
    step = next_step(_hospital(_view(evaluated=2), status="approved"))
    assert not step.yours and step.command is None and "2 approved evaluation" in step.what


def test_a_grant_to_approve_comes_before_the_own_path() -> None:
    decide = InboxItem("decide", "dataset site-b (#9) of user 5 asks to join benchmark brats "
                       "1.0 (#1): approve or reject",
                       "sealbench association approve --benchmark 1 --dataset 9")
    step = next_step(_hospital(_view(decide), sealed=False))
    assert step.command == "sealbench association approve --benchmark 1 --dataset 9"


# -- the model owner and the authority --------------------------------------------------------


def test_model_owner_path() -> None:
    none = Standing(EMPTY, True, open_benchmarks=(1,))
    assert _runnable(next_step(none, "model-owner"))[:3] == ["sealbench", "model", "register"]
    unsealed = Standing(EMPTY, True, models=(_model(sealed=False),), open_benchmarks=(1,))
    assert _runnable(next_step(unsealed))[:3] == ["sealbench", "model", "seal"]
    alone = Standing(EMPTY, True, models=(_model(),), open_benchmarks=(1,))
    assert next_step(alone).command == "sealbench model associate --model 3 --benchmark 1"
    joined = Standing(EMPTY, True, models=(_model(status="approved"),), open_benchmarks=(1,))
    done = next_step(joined)
    assert not done.yours and done.command == "sealbench benchmark progress 1"


def test_authority_path() -> None:
    none = Standing(EMPTY, True, open_benchmarks=())
    assert _runnable(next_step(none, "authority"))[:3] == ["sealbench", "benchmark", "create"]
    pending = Standing(EMPTY, True, benchmarks=(_benchmark("pending"),))
    step = next_step(pending)
    assert not step.yours and "admin" in step.what
    approved = Standing(EMPTY, True, benchmarks=(_benchmark(),))
    assert next_step(approved).command == "sealbench benchmark leaderboard 1"


def test_an_admin_approves_a_pending_benchmark() -> None:
    approve = InboxItem("approve benchmark", "benchmark brats 1.0 (#1) by user 2 is pending",
                        "sealbench benchmark approve 1")
    step = next_step(Standing(_view(approve), True), "authority")
    assert step.command == "sealbench benchmark approve 1"


def test_no_registration_and_no_role_asks_for_the_role() -> None:
    step = next_step(Standing(EMPTY, True))
    assert step.command is None and "--role hospital" in step.what


# -- through the CLI ----------------------------------------------------------------------------


def test_next_through_the_cli(runner: CliRunner, cli_home: Path, live_registry: Any) -> None:
    for name, token in live_registry.tokens.items():
        added = runner.invoke(app, ["profile", "add", name, "--server", live_registry.url,
                                    "--token", token, "--no-use", "--no-watch-policy",
                                    "--log-key", live_registry.log_key])
        assert added.exit_code == 0, added.output
    fresh = runner.invoke(app, ["next", "--profile", "hospital"])
    assert fresh.exit_code == 0, fresh.output
    assert "--role hospital" in fresh.output
    hospital = runner.invoke(app, ["next", "--role", "hospital", "--json", "--profile",
                                   "hospital"])
    assert hospital.exit_code == 0, hospital.output
    step = json.loads(hospital.stdout)
    assert step["yours"] and "sealbench dataset prepare" in step["command"]
    bad = runner.invoke(app, ["next", "--role", "nurse", "--profile", "hospital"])
    assert bad.exit_code == 2 and "hospital, model-owner, authority" in bad.output
