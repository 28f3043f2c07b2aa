"""Alembic migrations produce exactly the ORM's schema, on both backends; 0002 makes the audit
events written before it the transparency log's first leaves, and downgrades cleanly."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from sealbench.crypto import tlog
from sealbench.server.audit import append_event, verify_stored_log
from sealbench.server.audit_format import GENESIS_HASH, event_hash, event_leaf_hash
from sealbench.server.db import open_database
from sealbench.server.logtree import StoredTree, TreeHead
from sealbench.server.migrate import (
    alembic_config,
    current_revision,
    head_revision,
    upgrade_to_head,
)
from sealbench.server.models import Base


def test_migrations_match_orm_metadata(database_url: str) -> None:
    db = open_database(database_url)
    try:
        with db.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
        assert current_revision(db.engine) == head_revision() is not None
    finally:
        db.dispose()


def test_upgrade_is_idempotent(database_url: str) -> None:
    db = open_database(database_url)
    try:
        upgrade_to_head(db.engine)
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT seq FROM audit_head").scalar_one() == 0
    finally:
        db.dispose()


@pytest.fixture
def at_0001(database_at: Callable[[str], str]) -> str:
    """A database migrated only to revision 0001 (before the transparency log)."""
    return database_at("0001")


def test_existing_audit_events_become_the_first_leaves(at_0001: str) -> None:
    """0002 turns the chain written before it into the log's first leaves, in order, and the
    log carries on from there."""
    db = open_database(at_0001)
    events, prev = [], GENESIS_HASH
    for seq in range(1, 38):
        row = {"seq": seq, "actor_id": seq % 3 or None, "action": "x.y", "entity_type": "thing",
               "entity_id": str(seq), "payload": f'{{"n":{seq},"é":"ü"}}',
               "occurred_at": f"2026-01-01T00:00:{seq:02d}.000000+00:00"}
        row["prev_hash"] = prev
        row["hash"] = prev = event_hash(**row)
        events.append(row)
    try:
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO audit_events (seq, actor_id, action, entity_type, entity_id, "
                "payload, occurred_at, prev_hash, hash) VALUES (:seq, :actor_id, :action, "
                ":entity_type, :entity_id, :payload, :occurred_at, :prev_hash, :hash)"), events)
            conn.execute(text("UPDATE audit_head SET seq = 37, hash = :h"), {"h": prev})
        upgrade_to_head(db.engine)
        leaves = [event_leaf_hash(SimpleNamespace(**e)) for e in events]
        with db.reader() as session:
            assert verify_stored_log(session) == 37
            tree = StoredTree(session)
            assert tree.head() == TreeHead(37, tlog.root_from_leaf_hashes(leaves))
            tlog.verify_inclusion(leaves[20], 20, 37, tree.inclusion(20, 37), tree.head().root)
        with db.writer() as session:
            append_event(session, actor_id=None, action="after.migration", entity_type="thing",
                         entity_id="38", payload={}, now=datetime.now(UTC))
            session.commit()
        with db.reader() as session:
            tree = StoredTree(session)
            tlog.verify_consistency(37, 38, tlog.root_from_leaf_hashes(leaves), tree.head().root,
                                    tree.consistency(37, 38))
            assert verify_stored_log(session) == 38
    finally:
        db.dispose()


def test_downgrade_to_0001_and_back(at_0001: str) -> None:
    db = open_database(at_0001)
    try:
        upgrade_to_head(db.engine)
        with db.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0001")
        with db.engine.connect() as conn:
            assert "audit_nodes" not in inspect(conn).get_table_names()
        upgrade_to_head(db.engine)
        assert current_revision(db.engine) == head_revision()
    finally:
        db.dispose()


@pytest.fixture
def at_0009(database_at: Callable[[str], str]) -> str:
    """A database migrated to 0009 (before privacy budgets) holding a user, a dataset and that
    dataset's coordinates (a row that refers to it)."""
    url = database_at("0009")
    db = open_database(url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with db.engine.begin() as conn:
            conn.execute(text("INSERT INTO users (id, email, is_admin, created_at) "
                              "VALUES (1, 'h@test', false, :t)"), {"t": now})
            conn.execute(text(
                "INSERT INTO datasets (id, owner_id, name, digest, case_count, statistics, "
                "state, created_at) VALUES (7, 1, 'site', :d, 5, '{}', 'registered', :t)"),
                {"d": "sha256:" + "0" * 64, "t": now})
            conn.execute(text(
                "INSERT INTO dataset_coordinates (id, asset_id, kms_key_name, storage_uri, "
                "wip_provider, updated_at) VALUES (1, 7, 'k', 'gs://b/p', 'w', :t)"), {"t": now})
    finally:
        db.dispose()
    return url


def test_existing_datasets_get_the_default_budget_and_downgrade_keeps_them(at_0009: str) -> None:
    """0010 adds the budget columns in place (SQLite does not rebuild ``datasets``, which other
    rows refer to): existing datasets get epsilon 10 at delta 1e-6, and survive a downgrade."""
    db = open_database(at_0009)
    try:
        upgrade_to_head(db.engine)
        with db.engine.connect() as conn:
            assert conn.execute(text(
                "SELECT id, budget_epsilon, budget_delta FROM datasets")).all() == [
                    (7, 10.0, 1e-6)]
        with db.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0009")
        with db.engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("datasets")}
            assert "budget_epsilon" not in columns and "privacy_debits" not in (
                inspect(conn).get_table_names())
            assert conn.execute(text("SELECT id, name FROM datasets")).all() == [(7, "site")]
            assert conn.execute(text("SELECT asset_id FROM dataset_coordinates")).all() == [(7,)]
        upgrade_to_head(db.engine)
        assert current_revision(db.engine) == head_revision()
    finally:
        db.dispose()
