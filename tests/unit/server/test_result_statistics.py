"""The pooled leaderboard's stored statistics: written when a result is accepted (its figures,
its model's pool over every site), read by a cold board without the plug-in parsing, figuring or
pooling any summary, giving the board the summaries give; results without statistics (inserted
directly, or from before migration 0012, which backfills them) read from their summaries; a
figure's method error (``bias``) in the API, the CSV, the page and the CLI table."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy import select

from sealbench.benchmarks import interface as api
from sealbench.benchmarks.registry import load
from sealbench.client.views.render import BIAS_NOTE, print_table
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest
from sealbench.server import db_cache
from sealbench.server.db import open_database
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.models import Dataset, Model, Result, ResultStatistics
from sealbench.server.routers import results as results_router
from sealbench.server.schemas.leaderboard import PooledLeaderboard
from sealbench.server.services import result_statistics as rs
from sealbench.server.services.leaderboard import SummaryCache
from sealbench.server.web import mount_dashboard

API = "/api/v1"
BRATS = load(BenchmarkPin.parse("brats-2023-gli/1"))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> SummaryCache:
    """A cold board: the API's in-process cache emptied (as after a start)."""
    cache = SummaryCache()
    monkeypatch.setattr(results_router, "SUMMARY_CACHE", cache)
    return cache


