"""The dashboard's inbox and its one write, approving or rejecting a pending association, on SQLite
(the decision's writes run on PostgreSQL too in test_rules.py): it needs the session's CSRF
token and this origin, it is the API's own decision (same permissions, same state rules, same
audit event with the viewer as actor), and the pages mark withdrawn results and closed
benchmarks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealbench.server.app import create_app
from sealbench.server.settings import ServerSettings
from sealbench.server.web import mount_dashboard

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "the dashboard's approval calls the API's own decision (test_rules, test_close, "
    "test_withdraw: both databases); CSRF, origin and page marks are Python"
)

API = "/api/v1"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def web(settings: ServerSettings, clock: Any, jwks_fetcher: Any) -> Iterator[TestClient]:
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, settings)
    with TestClient(app) as test_client:
        yield test_client


def _csrf(html: str) -> str:
    match = _CSRF.search(html)
    assert match is not None, "no CSRF field"
    return match.group(1)


def _sign_in(web: TestClient, token: str) -> str:
    """Sign in; returns the session's CSRF token as the inbox page carries it."""
    web.cookies.clear()
    form = web.get("/ui/sign-in")
    r = web.post("/ui/sign-in", data={"csrf": _csrf(form.text), "token": token,
                                      "next": "/ui/inbox"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return _csrf(web.get("/ui/inbox").text)


@pytest.fixture
def pending_model(client: TestClient, world: Any, h: Any) -> int:
    """A model the model owner asked to join with: the benchmark's owner decides."""
    model = h.ok(client.post(f"{API}/models", json={"name": "candidate", "version": "3",
                                                     "digest": h.digest_of("candidate")},
                             headers=world.model_owner.headers), 201)["id"]
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/models", json={"asset_id": model},
                     headers=world.model_owner.headers), 201)
    return int(model)


def _status(client: TestClient, world: Any, model: int, h: Any) -> str:
    rows = h.ok(client.get(f"{API}/benchmarks/{world.benchmark_id}/models",
                           headers=world.other.headers))["items"]
    return str(next(r["status"] for r in rows if r["asset_id"] == model))


def _decide(web: TestClient, world: Any, model: int, verb: str, **data: str) -> Any:
    return web.post(f"/ui/benchmarks/{world.benchmark_id}/models/{model}/{verb}", data=data,
                    follow_redirects=False)


def test_authority_approves_from_the_inbox_and_the_api_shows_it(
    web: TestClient, client: TestClient, world: Any, pending_model: int, h: Any
) -> None:
    csrf = _sign_in(web, world.bench_owner.token)
    page = web.get("/ui/inbox").text
    assert "candidate 3" in page and f"/models/{pending_model}/approve" in page
    r = _decide(web, world, pending_model, "approve", csrf=csrf, next="/ui/inbox")
    assert r.status_code == 303 and r.headers["location"] == "/ui/inbox"
    assert _status(client, world, pending_model, h) == "approved"
    assert f"/models/{pending_model}/approve" not in web.get("/ui/inbox").text
    events = h.ok(client.get(f"{API}/audit?limit=200", headers=world.admin.headers))["items"]
    last = [e for e in events if e["entity_id"] == f"{world.benchmark_id}:{pending_model}"][-1]
    assert last["action"] == "association.approve"
    assert last["actor_id"] == world.bench_owner.user_id


def test_forged_decision_without_the_csrf_token_is_refused(
    web: TestClient, client: TestClient, world: Any, pending_model: int, h: Any
) -> None:
    _sign_in(web, world.bench_owner.token)
    for data in ({}, {"csrf": "forged"}):
        r = _decide(web, world, pending_model, "approve", **data)
        assert r.status_code == 403 and "not sent by this site" in r.text
    assert _status(client, world, pending_model, h) == "pending"


def test_decision_posted_from_another_origin_is_refused(
    web: TestClient, client: TestClient, world: Any, pending_model: int, h: Any
) -> None:
    csrf = _sign_in(web, world.bench_owner.token)
    r = web.post(f"/ui/benchmarks/{world.benchmark_id}/models/{pending_model}/approve",
                 data={"csrf": csrf}, headers={"Origin": "https://evil.example"},
                 follow_redirects=False)
    assert r.status_code == 403
    assert _status(client, world, pending_model, h) == "pending"


def test_initiator_cannot_approve_its_own_request_from_the_dashboard(
    web: TestClient, client: TestClient, world: Any, pending_model: int, h: Any
) -> None:
    for actor in (world.model_owner, world.other, world.admin):
        csrf = _sign_in(web, actor.token)
        r = _decide(web, world, pending_model, "approve", csrf=csrf)
        assert r.status_code == 403, actor.email
        assert f"/models/{pending_model}/approve" not in web.get("/ui/inbox").text
    assert _status(client, world, pending_model, h) == "pending"


