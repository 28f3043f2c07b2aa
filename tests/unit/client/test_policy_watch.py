"""Grants follow approvals (issue 29), on the client side, against the real registry and the
in-process mock cloud: ``policy sync`` reports the grant set it wrote and the registry agrees
it is the one the approvals require; a new approval makes the model owner's grants lag (its
inbox says 'policy sync needed', a refused run names it); the watch loop, running in a thread,
picks the approval up and syncs it, writes nothing to IAM while nothing changed, backs off on
errors, and two watchers at once end with the right grants."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sealbench.client.assets import owner
from sealbench.client.assets.grants import lag_notice, lagging_grants
from sealbench.client.assets.grants_watch import PolicyWatch
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.errors import CloudError, KeyReleaseDeniedError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs.inbox import merge
from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.client.runs.outcome import explain_refusals
from sealbench.client.runs.records import RunRecord
from sealbench.contract.errors import KeyReleaseDenied
from sealbench.contract.inputs import Rule
from sealbench.crypto.digest import sha256_digest
from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud
from sealbench.mocktee.server import MockCloud
from sealbench.server.schemas import (
    BenchmarkCreate,
    CoordinatesUpdate,
    DatasetCreate,
    ModelCreate,
)


@dataclass
class Setup:
    api: dict[str, RegistryClient]
    cloud: InsecureMockOwnerCloud
    benchmark: int
    dataset: int
    model: int

    def new_hospital(self, name: str) -> int:
        """Another dataset, with a result key of its own, joins the benchmark and is approved
        (a model owner's grant leaves the dataset open: a new recipient is a new grant)."""
        d = self.api["hospital"].register_dataset(DatasetCreate(
            name=name, digest=sha256_digest(name.encode()), case_count=1,
            statistics={RECIPIENT_STATISTIC: sha256_digest(b"result key of " + name.encode())},
        )).id
        self.api["hospital"].request_association("dataset", self.benchmark, d)
        self.api["authority"].decide_association("dataset", self.benchmark, d, approve=True)
        return d


@pytest.fixture
def setup(api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate],
          tmp_path: Path) -> Iterator[Setup]:
    """An approved pair whose model is sealed (coordinates) and synced once."""
    b = api["authority"].create_benchmark(benchmark_body()).id
    api["admin"].approve_benchmark(b)
    m = api["modelco"].register_model(
        ModelCreate(name="m", version="1", digest=sha256_digest(b"weights"))).id
    api["modelco"].request_association("model", b, m)
    api["authority"].decide_association("model", b, m, approve=True)
    with MockCloud(tmp_path / "mock"):
        cloud = InsecureMockOwnerCloud.connect(tmp_path / "mock", "modelco@test.example")
        api["modelco"].put_coordinates("model", m, CoordinatesUpdate.model_validate(
            cloud.default_coordinates("model", m), from_attributes=True))
        s = Setup(api, cloud, b, 0, m)
        s.dataset = s.new_hospital("site-a")
        owner.sync_policy(api["modelco"], cloud, "model", m)
        yield s


