"""Migration 0020 (issue 40): runs reported before it lose their step timings and their times of
day; nothing else of them changes, and the audit log, whose events are hashed, is untouched."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from sealbench.server.audit import verify_stored_log
from sealbench.server.db import open_database
from sealbench.server.migrate import alembic_config, upgrade_to_head
from sealbench.server.models import UtcDateTime

API = "/api/v1"
_RUNS = sa.table("runs", sa.column("step_seconds", sa.JSON), sa.column("state", sa.String),
                 sa.column("seq", sa.Integer), sa.column("created_at", UtcDateTime()),
                 sa.column("updated_at", UtcDateTime()))


def test_timings_stored_before_issue_40_are_erased_and_times_cut_to_the_day(
    client: TestClient, world: Any, h: Any, database_url: str
) -> None:
    """A registry of before kept each run's ``step_seconds`` (the timing-loop model's channel)
    and its times to the microsecond; the upgrade leaves neither in the database."""
    body = {"benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
            "model_id": world.model_id, "state": "succeeded", "seq": 1,
            "image_digest": h.IMAGE_DIGEST, "tee": "mock"}
    h.ok(client.put(f"{API}/runs/run-old", json=body, headers=world.data_owner.headers))
    db = open_database(database_url)
    precise = datetime(2026, 12, 3, 7, 15, 42, 123456, tzinfo=UTC)
    try:
        with db.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0019_h42")
        with db.engine.begin() as conn:  # what a registry of before stored
            conn.execute(text("UPDATE runs SET step_seconds = :s, created_at = :t, "
                              "updated_at = :t"),
                         {"s": json.dumps({"infer": 6.59, "load": 0.2}), "t": precise})
        upgrade_to_head(db.engine)
        with db.engine.connect() as conn:
            [(steps, state, seq, created, updated)] = conn.execute(sa.select(
                _RUNS.c.step_seconds, _RUNS.c.state, _RUNS.c.seq, _RUNS.c.created_at,
                _RUNS.c.updated_at)).all()
        assert steps == {} and (state, seq) == ("succeeded", 1)
        assert created == updated == datetime(2026, 12, 3, tzinfo=UTC)
        with db.reader() as session:
            assert verify_stored_log(session) >= 1  # the log's events are as they were
    finally:
        db.dispose()