class Spy:
    """Counts the plug-in's parse_summary, figures and pool calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, plugin: Any) -> None:
        self.calls: dict[str, int] = {"parse_summary": 0, "figures": 0, "pool": 0}
        for name in self.calls:
            monkeypatch.setattr(plugin, name, self._counting(name, getattr(plugin, name)))

    def _counting(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return fn(*args, **kwargs)
        return wrapped


def _add_dataset(client: TestClient, world: Any, h: Any, name: str) -> tuple[int, str]:
    digest = h.digest_of(name)
    did = h.ok(client.post(f"{API}/datasets", json={"name": name, "digest": digest,
                                                     "case_count": 5},
                           headers=world.data_owner.headers), 201)["id"]
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets", json={"asset_id": did},
                     headers=world.data_owner.headers), 201)
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/datasets/{did}/approve",
                     headers=world.bench_owner.headers))
    return did, digest


def _submit(client: TestClient, world: Any, tokens: Any, h: Any, dataset: tuple[int, str],
            summary: dict[str, Any], sealed: str) -> int:
    claims = h.result_claims(summary=summary, benchmark_id=world.benchmark_id,
                             sealed_digest=sealed, data_digest=dataset[1],
                             model_digest=world.model_digest)
    body = {"benchmark_id": world.benchmark_id, "dataset_id": dataset[0],
            "model_id": world.model_id, "summary": summary, "sealed_result_digest": sealed,
            "attestation_token": str(tokens.sign(claims))}
    return int(h.ok(client.post(f"{API}/results", json=body,
                                headers=world.data_owner.headers), 201)["id"])


def _board(client: TestClient, world: Any, **params: Any) -> Any:
    return client.get(f"{API}/benchmarks/{world.benchmark_id}/leaderboard/pooled",
                      params={"all_metrics": True, **params},
                      headers=world.bench_owner.headers)


@pytest.fixture
def accepted(client: TestClient, world: Any, tokens: Any, h: Any) -> tuple[list[int], list[Any]]:
    """Three sites' results of the world's model, accepted through the API; their summaries."""
    sites = [(world.dataset_id, world.dataset_digest), _add_dataset(client, world, h, "b"),
             _add_dataset(client, world, h, "c")]
    docs = [h.brats_summary(d, n) for d, n in ((0.8, 400), (0.6, 900), (0.7, 150))]
    ids = [_submit(client, world, tokens, h, site, doc, h.digest_of(f"sealed-{i}"))
           for i, (site, doc) in enumerate(zip(sites, docs, strict=True))]
    return ids, [BRATS.parse_summary(doc["aggregates"]) for doc in docs]


def _stored(database_url: str) -> dict[int, ResultStatistics]:
    db = open_database(database_url)
    try:
        with db.reader() as session:
            return {r.result_id: r for r in session.scalars(select(ResultStatistics))}
    finally:
        db.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_accept_stores_each_results_figures_and_its_models_pool(
        accepted: tuple[list[int], list[Any]], database_url: str) -> None:
    ids, summaries = accepted
    rows = _stored(database_url)
    assert sorted(rows) == ids
    for rid, summary in zip(ids, summaries, strict=True):
        stats = rs.decode(BRATS, rows[rid])
        assert stats is not None and stats.reason is None
        assert stats.n_cases == summary.n_cases and (stats.epsilon, stats.delta) == (1.0, 1e-6)
        assert dict(stats.figures) == {rs.metric_key(f.ref): f for f in BRATS.figures(summary)}
    last = rs.decode(BRATS, rows[ids[-1]])
    assert last is not None and last.pool is not None
    # the pool of every site's latest result, as the plug-in pools their summaries
    assert last.pool.results == frozenset(ids)
    assert dict(last.pool.figures) == rs.pooled_figures(BRATS, summaries)
    first = rs.decode(BRATS, rows[ids[0]])
    assert first is not None and first.pool is not None and first.pool.results == {ids[0]}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cold_board_reads_stored_statistics_without_the_plugin_parsing(
        client: TestClient, world: Any, accepted: tuple[list[int], list[Any]],
        fresh_cache: SummaryCache, monkeypatch: pytest.MonkeyPatch) -> None:
    ids, summaries = accepted
    spy = Spy(monkeypatch, BRATS)
    doc = _board(client, world).json()
    assert spy.calls == {"parse_summary": 0, "figures": 0, "pool": 0}
    (standing,) = doc["standings"]
    pooled = {v["metric"]: v for v in standing["values"]}
    for key, fig in rs.pooled_figures(BRATS, summaries).items():
        assert (pooled[key]["pooled"], pooled[key]["ci95_low"], pooled[key]["ci95_high"]) == (
            fig.value, fig.low, fig.high)
        assert pooled[key]["bias"] is None
    by_site = {s["result_id"]: s for s in pooled["dice"]["sites"]}
    for rid, summary in zip(ids, summaries, strict=True):
        (fig,) = [f for f in BRATS.figures(summary) if f.ref == api.MetricRef("dice")]
        assert (by_site[rid]["value"], by_site[rid]["ci95_low"]) == (fig.value, fig.low)
        assert (by_site[rid]["epsilon"], by_site[rid]["delta"]) == (1.0, 1e-6)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_board_from_statistics_equals_board_from_summaries(
        client: TestClient, world: Any, accepted: tuple[list[int], list[Any]],
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored path and the path of a registry without statistics answer the same board,
    for the whole board and for a subset of sites (pooled from the subset's summaries)."""
    ids, _ = accepted
    site = _board(client, world).json()["sites"][0]["dataset_id"]
    monkeypatch.setattr(results_router, "SUMMARY_CACHE", SummaryCache())
    stored = (_board(client, world).json(), _board(client, world, site=[site]).json())
    db = open_database(database_url)
    try:
        with db.writer() as session:
            for row in session.scalars(select(ResultStatistics)):
                session.delete(row)
            # and the boards stored in the database (built from those statistics; their stamp
            # does not see statistics deleted by hand)
            session.execute(sa.delete(db_cache.BoardCache))
            session.commit()
    finally:
        db.dispose()
    monkeypatch.setattr(results_router, "SUMMARY_CACHE", SummaryCache())
    spy = Spy(monkeypatch, BRATS)
    assert (_board(client, world).json(), _board(client, world, site=[site]).json()) == stored
    assert spy.calls["parse_summary"] >= len(ids)  # read from the summaries this time


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_result_inserted_without_statistics_is_read_from_its_summary(
        client: TestClient, world: Any, accepted: tuple[list[int], list[Any]], h: Any,
        database_url: str, fresh_cache: SummaryCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer result on a site, stored without statistics (by hand): the board reads it from
    its summary, and the stored pool (of the older results) no longer covers the model, so
    the model is pooled from the summaries of exactly the results shown."""
    ids, summaries = accepted
    doc = h.brats_summary(0.3, 500)
    db = open_database(database_url)
    try:
        with db.writer() as session:
            row = Result(benchmark_id=world.benchmark_id, dataset_id=world.dataset_id,
                         model_id=world.model_id, submitted_by_id=world.data_owner.user_id,
                         summary=doc, sealed_result_digest=h.digest_of("by-hand"),
                         attestation_token="h.p.s", token_issuer="https://mock.invalid",
                         image_digest=h.IMAGE_DIGEST, nonce="f" * 64, created_at=NOW)
            session.add(row)
            session.commit()
            new_id = row.id
    finally:
        db.dispose()
    expected = rs.pooled_figures(BRATS, [BRATS.parse_summary(doc["aggregates"]), *summaries[1:]])
    spy = Spy(monkeypatch, BRATS)
    board = _board(client, world).json()
    shown = [s["result_id"] for s in board["standings"][0]["values"][0]["sites"]]
    assert sorted(shown) == sorted([new_id, *ids[1:]])
    dice = board["standings"][0]["values"][0]
    assert (dice["pooled"], dice["ci95_low"]) == (expected["dice"].value, expected["dice"].low)
    assert spy.calls["pool"] == 1 and new_id not in _stored(database_url)
    # cached in process: the next request reads nothing again
    before = dict(spy.calls)
    assert _board(client, world).json() == board and spy.calls == before


def _with_bias(monkeypatch: pytest.MonkeyPatch, bias: float) -> None:
    figures, pool = BRATS.figures, BRATS.pool

    def biased_figures(summary: Any) -> tuple[api.Figure, ...]:
        return tuple(replace(f, bias=bias) for f in figures(summary))

    def biased_pool(summaries: Any) -> api.PooledFigures:
        made = pool(summaries)
        return replace(made, figures=tuple(replace(f, bias=bias / 2) for f in made.figures))

    monkeypatch.setattr(BRATS, "figures", biased_figures)
    monkeypatch.setattr(BRATS, "pool", biased_pool)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_bias_travels_to_the_api_csv_page_and_cli(
        settings: Any, clock: Any, jwks_fetcher: Any, world: Any, tokens: Any, h: Any,
        fresh_cache: SummaryCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plug-in whose figures carry a method error: stored at accept, it is in the API per
    pooled and per site value, the CSV's ``bias`` column, next to the value on the page, and
    in the CLI's table."""
    from sealbench.server.app import create_app

    _with_bias(monkeypatch, 0.004)
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, settings)
    with TestClient(app) as web:
        sites = [(world.dataset_id, world.dataset_digest), _add_dataset(web, world, h, "b")]
        for i, site in enumerate(sites):
            _submit(web, world, tokens, h, site, h.brats_summary(0.8, 400),
                    h.digest_of(f"sealed-bias-{i}"))
        doc = _board(web, world).json()
        for value in doc["standings"][0]["values"]:
            assert value["bias"] == 0.002
            assert all(s["bias"] == 0.004 for s in value["sites"])
        board = PooledLeaderboard.model_validate(doc)
        form = web.get("/ui/sign-in")
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        web.post("/ui/sign-in", data={"csrf": csrf, "token": world.bench_owner.token,
                                      "next": "/ui/"})
        page = web.get(f"/ui/benchmarks/{world.benchmark_id}/pooled")
        assert page.status_code == 200
        assert 'data-bias="0.002"' in page.text and "±0.0020 method" in page.text
        assert 'data-bias="0.004"' in page.text and 'id="bias-note"' in page.text
        download = web.get(f"/ui/benchmarks/{world.benchmark_id}/pooled.csv")
    rows = list(csv.DictReader(io.StringIO(download.text)))
    assert rows and all(row["bias"] == "0.002" for row in rows)
    console = Console(record=True, width=200)
    print_table(console, board)
    text = console.export_text()
    assert "±0.0020*" in text and BIAS_NOTE.split(":")[0] in text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_board_without_bias_shows_no_method_note(
        client: TestClient, world: Any, accepted: tuple[list[int], list[Any]]) -> None:
    board = PooledLeaderboard.model_validate(_board(client, world).json())
    console = Console(record=True, width=200)
    print_table(console, board)
    assert "±" not in console.export_text()