class CountingCloud:
    """The owner cloud, counting (and optionally failing) its policy writes."""

    def __init__(self, inner: Any, failures: int = 0) -> None:
        self.inner, self.failures, self.writes = inner, failures, 0

    def sync_policy(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.failures > 0:
            self.failures -= 1
            raise CloudError("the IAM policy kept changing")
        return self.inner.sync_policy(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_sync_reports_the_grant_set_the_registry_requires(setup: Setup) -> None:
    status = setup.api["modelco"].get_grants("model", setup.model)
    assert status.lagging is False and status.required_count == 1
    assert status.reported_digest == status.required_digest is not None
    assert setup.api["modelco"].inbox().syncs_needed == ()


def test_new_approval_shows_in_the_owners_inbox_and_names_the_owner_on_refusal(
    setup: Setup,
) -> None:
    d2 = setup.new_hospital("site-b")
    view = merge(setup.api["modelco"].inbox(), [])
    [item] = [i for i in view.items if i.action == "policy sync needed"]
    assert item.command == f"sealbench policy sync --model {setup.model}"
    assert view.to_do[0] == item  # before anything else the owner has to do
    # the hospital's refused run names the lagging owner and its command
    lagging = lagging_grants(setup.api["hospital"], [(d2, setup.model)])
    notice = lag_notice(lagging, setup.api["hospital"].me().id)
    assert notice is not None
    modelco = setup.api["modelco"].me().id
    assert notice.startswith(f"model {setup.model}'s owner (user {modelco}) has not synced")
    assert notice.endswith(f"they run: sealbench policy sync --model {setup.model}")
    refused = RunRecord.model_construct(
        run_id="run-1", benchmark_id=setup.benchmark, dataset_id=d2, model_id=setup.model,
        status="failed", reason="key_release_denied")
    [error] = explain_refusals(
        setup.api["hospital"],
        [EnclaveRunFailed(KeyReleaseDenied.exit_code, "the model owner refused: denied", None)],
        [refused])
    assert isinstance(error, KeyReleaseDeniedError) and error.hint == notice
    assert "both owners" not in str(error) + str(error.hint)


def test_refusal_for_a_debug_image_keeps_its_own_cause(setup: Setup) -> None:
    """A lagging grant does not mask a cause that is the run's own."""
    d2 = setup.new_hospital("site-b")
    refused = RunRecord.model_construct(
        run_id="run-1", benchmark_id=setup.benchmark, dataset_id=d2, model_id=setup.model,
        status="failed", reason="key_release_denied")
    [error] = explain_refusals(setup.api["hospital"], [EnclaveRunFailed(
        KeyReleaseDenied.exit_code, "refused: assertion.dbgstat == 'disabled-since-boot' is "
        "false", None, code=KeyReleaseDenied.code, rule=Rule.PRODUCTION_IMAGE)], [refused])
    assert "debug image is refused by design" in str(error.hint)  # type: ignore[attr-defined]


def test_watch_thread_picks_the_approval_up(setup: Setup) -> None:
    lines: list[str] = []
    synced = threading.Event()

    def on_line(line: str) -> None:
        lines.append(line)
        if "synced, key +1" in line:
            synced.set()

    watcher = PolicyWatch(setup.api["modelco"], setup.cloud, interval_s=0.05, on_line=on_line)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        setup.new_hospital("site-b")
        assert synced.wait(20), lines
    finally:
        watcher.stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert setup.api["modelco"].get_grants("model", setup.model).lagging is False
    assert any(line.startswith(f"model {setup.model}: approvals changed") for line in lines)


def test_pass_with_nothing_lagging_writes_nothing(setup: Setup) -> None:
    cloud = CountingCloud(setup.cloud)
    watcher = PolicyWatch(setup.api["modelco"], cloud, on_line=lambda _: None)
    assert watcher.run_once().synced == ()
    assert cloud.writes == 0
    setup.new_hospital("site-b")
    [(kind, asset, done)] = watcher.run_once().synced
    assert (kind, asset, len(done.report.key.added)) == ("model", setup.model, 1)
    assert watcher.run_once().synced == () and cloud.writes == 1


def test_failed_passes_back_off_then_recover(setup: Setup) -> None:
    setup.new_hospital("site-b")
    cloud = CountingCloud(setup.cloud, failures=3)
    lines: list[str] = []
    waits: list[float] = []
    watcher = PolicyWatch(setup.api["modelco"], cloud, interval_s=1.0,
                          max_backoff_s=5.0, on_line=lines.append)

    class Clock(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(float(timeout or 0))
            return len(waits) >= 5  # stop after five passes

    watcher.stop = Clock()
    assert watcher.run() == 5
    assert waits == [2.0, 4.0, 5.0, 1.0, 1.0]  # doubling, capped, then the plain interval
    assert sum("sync failed" in line for line in lines) == 3
    assert setup.api["modelco"].get_grants("model", setup.model).lagging is False


def test_two_watchers_at_once_end_with_the_right_grants(setup: Setup) -> None:
    for name in ("site-b", "site-c"):
        setup.new_hospital(name)
    start = threading.Barrier(2)
    results: list[Any] = []

    def one() -> None:
        watcher = PolicyWatch(setup.api["modelco"], setup.cloud, on_line=lambda _: None)
        start.wait()
        results.append(watcher.run_once())

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r.failures for r in results] == [(), ()]
    assert setup.api["modelco"].get_grants("model", setup.model).lagging is False
    again = owner.sync_policy(setup.api["modelco"], setup.cloud, "model", setup.model)
    assert not again.report.changed  # both wrote the same, complete set
    assert len(again.grants) == 3


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--once"], "--once goes with --watch"),
        ([], "name exactly one of --dataset and --model (or use --watch)"),
        (["--watch", "--dataset", "1", "--model", "2"], "at most one of --dataset and --model"),
        (["--watch", "--model", "2", "--result-bucket", "gs://b"], "--result-bucket goes with"),
    ],
)
def test_policy_sync_options_that_do_not_go_together_are_refused(
    cli_home: Path, argv: list[str], says: str
) -> None:
    from typer.testing import CliRunner

    from sealbench.client.cli import app

    result = CliRunner().invoke(app, ["policy", "sync", *argv])
    assert result.exit_code == 3, result.output
    assert says in " ".join(result.output.split())


def test_lag_notice_tells_the_caller_to_sync_its_own_asset_and_others_whose() -> None:
    from datetime import UTC, datetime

    from sealbench.server.schemas import GrantsStatus

    def status(kind: str, asset: int, owner_id: int, synced: datetime | None) -> GrantsStatus:
        return GrantsStatus(
            asset_kind=kind, asset_id=asset, asset_name="x", owner_id=owner_id, sealed=True,  # type: ignore[arg-type]
            required_digest=sha256_digest(b"now"), required_count=2, reported_digest=None,
            synced_at=synced, lagging=True, command=f"sealbench policy sync --{kind} {asset}")

    when = datetime(2026, 12, 4, 21, 0, tzinfo=UTC)
    notice = lag_notice([status("model", 3, 4, when), status("dataset", 5, 9, None)], me=9)
    assert notice == (
        "model 3's owner (user 4) has not synced its grants since your association was approved "
        "(last synced 2026-12-04 21:00 UTC); they run: sealbench policy sync --model 3; "
        "your dataset 5's grants lag its approvals (never reported a sync): run sealbench "
        "policy sync --dataset 5")
    assert lag_notice([], me=9) is None
