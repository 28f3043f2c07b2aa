"""``client.inbox.merge``: the registry's inbox and this machine's run records as one to-do
list. An evaluation with a verified result is counted, not listed; otherwise the latest local
run decides between run, running and submit; every command is runnable as shown."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta

from sealbench.client.runs.inbox import merge
from sealbench.client.runs.records import RunRecord
from sealbench.server.schemas import Inbox, InboxEvaluation

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _evaluation(model: int, result: int | None = None) -> InboxEvaluation:
    return InboxEvaluation(
        benchmark_id=1, benchmark_name="brats", benchmark_version="1", dataset_id=2,
        dataset_name="hospital-a", model_id=model, model_name=f"m{model}", model_version="1",
        result_id=result,
    )


def _inbox(*evaluations: InboxEvaluation) -> Inbox:
    return Inbox(to_decide=(), awaiting_others=(), benchmarks_to_approve=(),
                 evaluations=evaluations, limit=500, truncated=False)


def _record(model: int, status: str, minutes: int, result: int | None = None) -> RunRecord:
    return RunRecord(
        run_id=f"run-{model}-{minutes}", benchmark_id=1, dataset_id=2, model_id=model,
        tee="mock", image_digest="sha256:" + "1" * 64, result_uri="file:///r",
        status=status,  # type: ignore[arg-type]
        started_at=T0 + timedelta(minutes=minutes), result_id=result,
    )


def test_each_evaluation_gets_the_action_its_latest_local_run_calls_for() -> None:
    view = merge(
        _inbox(_evaluation(3), _evaluation(4), _evaluation(5), _evaluation(6),
               _evaluation(7, result=70)),
        [
            _record(4, "failed", 1),
            _record(5, "succeeded", 1, result=None),
            _record(6, "succeeded", 1, result=None),
            _record(6, "running", 5),
        ],
    )
    by_model = {item.what.split("(#")[2].split(")")[0]: item for item in view.items}
    assert by_model["3"].action == "run" and "not evaluated yet" in by_model["3"].what
    assert by_model["4"].action == "run" and "failed" in by_model["4"].what
    assert by_model["5"].action == "submit" and "run-5-1" in str(by_model["5"].command)
    # a succeeded run not submitted yet wins over a later run still recorded as running
    assert by_model["6"].action == "submit"
    assert "7" not in by_model and view.evaluated == 1
    assert [i.action for i in view.items] == ["submit", "submit", "run", "run"]


def test_a_run_recorded_as_running_is_reported_with_a_runnable_retry() -> None:
    view = merge(_inbox(_evaluation(3)), [_record(3, "running", 2)])
    (item,) = view.items
    assert item.action == "running" and "has not finished" in item.what
    assert shlex.split(str(item.command)) == [
        "sealbench", "run", "--benchmark", "1", "--dataset", "2", "--model", "3", "--force"]
    assert view.to_do == (item,)


def test_nothing_to_do_when_every_evaluation_has_a_result() -> None:
    view = merge(_inbox(_evaluation(3, result=9)), [_record(3, "succeeded", 1, result=9)])
    assert view.items == () and view.evaluated == 1
    assert view.to_json() == {"items": [], "evaluated": 1, "truncated": False}


def test_planned_and_interrupted_runs_of_the_runner() -> None:
    view = merge(_inbox(_evaluation(3), _evaluation(4)),
                 [_record(3, "launching", 2), _record(4, "interrupted", 2)])
    by_model = {item.what.split("(#")[2].split(")")[0]: item for item in view.items}
    assert by_model["3"].action == "running"
    assert by_model["4"].action == "run" and "interrupted" in by_model["4"].what
    assert shlex.split(str(by_model["4"].command))[:2] == ["sealbench", "run"]
