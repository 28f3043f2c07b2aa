"""A run does not wait for IAM when the registry says an owner's grants lag the approvals: the
grant it needs was never written, so waiting up to ten minutes would only delay the refusal
that names that owner (issue 29)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sealbench.client.runs.batch import iam_wait_window, owners_synced_at

NOW = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)


class _Registry:
    def __init__(self, **status: Any) -> None:
        self._status = status

    def get_grants(self, kind: str, asset_id: int) -> Any:
        return SimpleNamespace(**self._status[kind])


def test_a_lagging_owner_means_no_wait() -> None:
    fresh = {"lagging": False, "synced_at": NOW - timedelta(minutes=1)}
    lagging = _Registry(dataset=fresh, model={"lagging": True, "synced_at": None})
    assert owners_synced_at(lagging, 1, 2) is None  # type: ignore[arg-type]
    assert iam_wait_window(owners_synced_at(lagging, 1, 2), NOW) == 0  # type: ignore[arg-type]
    following = _Registry(dataset=fresh, model=fresh)
    times = owners_synced_at(following, 1, 2)  # type: ignore[arg-type]
    assert iam_wait_window(times, NOW) == 540  # a minute after a sync: nine minutes left