def test_stored_form_round_trips_and_refuses_another_pin() -> None:
    fig = api.Figure(api.MetricRef("dice", "WT"), 0.8, 0.7, 0.9, None, 0.01)
    stats = rs.Statistics(40, {"dice:WT": fig}, None, False, 1.0, 1e-6,
                          rs.StoredPool(frozenset({3, 5}), {"dice:WT": replace(fig, bias=None)}))
    row = rs.encode(5, BRATS, stats)
    assert rs.decode(BRATS, row) == stats
    assert rs.decode(load(BenchmarkPin.parse("wdbc/1")), row) is None
    row.format = rs.FORMAT + 1
    assert rs.decode(BRATS, row) is None


# -- migration 0012 backfills --------------------------------------------------------------------


@pytest.fixture
def at_0011(database_at: Callable[[str], str]) -> str:
    """A registry from before migration 0012 (no stored statistics)."""
    return database_at("0011")


def test_migration_backfills_statistics_of_existing_results(at_0011: str, h: Any) -> None:
    db = open_database(at_0011)
    docs = [h.brats_summary(0.8, 300), h.brats_summary(0.5, 600), h.brats_summary(0.9, 200)]
    try:
        with db.writer() as session:
            from sealbench.server.models import User
            user = User(email="a@test", is_admin=False, created_at=NOW)
            session.add(user)
            session.flush()
            # the benchmarks row as revision 0011 has it (the pin stored three times until 0015)
            bench_id = session.execute(sa.insert(sa.table(
                "benchmarks", *(sa.column(c) for c in (
                    "owner_id", "name", "version", "description", "data_contract",
                    "metrics_spec", "metrics_version", "plugin_name", "plugin_version",
                    "image_reference", "image_digest", "state", "created_at", "updated_at",
                    "leaderboard_published", "accept_experimental")))).values(
                owner_id=user.id, name="b", version="1", description="d", data_contract="{}",
                metrics_spec="{}", metrics_version="brats-2023-gli/1",
                plugin_name="brats-2023-gli", plugin_version="1", image_reference="r",
                image_digest="sha256:" + "1" * 64, state="approved", created_at=NOW,
                updated_at=NOW, leaderboard_published=False, accept_experimental=False,
            ).returning(sa.column("id"))).scalar_one()
            ds = [Dataset(owner_id=user.id, name=f"s{i}", digest=sha256_digest(f"d{i}".encode()),
                          case_count=5, statistics={}, state="registered", created_at=NOW)
                  for i in range(2)]
            model = Model(owner_id=user.id, name="m", version="1", digest=sha256_digest(b"m"),
                          format="onnx", io_contract={}, state="registered", created_at=NOW)
            session.add_all([*ds, model])
            session.flush()
            # site 0 twice (the later one is the latest), site 1 once; the results row as
            # revision 0011 has it (no result_uri until 0016)
            results = sa.table("results", *(sa.column(c) for c in (
                "benchmark_id", "dataset_id", "model_id", "submitted_by_id",
                "sealed_result_digest", "attestation_token", "token_issuer", "image_digest",
                "nonce", "created_at")), sa.column("summary", sa.JSON))
            ids = [session.execute(sa.insert(results).values(
                benchmark_id=bench_id, dataset_id=ds[i].id, model_id=model.id,
                submitted_by_id=user.id, summary=doc,
                sealed_result_digest=sha256_digest(f"s{n}".encode()),
                attestation_token="h.p.s", token_issuer="https://mock.invalid",
                image_digest="sha256:" + "1" * 64, nonce=f"{n:064x}", created_at=NOW,
            ).returning(sa.column("id"))).scalar_one()
                for n, (i, doc) in enumerate(zip((0, 1, 0), docs, strict=True))]
            session.commit()
        upgrade_to_head(db.engine)
    finally:
        db.dispose()
    stored = {k: rs.decode(BRATS, v) for k, v in _stored(at_0011).items()}
    assert sorted(stored) == ids
    summaries = [BRATS.parse_summary(d["aggregates"]) for d in docs]
    for rid, summary in zip(ids, summaries, strict=True):
        got = stored[rid]
        assert got is not None and got.n_cases == summary.n_cases
        assert dict(got.figures) == {rs.metric_key(f.ref): f for f in BRATS.figures(summary)}
    pools = {rid: s.pool for rid, s in stored.items() if s is not None and s.pool is not None}
    assert list(pools) == [ids[2]]
    assert pools[ids[2]].results == {ids[1], ids[2]}
    assert dict(pools[ids[2]].figures) == rs.pooled_figures(BRATS, summaries[1:])
