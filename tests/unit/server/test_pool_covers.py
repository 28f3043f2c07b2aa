"""What a pooled figure covers (issue 41, part 1): a model's pooled figure covers every current
site, adding a site never shrinks it, and the board says which sites it covers and which
accepted results wait for the next pool.

The scenario a new user met: a third hospital joined after the first pool, ``benchmark pool``
ran again, and the board showed 1 site / 3 cases instead of 3 / 13 (before #40 the client
pooled only the results not pooled yet). Since #40 the registry picks every current site; the
way left to shrink the figure is a site of the current release left out of the next pool (its
budget spent): that pool is refused, nothing is debited, and the board keeps the release."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from sealbench.benchmarks.release import epsilon_of
from sealbench.server.models import AuditEvent, PrivacyDebit
from tests.unit.server.test_pooled_releases import (
    API,
    PROVIDER,
    RHO,
    Pool,
    _dataset,
    make_pool,
    pool_claims,
    release_of,
    submit_result,
)


def _pool_now(pool: Pool, n_cases: int) -> dict[str, Any]:
    """Authorize, run (as the aggregator would) and submit a pool of the model: the release."""
    inputs = pool.document()
    release = release_of(pool, inputs, n_cases=n_cases)
    token = pool.tokens.sign(pool_claims(pool, inputs, release))
    created: dict[str, Any] = pool.h.ok(pool.submit(inputs, release, token), 201)
    return created


def _join(pool: Pool, name: str, n: int) -> int:
    """A new hospital joins the benchmark, registers its coordinates and submits a result."""
    h, w = pool.h, pool.world
    did = _dataset(pool.client, w, h, name)
    h.ok(pool.client.put(f"{API}/datasets/{did}/coordinates", headers=w.data_owner.headers,
                         json={"kms_key_name": "projects/hospital-tre/locations/europe-west4/"
                               f"keyRings/sealbench/cryptoKeys/dataset-{n}",
                               "storage_uri": f"gs://hospital-sealed/site-{n}",
                               "wip_provider": PROVIDER}))
    h.ok(submit_result(pool.client, w, h, pool.tokens, did, h.digest_of(name), f"run-{n}",
                       h.digest_of(f"statistics-{n}"), f"gs://hospital-results/run-{n}"), 201)
    return did


def _standing(pool: Pool) -> dict[str, Any]:
    board = pool.h.ok(pool.client.get(f"{API}/benchmarks/{pool.bid}/leaderboard/pooled",
                                      headers=pool.world.bench_owner.headers))
    [standing] = board["standings"]
    assert isinstance(standing, dict)
    return standing


def _covered(standing: dict[str, Any]) -> list[int]:
    return sorted(c["dataset_id"] for c in standing["covers"])


def test_a_hospital_added_after_a_pool_waits_then_the_next_pool_covers_every_site(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    pool = make_pool(client, world, h, tokens, database_url)
    # before any pool: the sites' own releases are pooled, and every current result waits
    first = _standing(pool)
    assert first["tee_pooled"] is None and _covered(first) == sorted(pool.datasets)
    assert first["n_waiting"] == 3 and all(w["new_site"] for w in first["waiting"])
    released = _pool_now(pool, n_cases=15)
    standing = _standing(pool)
    assert standing["values"][0]["n_sites"] == 3 and _covered(standing) == sorted(pool.datasets)
    assert {"hospital-b", "hospital-c"} <= {c["name"] for c in standing["covers"]}
    assert standing["waiting"] == [] and standing["n_waiting"] == 0
    # a fourth hospital joins: the board keeps the release and says its result waits
    fourth = _join(pool, "hospital-d", 4)
    standing = _standing(pool)
    assert standing["tee_pooled"]["pooled_release_id"] == released["id"]
    assert standing["n_waiting"] == 1
    [waiting] = standing["waiting"]
    assert (waiting["dataset_id"], waiting["name"], waiting["new_site"]) == (
        fourth, "hospital-d", True)
    # the next pool covers all four sites: the figure grew, it never shrinks
    grown = _pool_now(pool, n_cases=20)
    assert grown["n_sites"] == 4
    standing = _standing(pool)
    assert standing["tee_pooled"]["pooled_release_id"] == grown["id"]
    assert (standing["values"][0]["n_sites"], standing["values"][0]["n_cases"]) == (4, 20)
    assert _covered(standing) == sorted([*pool.datasets, fourth])
    assert standing["waiting"] == []
    # a site's newer result waits too (not a new site)
    h.ok(submit_result(client, world, h, tokens, pool.datasets[1], h.digest_of("hospital-b"),
                       "run-2b", h.digest_of("statistics-2b"), "gs://hospital-results/run-2b"),
         201)
    [waiting] = _standing(pool)["waiting"]
    assert (waiting["dataset_id"], waiting["new_site"]) == (pool.datasets[1], False)


def test_a_pool_that_would_drop_a_site_of_the_current_figure_is_refused_and_debits_nothing(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """The third hospital's budget pays exactly its result's release and one pooled release: the
    pool after a fourth hospital joins would cover sites 1, 2 and 4, no longer site 3 (a figure
    over other cases than the board shows, replacing it). It is refused, naming site 3 and its
    budget; nothing is debited or authorized, and the board keeps the release over 1-3."""
    pool = make_pool(client, world, h, tokens, database_url,
                     budget_epsilon=epsilon_of(2 * RHO, 1e-6) * (1 + 1e-12), budget_delta=1e-6)
    released = _pool_now(pool, n_cases=15)
    third = pool.datasets[2]
    fourth = _join(pool, "hospital-d", 4)
    debits = len(pool.rows(PrivacyDebit))
    authorized = [e.action for e in pool.rows(AuditEvent)].count("pool.authorize")
    response = pool.inputs()
    assert response.status_code == 409, response.text
    message = response.json()["message"]
    for words in (f"leave out 1 of the 3 sites its current pooled release {released['id']}",
                  f"dataset {third}", "privacy budget", "nothing was authorized or debited"):
        assert words in message, message
    assert len(pool.rows(PrivacyDebit)) == debits
    assert [e.action for e in pool.rows(AuditEvent)].count("pool.authorize") == authorized
    standing = _standing(pool)
    assert standing["tee_pooled"]["pooled_release_id"] == released["id"]
    assert _covered(standing) == sorted(pool.datasets)
    assert [w["dataset_id"] for w in standing["waiting"]] == [fourth]
    # a site withdrawn from the benchmark is no longer current: a pool without it is no shrink
    h.ok(client.post(f"{API}/benchmarks/{pool.bid}/datasets/{third}/withdraw",
                     headers=world.data_owner.headers))
    body = h.ok(pool.inputs(), 201)
    assert sorted(body["datasets"]) == sorted([*pool.datasets[:2], fourth])


def test_a_budget_names_each_debit_s_release_per_site_or_pooled(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """'2 runs cost 4 releases' read as wrong arithmetic: each debit now says which release it
    paid for, the site's own (its result) or the pooled one (its pool id, then its release)."""
    pool = make_pool(client, world, h, tokens, database_url)
    did = pool.datasets[1]

    def debits() -> list[dict[str, Any]]:
        budget = h.ok(client.get(f"{API}/datasets/{did}/budget", headers=world.data_owner.headers))
        found: list[dict[str, Any]] = budget["debits"]
        return found

    authorized = h.ok(pool.inputs(), 201)
    site, pooled = debits()
    assert (site["release"], site["pool_id"], site["pooled_release_id"]) == (
        "per-site", None, None)
    assert site["result_id"] is not None
    assert (pooled["release"], pooled["result_id"], pooled["pool_id"],
            pooled["pooled_release_id"]) == ("pooled", None, authorized["pool_id"], None)
    authorization = pool.authorization(authorized["pool_id"])
    release = release_of(pool, authorization.inputs)
    created = h.ok(pool.submit(authorization.inputs, release, pool.tokens.sign(
        pool_claims(pool, authorization.inputs, release))), 201)
    _, pooled = debits()
    assert (pooled["pool_id"], pooled["pooled_release_id"]) == (authorized["pool_id"],
                                                                created["id"])


