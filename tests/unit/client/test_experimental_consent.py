"""Owners consent knowingly to a benchmark that accepts EXPERIMENTAL (confidential-GPU preview)
images (issue 18): the model and data owners' association and approval commands print a warning
before they consent, and the inbox marks such benchmarks; a benchmark on STABLE images only
gets neither."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import Result

from sealbench.benchmarks.brats.definition import shipped_definition
from sealbench.benchmarks.brats.plugin import pin_of
from sealbench.client.runs.inbox import EXPERIMENTAL_MARK, consent_warning, merge
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import (
    AssociationPublic,
    BenchmarkPublic,
    Inbox,
    InboxEvaluation,
    InboxLink,
)
from tests.unit.client.test_cli_participation import Cli, cli, onnx_file

IMAGE = sha256_digest(b"experimental consent image")
WARNING = "accepts EXPERIMENTAL images"
_names = iter(range(10_000))
__all__ = ["cli"]  # the fixture, re-used


# -- the library -------------------------------------------------------------------------------


def _benchmark(accept: bool) -> BenchmarkPublic:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    return BenchmarkPublic.model_construct(id=7, name="brats-gpu", version="1",
                                           accept_experimental=accept, created_at=now)


def test_consent_warning_only_for_a_benchmark_that_accepts_experimental_images() -> None:
    assert consent_warning(_benchmark(False)) is None
    warning = consent_warning(_benchmark(True))
    assert warning is not None and warning.startswith("WARNING:")
    assert "brats-gpu 1 (#7)" in warning and WARNING in warning


def _link(accept: bool, role: str) -> InboxLink:
    return InboxLink(
        association=AssociationPublic(
            id=1, benchmark_id=7, asset_kind="model", asset_id=3, revision=1, status="pending",
            initiator_role=role, initiated_by_id=1, actor_id=1,  # type: ignore[arg-type]
            exact_release_consent=False,
            created_at=datetime(2026, 6, 1, tzinfo=UTC)),
        benchmark_name="brats-gpu", benchmark_version="1", asset_name="unet",
        asset_version="1", asset_owner_id=2, benchmark_owner_id=1,
        benchmark_accept_experimental=accept,
    )


@pytest.mark.parametrize("accept", [True, False])
def test_inbox_marks_every_item_of_an_experimental_benchmark(accept: bool) -> None:
    evaluation = InboxEvaluation(
        benchmark_id=7, benchmark_name="brats-gpu", benchmark_version="1", dataset_id=2,
        dataset_name="h", model_id=3, model_name="unet", model_version="1", result_id=None,
        benchmark_accept_experimental=accept)
    inbox = Inbox(to_decide=(_link(accept, "benchmark_owner"),),
                  awaiting_others=(_link(accept, "asset_owner"),), benchmarks_to_approve=(),
                  evaluations=(evaluation,), limit=500, truncated=False)
    view = merge(inbox, [])
    assert [i.action for i in view.items] == ["decide", "run", "waiting"]
    assert all(i.experimental is accept for i in view.items)
    assert all((EXPERIMENTAL_MARK in i.what) is accept for i in view.items)
    assert all(item["experimental"] is accept for item in view.to_json()["items"])


# -- the commands, against a live registry ------------------------------------------------------


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def _created(cli: Cli, tmp_path: Path, *extra: str) -> int:
    definition = shipped_definition("brats-small").model_copy(
        update={"name": f"consent-{next(_names)}"})
    path = tmp_path / f"definition-{next(_names)}.json"
    path.write_text(json.dumps({**definition.model_dump(mode="json"),
                                "plugin": str(pin_of(definition.contract))}))
    bid = int(json.loads(_ok(cli(
        "benchmark", "create", "--definition", str(path), "--image-reference",
        f"example/eval@{IMAGE}", "--image-digest", IMAGE, *extra, "--json",
        "--profile", "authority")).stdout)["id"])
    _ok(cli("benchmark", "approve", str(bid), "--profile", "admin"))
    return bid


def _model(cli: Cli, tmp_path: Path) -> int:
    onnx = onnx_file(tmp_path / f"m{next(_names)}.onnx")
    return int(json.loads(_ok(cli("model", "register", str(onnx), "--name", f"m{next(_names)}",
                                  "--version", "1", "--definition", "brats", "--json",
                                  "--profile", "modelco")).stdout)
               ["id"])


def test_model_owner_is_warned_before_joining_or_approving(cli: Cli, tmp_path: Path) -> None:
    bid = _created(cli, tmp_path, "--accept-experimental")
    # the model owner asks to join: the warning comes before the request's outcome
    asked = _ok(cli("model", "associate", "--model", str(_model(cli, tmp_path)),
                    "--benchmark", str(bid), "--profile", "modelco")).output
    assert WARNING in asked and asked.index("WARNING") < asked.index("pending")
    # the benchmark invites another model: its owner sees the mark, then the warning
    invited = _model(cli, tmp_path)
    _ok(cli("model", "associate", "--model", str(invited), "--benchmark", str(bid),
            "--profile", "authority"))
    inbox = _ok(cli("inbox", "--profile", "modelco")).output
    assert EXPERIMENTAL_MARK in " ".join(inbox.split())
    items = json.loads(_ok(cli("inbox", "--json", "--profile", "modelco")).stdout)["items"]
    assert [i["experimental"] for i in items if i["action"] == "decide"] == [True]
    approved = _ok(cli("association", "approve", "--benchmark", str(bid), "--model",
                       str(invited), "--profile", "modelco")).output
    assert WARNING in approved and approved.index("WARNING") < approved.index("approved")
    # rejecting is no consent: no warning
    declined = _model(cli, tmp_path)
    _ok(cli("model", "associate", "--model", str(declined), "--benchmark", str(bid),
            "--profile", "authority"))
    rejected = _ok(cli("association", "reject", "--benchmark", str(bid), "--model",
                       str(declined), "--profile", "modelco"))
    assert WARNING not in rejected.output


def test_no_warning_nor_mark_for_a_stable_only_benchmark(cli: Cli, tmp_path: Path) -> None:
    bid = _created(cli, tmp_path)
    invited = _model(cli, tmp_path)
    _ok(cli("model", "associate", "--model", str(invited), "--benchmark", str(bid),
            "--profile", "authority"))
    items = json.loads(_ok(cli("inbox", "--json", "--profile", "modelco")).stdout)["items"]
    mine = [i for i in items if f"(#{bid})" in i["what"]]
    assert mine and not any(i["experimental"] or EXPERIMENTAL_MARK in i["what"] for i in mine)
    approved = _ok(cli("association", "approve", "--benchmark", str(bid), "--model",
                       str(invited), "--profile", "modelco")).output
    assert WARNING not in approved and "approved" in approved
