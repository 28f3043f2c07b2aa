"""Property-based fuzzing of the registry's OpenAPI schema with schemathesis: for every
operation, generated (valid and invalid) requests with an admin's bearer token must never get a
5xx, and every response must match the documented status codes, content types and schemas.

Runs against SQLite with a seeded registry; the per-operation example budget keeps it well
under a minute on two cores.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings

EXAMPLES_PER_OPERATION = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


# The app exists at import so that schemathesis can read its OpenAPI document. Reading it runs
# the app's lifespan, which publishes the transparency log's key into the database, so the
# database is migrated first; the folder, under the session's own root (tests/conftest.py),
# goes when the process ends.
DATA_DIR = Path(tempfile.mkdtemp(prefix="fuzz-", dir=os.environ.get("SEALBENCH_TEST_SESSION_ROOT")))
atexit.register(shutil.rmtree, DATA_DIR, True)
_DB = open_database(ServerSettings(data_dir=DATA_DIR).effective_database_url)
upgrade_to_head(_DB.engine)
_DB.dispose()
APP = create_app(ServerSettings(data_dir=DATA_DIR))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module")
def auth_headers() -> Iterator[dict[str, str]]:
    try:
        db = open_database(ServerSettings(data_dir=DATA_DIR).effective_database_url)
        with db.writer() as session:
            _user, token = create_user(
                session, email="fuzz@x.test", is_admin=True, now=datetime.now(UTC)
            )
        db.dispose()
        auth = {"Authorization": f"Bearer {token}"}
        with TestClient(APP) as client:  # runs the lifespan for the whole module
            _seed(client, auth)
            yield auth
    finally:
        shutil.rmtree(DATA_DIR, ignore_errors=True)


def _seed(client: TestClient, auth: dict[str, str]) -> None:
    body = {
        "name": "seed",
        "version": "1",
        "data_contract": {},
        "metrics_spec": {},
        "metrics_version": "wdbc/1",
        "image_reference": "img",
        "image_digest": "sha256:" + "a" * 64,
    }
    bid = client.post("/api/v1/benchmarks", json=body, headers=auth).json()["id"]
    client.post(f"/api/v1/benchmarks/{bid}/approve", headers=auth).raise_for_status()
    dataset = {"name": "seed", "digest": "sha256:" + "b" * 64, "case_count": 1}
    client.post("/api/v1/datasets", json=dataset, headers=auth).raise_for_status()
    model = {"name": "seed", "version": "1", "digest": "sha256:" + "c" * 64}
    client.post("/api/v1/models", json=model, headers=auth).raise_for_status()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_and_never_5xx(case: Any, auth_headers: dict[str, str]) -> None:
    case.call_and_validate(headers=auth_headers, checks=CHECKS)
