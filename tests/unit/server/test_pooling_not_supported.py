"""A benchmark whose plug-in does not pool results over sites (its ``pool()`` raises
:class:`PoolingNotSupportedError`, as the ``sealbench benchmark init`` template's does) gets a
pooled leaderboard answer and a dashboard page that say so (409 naming the per-site
leaderboard), never a server error; its per-site leaderboard still answers.

The plug-in is the installed BraTS plug-in with its pooling taken away (a third-party plug-in
that keeps no sufficient statistics), put where the leaderboard service looks plug-ins up."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.registry import load
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.models import Benchmark, Dataset, Model, Result
from sealbench.server.services import leaderboard
from sealbench.server.settings import ServerSettings
from sealbench.server.web import mount_dashboard

PIN = BenchmarkPin.parse("brats-2023-gli/1")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class _NoPooling:
    """BraTS, except that it cannot pool (the template plug-in's ``pool()``)."""

    def __init__(self, inner: api.Benchmark) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pool(self, summaries: Sequence[api.PublicSummary]) -> api.PooledFigures:
        raise api.PoolingNotSupportedError("knee-seg keeps no sufficient statistics")


@pytest.fixture
def web(settings: ServerSettings, clock: Any, jwks_fetcher: Any,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    plugin = _NoPooling(load(PIN))
    monkeypatch.setattr(leaderboard, "load_plugin",
                        lambda ref: plugin if ref == PIN else load(ref))
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, settings)
    with TestClient(app) as client:
        yield client


def _world(database_url: str, authority: Any, hospital: Any, vendor: Any, h: Any) -> int:
    """A benchmark of the non-pooling plug-in with one model's results on two sites."""
    db = open_database(database_url)
    try:
        with db.writer() as session:
            bench = Benchmark(owner_id=authority.user_id, name="knee", version="1",
                              description="d", data_contract={}, metrics_spec={},
                              metrics_version=PIN, image_reference="r",
                              image_digest="sha256:" + "1" * 64, state="approved",
                              created_at=NOW, updated_at=NOW)
            model = Model(owner_id=vendor.user_id, name="m", version="1",
                          digest=sha256_digest(b"m"), format="onnx", io_contract={},
                          state="registered", created_at=NOW)
            sites = [Dataset(owner_id=hospital.user_id, name=f"site-{i}",
                             digest=sha256_digest(f"d{i}".encode()), case_count=50,
                             statistics={}, state="registered", created_at=NOW)
                     for i in range(2)]
            session.add_all([bench, model, *sites])
            session.flush()
            session.add_all([
                Result(benchmark_id=bench.id, dataset_id=site.id, model_id=model.id,
                       submitted_by_id=hospital.user_id,
                       summary=h.brats_aggregates(0.7, 50),
                       sealed_result_digest=sha256_digest(f"sealed-{i}".encode()),
                       attestation_token=f"header.payload-{i}.signature",
                       token_issuer="https://attestation.test.invalid",
                       image_digest="sha256:" + "1" * 64,
                       nonce=sha256_digest(f"nonce-{i}".encode())[7:], created_at=NOW)
                for i, site in enumerate(sites)])
            session.commit()
            return int(bench.id)
    finally:
        db.dispose()


def _sign_in(web: TestClient, token: str) -> None:
    form = web.get("/ui/sign-in")
    csrf = _CSRF.search(form.text)
    assert csrf is not None
    done = web.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token, "next": "/ui/"},
                    follow_redirects=False)
    assert done.status_code == 303, done.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_pooled_leaderboard_of_a_plugin_that_does_not_pool_says_so(
        web: TestClient, make_user: Any, database_url: str, h: Any) -> None:
    authority, hospital, vendor = (make_user(f"{w}@x.test") for w in ("auth", "hosp", "vend"))
    bid = _world(database_url, authority, hospital, vendor, h)

    answer = web.get(f"/api/v1/benchmarks/{bid}/leaderboard/pooled", headers=authority.headers)
    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert body["code"] == "invalid_state"
    assert "does not pool" in body["message"] and "keeps no sufficient statistics" in \
        body["message"] and f"/api/v1/benchmarks/{bid}/leaderboard" in body["message"]
    # ... and the per-site leaderboard it points to answers
    per_site = web.get(f"/api/v1/benchmarks/{bid}/leaderboard", headers=authority.headers)
    assert per_site.status_code == 200 and len(per_site.json()["entries"]) == 2

    _sign_in(web, authority.token)
    page = web.get(f"/ui/benchmarks/{bid}/pooled")
    assert page.status_code == 409, page.text[:2000]
    assert "does not pool" in page.text and "Internal Server Error" not in page.text
    download = web.get(f"/ui/benchmarks/{bid}/pooled.csv")
    assert download.status_code == 409 and "does not pool" in download.text
    assert web.get(f"/ui/benchmarks/{bid}/leaderboard").status_code == 200