def test_anonymous_decision_goes_to_sign_in_and_changes_nothing(
    web: TestClient, client: TestClient, world: Any, pending_model: int, h: Any
) -> None:
    web.cookies.clear()
    r = _decide(web, world, pending_model, "reject", csrf="anything")
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in")
    assert _status(client, world, pending_model, h) == "pending"


def test_reject_from_the_benchmark_page_returns_there(
    web: TestClient, client: TestClient, world: Any, pending_model: int, h: Any
) -> None:
    csrf = _sign_in(web, world.bench_owner.token)
    page = web.get(f"/ui/benchmarks/{world.benchmark_id}").text
    assert f"/models/{pending_model}/reject" in page
    back = f"/ui/benchmarks/{world.benchmark_id}"
    r = _decide(web, world, pending_model, "reject", csrf=csrf, next=back)
    assert r.status_code == 303 and r.headers["location"] == back
    assert _status(client, world, pending_model, h) == "rejected"
    again = _decide(web, world, pending_model, "approve", csrf=csrf)
    assert again.status_code == 409 and "expected pending" in again.text


def test_next_outside_the_dashboard_is_not_followed(
    web: TestClient, world: Any, pending_model: int
) -> None:
    csrf = _sign_in(web, world.bench_owner.token)
    r = _decide(web, world, pending_model, "approve", csrf=csrf, next="https://evil.example/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/"


def test_withdrawn_result_and_closed_benchmark_are_marked(
    web: TestClient, client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    sealed = "sha256:" + "6" * 64
    claims = h.result_claims(summary=h.valid_summary(), benchmark_id=world.benchmark_id,
                             sealed_digest=sealed, data_digest=world.dataset_digest,
                             model_digest=world.model_digest)
    result = h.ok(client.post(f"{API}/results", json={
        "benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
        "model_id": world.model_id, "summary": h.valid_summary(), "sealed_result_digest": sealed,
        "attestation_token": tokens.sign(claims)}, headers=world.data_owner.headers), 201)
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/models/{world.model_id}/withdraw",
                     headers=world.model_owner.headers))
    h.ok(client.post(f"{API}/benchmarks/{world.benchmark_id}/close",
                     headers=world.bench_owner.headers))
    _sign_in(web, world.bench_owner.token)
    board = web.get(f"/ui/benchmarks/{world.benchmark_id}/leaderboard").text
    assert 'cell withdrawn"' in board and "model withdrawn since" in board
    detail = web.get(f"/ui/results/{result['id']}").text
    assert 'id="withdrawn"' in detail and "The model was withdrawn" in detail
    bench = web.get(f"/ui/benchmarks/{world.benchmark_id}").text
    assert "badge-closed" in bench and "closed since" in bench
    assert "badge-withdrawn" in bench


def test_data_owner_sees_what_each_run_publishes_and_consents_to_exact_figures(
    web: TestClient, client: TestClient, world: Any, h: Any
) -> None:
    """An invitation to a benchmark whose pin publishes exact figures: the inbox says so, the
    approve form carries a required consent box, and an approval without it is the API's 422."""
    body = {**h.benchmark_body(name="exact"), "metrics_version": "brats-2023-gli/1-exact"}
    bid = h.ok(client.post(f"{API}/benchmarks", json=body, headers=world.bench_owner.headers),
               201)["id"]
    h.ok(client.post(f"{API}/benchmarks/{bid}/approve", headers=world.admin.headers))
    h.ok(client.post(f"{API}/benchmarks/{bid}/datasets", json={"asset_id": world.dataset_id},
                     headers=world.bench_owner.headers), 201)
    csrf = _sign_in(web, world.data_owner.token)
    page = web.get("/ui/inbox").text
    assert "EXACT figures, no privacy bound" in page
    assert 'name="exact_release_consent" value="yes" required' in page
    assert "a private release, ε 1.0 at δ 1e-06" not in page  # only the exact benchmark waits
    url = f"/ui/benchmarks/{bid}/datasets/{world.dataset_id}/approve"
    refused = web.post(url, data={"csrf": csrf, "next": "/ui/inbox"}, follow_redirects=False)
    assert refused.status_code == 422 and "consent" in refused.text
    shown = web.get(f"/ui/benchmarks/{bid}").text
    assert 'id="release-terms"><strong class="exact">EXACT figures' in shown
    done = web.post(url, data={"csrf": csrf, "next": "/ui/inbox",
                               "exact_release_consent": "yes"}, follow_redirects=False)
    assert done.status_code == 303
    link = h.ok(client.get(f"{API}/benchmarks/{bid}/datasets", headers=world.other.headers))[
        "items"][0]
    assert link["status"] == "approved" and link["exact_release_consent"] is True
    private = web.get(f"/ui/benchmarks/{world.benchmark_id}").text
    assert "a private release, ε 1.0 at δ 1e-06" in private