def test_the_table_the_csv_and_the_dashboard_say_what_a_figure_covers_and_what_waits(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """Not only the API: the CLI's table (80 and 140 columns), the CSV and the pooled page name
    the sites a TEE-pooled figure covers and the result that waits for the next pool."""
    import csv
    import io

    from rich.console import Console

    from sealbench.client.views.render import print_table
    from sealbench.server.schemas.leaderboard import PooledLeaderboard, to_csv
    from tests.unit.server.test_web_dashboard import sign_in

    pool = make_pool(client, world, h, tokens, database_url)
    _pool_now(pool, n_cases=15)
    fourth = _join(pool, "hospital-d", 4)
    url = f"{API}/benchmarks/{pool.bid}/leaderboard/pooled"
    board = PooledLeaderboard.model_validate(
        h.ok(client.get(url, headers=world.bench_owner.headers)))
    for width in (80, 140):
        console = Console(width=width, record=True, force_terminal=False)
        print_table(console, board)
        text = " ".join(console.export_text().split())
        assert "covers 3 sites (" in text and "hospital-b" in text
        assert "1 result waits for the next pool: hospital-d (a new site)" in text
        assert f"sealbench benchmark pool {pool.bid}" in text
    [row] = [r for r in csv.DictReader(io.StringIO(to_csv(board)))]
    assert "hospital-b (#" in row["covers"] and row["covers"].count(";") == 2
    assert row["waiting"] == f"hospital-d (#{fourth}) new site"
    sign_in(client, world.bench_owner.token)
    page = client.get(f"/ui/benchmarks/{pool.bid}/pooled")
    assert page.status_code == 200, page.text
    assert "covers 3 sites: " in page.text and "hospital-b" in page.text
    assert "1 result waits for the next pool: hospital-d (a new site)" in page.text
