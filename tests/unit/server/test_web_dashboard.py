"""The web dashboard against the real app (``create_app`` + ``mount_dashboard``) on SQLite (what it
renders is read through queries tested on PostgreSQL too in the API's modules): sign-in and
sign-out need their CSRF token, pages carry the CSP, every page shows a user exactly what the
API shows that user's token (a user without access sees no result), and the audit page names the
first broken link after a row is edited in the database."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.settings import OidcSettings, ServerSettings
from sealbench.server.web import mount_dashboard

# The registry's database takes no part in what this module checks (tests/unit/server/conftest.py).
pytestmark = pytest.mark.one_database(
    "the pages render what the API reads, compared within one database; the reads and the "
    "audit chain's checks run on both databases in the API's modules and test_audit"
)

API = "/api/v1"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_CELL = re.compile(
    r'data-model-id="(\d+)" data-dataset-id="(\d+)" data-result-id="(\d+)">\s*'
    r'<a [^>]*>\s*<span class="dice">([0-9.]+)</span>'
)


#: The result's Dice per region, released over enough cases to be informative at epsilon 1.
DICE = {"WT": 0.84, "TC": 0.79, "ET": 0.74}
N_CASES = 2000


@pytest.fixture
def web(settings: ServerSettings, clock: Any, jwks_fetcher: Any) -> Iterator[TestClient]:
    """The app with the dashboard; token cache off so revocation shows at once."""
    s = settings.model_copy(update={"token_cache_seconds": 0.0})
    app = create_app(s, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, s)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def result_id(client: TestClient, world: Any, tokens: Any, h: Any) -> int:
    body = h.brats_summary(DICE, N_CASES)
    sealed = "sha256:" + "5" * 64
    claims = h.result_claims(
        summary=body,
        benchmark_id=world.benchmark_id,
        sealed_digest=sealed,
        data_digest=world.dataset_digest,
        model_digest=world.model_digest,
    )
    row = h.ok(
        client.post(
            f"{API}/results",
            json={
                "benchmark_id": world.benchmark_id,
                "dataset_id": world.dataset_id,
                "model_id": world.model_id,
                "summary": body,
                "sealed_result_digest": sealed,
                "attestation_token": tokens.sign(claims),
            },
            headers=world.data_owner.headers,
        ),
        201,
    )
    return int(row["id"])


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match is not None, "no CSRF field in the form"
    return match.group(1)


def sign_in(web: TestClient, token: str, next_path: str = "/ui/") -> None:
    web.cookies.clear()
    form = web.get("/ui/sign-in")
    r = web.post(
        "/ui/sign-in",
        data={"csrf": csrf_of(form.text), "token": token, "next": next_path},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    assert r.headers["location"] == next_path


def test_sign_in_keeps_only_a_random_session_id_in_a_strict_http_only_cookie(
    web: TestClient, world: Any
) -> None:
    form = web.get("/ui/sign-in")
    r = web.post(
        "/ui/sign-in",
        data={"csrf": csrf_of(form.text), "token": world.bench_owner.token, "next": "/ui/"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("sealbench_session="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert world.bench_owner.token not in cookie
    assert all(world.bench_owner.token not in c for c in r.headers.get_list("set-cookie"))
    page = web.get("/ui/")
    assert page.status_code == 200 and "brats" in page.text
    assert world.bench_owner.email in page.text


def test_sign_in_without_csrf_token_refused(web: TestClient, world: Any) -> None:
    web.get("/ui/sign-in")
    r = web.post("/ui/sign-in", data={"token": world.admin.token}, follow_redirects=False)
    assert r.status_code == 403
    r = web.post(
        "/ui/sign-in", data={"token": world.admin.token, "csrf": "forged"}, follow_redirects=False
    )
    assert r.status_code == 403
    assert web.get("/ui/", follow_redirects=False).status_code == 303


def test_cross_origin_sign_in_refused_even_with_token(web: TestClient, world: Any) -> None:
    form = web.get("/ui/sign-in")
    r = web.post(
        "/ui/sign-in",
        data={"csrf": csrf_of(form.text), "token": world.admin.token},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403


def test_unknown_token_refused_and_not_echoed(web: TestClient) -> None:
    form = web.get("/ui/sign-in")
    bogus = "sbt_" + "A" * 43
    r = web.post("/ui/sign-in", data={"csrf": csrf_of(form.text), "token": bogus})
    assert r.status_code == 401
    assert bogus not in r.text and "unknown or revoked" in r.text


def test_sign_out_without_csrf_token_refused(web: TestClient, world: Any) -> None:
    sign_in(web, world.data_owner.token)
    r = web.post("/ui/sign-out", data={}, follow_redirects=False)
    assert r.status_code == 403
    assert web.get("/ui/").status_code == 200  # still signed in
    page = web.get("/ui/")
    r = web.post("/ui/sign-out", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert r.status_code == 303
    assert web.get("/ui/", follow_redirects=False).status_code == 303


def test_stolen_session_cookie_dead_after_sign_out(web: TestClient, world: Any) -> None:
    sign_in(web, world.data_owner.token)
    stolen = dict(web.cookies)
    page = web.get("/ui/")
    web.post("/ui/sign-out", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    web.cookies.clear()
    for name, value in stolen.items():
        web.cookies.set(name, value)
    assert web.get("/ui/", follow_redirects=False).status_code == 303


def test_revoked_token_ends_the_dashboard_session(
    web: TestClient, world: Any, database_url: str
) -> None:
    sign_in(web, world.other.token)
    assert web.get("/ui/").status_code == 200
    db = open_database(database_url)
    with db.engine.begin() as conn:
        conn.execute(
            text("UPDATE api_tokens SET revoked_at = created_at WHERE user_id = :u"),
            {"u": world.other.user_id},
        )
    db.dispose()
    r = web.get("/ui/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in")


def test_open_redirect_after_sign_in_refused(web: TestClient, world: Any) -> None:
    form = web.get("/ui/sign-in")
    for target in ("//evil.example/", "https://evil.example/", "/ui/..//evil", "/api/v1/audit"):
        web.cookies.clear()
        form = web.get("/ui/sign-in")
        r = web.post(
            "/ui/sign-in",
            data={"csrf": csrf_of(form.text), "token": world.other.token, "next": target},
            follow_redirects=False,
        )
        assert r.headers["location"] == "/ui/", target


def test_csp_and_frame_headers_on_every_dashboard_response(
    web: TestClient, world: Any, result_id: int
) -> None:
    sign_in(web, world.bench_owner.token)
    paths = [
        "/ui/sign-in",
        "/ui/",
        f"/ui/benchmarks/{world.benchmark_id}",
        f"/ui/benchmarks/{world.benchmark_id}/leaderboard",
        f"/ui/results/{result_id}",
        f"/ui/datasets/{world.dataset_id}",
        "/ui/static/dashboard.css",
        "/ui/audit",  # 403 for this user: error pages carry the headers too
        "/ui/results/999999",
        "/ui/no/such/page",
    ]
    for path in paths:
        r = web.get(path)
        csp = r.headers.get("content-security-policy", "")
        assert "default-src 'self'" in csp and "script-src 'none'" in csp, path
        assert "frame-ancestors 'none'" in csp and r.headers["x-frame-options"] == "DENY", path
        assert r.headers["x-content-type-options"] == "nosniff", path
        if r.headers["content-type"].startswith("text/html"):
            assert "<script" not in r.text and " style=" not in r.text, path
    assert "content-security-policy" not in web.get("/health").headers


def test_script_in_benchmark_description_is_escaped(
    web: TestClient, world: Any, h: Any, client: TestClient
) -> None:
    body = {**h.benchmark_body(name="xss", version="1"), "description": "<script>alert(1)</script>"}
    bid = h.ok(client.post(f"{API}/benchmarks", json=body, headers=world.other.headers), 201)["id"]
    sign_in(web, world.other.token)
    for path in ("/ui/", f"/ui/benchmarks/{bid}"):
        page = web.get(path).text
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def _board_cells(html: str) -> dict[int, tuple[int, int, str]]:
    return {int(rid): (int(mid), int(did), dice) for mid, did, rid, dice in _CELL.findall(html)}


def _api_cells(
    client: TestClient, actor: Any, benchmark_id: int
) -> dict[int, tuple[int, int, str]]:
    board = client.get(f"{API}/benchmarks/{benchmark_id}/leaderboard", headers=actor.headers)
    assert board.status_code == 200
    out = {}
    for e in board.json()["entries"]:
        release = e["summary"]["aggregates"]["release"]
        columns = release["columns"]
        assert [c["key"] for c in columns] == ["dice:WT", "dice:TC", "dice:ET"]
        # the headline, the mean Dice over the regions, read from the release: sum / n
        dice = sum(c["sum"] for c in columns) / len(columns) / release["n_cases"]
        out[e["result_id"]] = (e["model_id"], e["dataset_id"], f"{dice:.4f}")
    return out


def test_leaderboard_shows_each_user_exactly_the_api_results(
    web: TestClient, client: TestClient, world: Any, result_id: int
) -> None:
    for actor, visible in (
        (world.bench_owner, True),
        (world.data_owner, True),
        (world.model_owner, False),
        (world.other, False),
        (world.admin, False),
    ):
        sign_in(web, actor.token)
        page = web.get(f"/ui/benchmarks/{world.benchmark_id}/leaderboard")
        assert page.status_code == 200
        shown = _board_cells(page.text)
        assert shown == _api_cells(client, actor, world.benchmark_id), actor.email
        assert (result_id in shown) is visible, actor.email
        if not visible:
            assert "<svg" not in page.text and f"/ui/results/{result_id}" not in page.text


def test_outsider_sees_no_result_on_dataset_page_and_is_refused_the_result(
    web: TestClient, world: Any, result_id: int
) -> None:
    sign_in(web, world.other.token)
    page = web.get(f"/ui/datasets/{world.dataset_id}")
    assert page.status_code == 200 and "hospital-a" in page.text
    assert f'data-result-id="{result_id}"' not in page.text
    assert "No result that you may read" in page.text
    refused = web.get(f"/ui/results/{result_id}")
    assert refused.status_code == 403 and "0.8" not in refused.text
    sign_in(web, world.data_owner.token)
    page = web.get(f"/ui/datasets/{world.dataset_id}")
    assert f'data-result-id="{result_id}"' in page.text


def test_result_page_shows_attestation_details(
    web: TestClient, world: Any, result_id: int, h: Any
) -> None:
    sign_in(web, world.bench_owner.token)
    page = unescape(web.get(f"/ui/results/{result_id}").text)
    assert h.TEST_ISSUER in page and h.IMAGE_DIGEST in page
    assert "matches the benchmark" in page
    assert "2026-06-01 12:00:00 UTC" in page  # the (fake) clock at verification
    assert "CONFIDENTIAL_SPACE" in page and "disabled-since-boot" in page


def test_chart_has_one_dot_per_result_region_and_metric(
    web: TestClient, world: Any, result_id: int
) -> None:
    sign_in(web, world.bench_owner.token)
    page = web.get(f"/ui/benchmarks/{world.benchmark_id}/leaderboard").text
    assert page.count('<figure class="chart">') == 3  # WT, TC, ET
    # one result x Dice (the release's one metric) per region
    assert page.count('<circle cx="') == 3
    assert "HD95" not in page and "interquartile" not in page
    assert page.count('<line class="interval"') == 3  # each dot's whisker: its 95% interval
    # the legend and caption say what the marks are: a mean and its interval, not a spread
    assert "mean, with its 95% interval" in page and "not a spread of the cases" in page


def test_result_page_shows_the_release_and_its_intervals(
    web: TestClient, world: Any, result_id: int
) -> None:
    sign_in(web, world.bench_owner.token)
    page = unescape(web.get(f"/ui/results/{result_id}").text)
    shown = re.findall(r'<span class="dice">([^<]*)</span><span class="sub">95% CI ([0-9.]+)'
                       r"\N{EN DASH}([0-9.]+)</span>", page)
    assert [float(v) for v, _, _ in shown] == list(DICE.values())
    assert all(float(lo) < float(v) < float(hi) for v, lo, hi in shown)
    assert "ε 1.0, δ 1e-06" in page and "INSECURE fixed noise" in page
    assert "IQR" not in page and "median" not in page


def test_result_too_noisy_to_read_shows_not_informative_never_a_number(
    web: TestClient, client: TestClient, world: Any, tokens: Any, h: Any
) -> None:
    """5 cases at epsilon 1: every figure is not informative. Its leaderboard cell and its
    page show no number (a dash and "not informative"), and no chart dot is drawn."""
    body = h.brats_summary(DICE, 5)
    sealed = "sha256:" + "7" * 64
    claims = h.result_claims(summary=body, benchmark_id=world.benchmark_id,
                             sealed_digest=sealed, data_digest=world.dataset_digest,
                             model_digest=world.model_digest)
    rid = h.ok(client.post(f"{API}/results", json={
        "benchmark_id": world.benchmark_id, "dataset_id": world.dataset_id,
        "model_id": world.model_id, "summary": body, "sealed_result_digest": sealed,
        "attestation_token": tokens.sign(claims)}, headers=world.data_owner.headers), 201)["id"]
    sign_in(web, world.bench_owner.token)
    board = web.get(f"/ui/benchmarks/{world.benchmark_id}/leaderboard").text
    cell = re.search(rf'data-result-id="{rid}">(.*?)</td>', board, re.S)
    assert cell is not None
    text = re.sub(r"<[^>]+>", " ", cell.group(1))  # what the cell shows (not its tooltip)
    assert "—" in text and "not informative" in text and not re.search(r"\d", text)
    assert "<circle" not in board and '<td class="num rank">—</td>' in board
    page = unescape(web.get(f"/ui/results/{rid}").text)
    table = re.search(r'<table class="data metrics">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert table is not None
    cells = re.findall(r'<td class="num">(.*?)</td>', table.group(1), re.S)
    assert len(cells) == 3
    for shown in cells:
        assert re.sub(r"<[^>]+>", " ", shown).split() == ["—", "not", "informative"]
        assert "95% interval" in shown  # the interval, in the tooltip


def test_coordinates_hidden_from_non_parties(
    web: TestClient, client: TestClient, world: Any
) -> None:
    key = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    coords = {
        "kms_key_name": key,
        "storage_uri": "gs://bucket",
        "wip_provider": "projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
    }
    r = client.put(
        f"{API}/datasets/{world.dataset_id}/coordinates",
        json=coords,
        headers=world.data_owner.headers,
    )
    assert r.status_code == 200
    sign_in(web, world.other.token)
    assert key not in web.get(f"/ui/datasets/{world.dataset_id}").text
    sign_in(web, world.model_owner.token)  # an approved party in the same benchmark
    assert key in web.get(f"/ui/datasets/{world.dataset_id}").text


def test_audit_page_admin_only(web: TestClient, world: Any) -> None:
    sign_in(web, world.bench_owner.token)
    assert web.get("/ui/audit").status_code == 403
    sign_in(web, world.admin.token)
    page = web.get("/ui/audit")
    assert page.status_code == 200 and "Chain intact" in page.text


def test_audit_page_names_first_broken_link_after_row_edit(
    web: TestClient, world: Any, database_url: str
) -> None:
    db = open_database(database_url)
    with db.engine.begin() as conn:
        conn.execute(
            text('UPDATE audit_events SET payload = \'{"state":"rejected"}\' WHERE seq = 7')
        )
    db.dispose()
    sign_in(web, world.admin.token)
    page = web.get("/ui/audit").text
    assert "Chain broken at event" in page and '<span id="first-broken">7</span>' in page
    assert "does not match its hash" in page
    assert '<tr id="event-7" class="broken">' in page


@pytest.fixture
def oidc_web(
    settings: ServerSettings, clock: Any, jwks_fetcher: Any, h: Any
) -> Iterator[TestClient]:
    """The dashboard of a registry that also accepts JWTs from an OIDC issuer (whose key set
    the fake fetcher serves at the test JWKS URL)."""
    s = settings.model_copy(
        update={
            "oidc": OidcSettings(
                issuer="https://idp.test.invalid", audience="sealbench", jwks_url=h.TEST_JWKS_URL
            )
        }
    )
    app = create_app(s, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, s)
    with TestClient(app) as test_client:
        yield test_client


def _oidc_jwt(signer: Any, **override: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": "https://idp.test.invalid",
        "aud": "sealbench",
        "sub": "subject-42",
        "email": "reviewer@authority.test",
        "iat": now,
        "exp": now + 600,
    }
    claims.update(override)
    return str(signer.sign(claims))


def test_oidc_jwt_signs_in_when_an_issuer_is_configured(oidc_web: TestClient, tokens: Any) -> None:
    form = oidc_web.get("/ui/sign-in")
    assert "identity-provider JWT" in form.text
    sign_in(oidc_web, _oidc_jwt(tokens))
    assert "reviewer@authority.test" in oidc_web.get("/ui/").text


def test_oidc_jwt_from_another_audience_refused(oidc_web: TestClient, tokens: Any) -> None:
    form = oidc_web.get("/ui/sign-in")
    r = oidc_web.post(
        "/ui/sign-in",
        data={"csrf": csrf_of(form.text), "token": _oidc_jwt(tokens, aud="another-app")},
        follow_redirects=False,
    )
    assert r.status_code == 401
    assert oidc_web.get("/ui/", follow_redirects=False).status_code == 303


def test_mounting_twice_adds_nothing(settings: ServerSettings) -> None:
    """``create_app`` may mount the dashboard itself; a second mount must not double routes
    or stack a second header middleware."""
    app = create_app(settings)
    mount_dashboard(app, settings)
    routes, middleware = len(app.routes), len(app.user_middleware)
    mount_dashboard(app, settings)
    assert (len(app.routes), len(app.user_middleware)) == (routes, middleware)


def test_unknown_dashboard_path_is_an_html_404(web: TestClient) -> None:
    r = web.get("/ui/no/such/page")
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert web.get("/api/v1/no/such/thing").headers["content-type"] == "application/json"


def test_benchmark_page_says_what_the_board_will_read(web: TestClient, world: Any) -> None:
    """The plan (benchmarks.planning) on the benchmark's page, at its approved datasets'
    count and size: what a hospital reads there before it consents (issue 41)."""
    from sealbench.benchmarks.planning import plan
    from sealbench.benchmarks.registry import load as load_plugin
    from sealbench.contract.pin import BenchmarkPin

    sign_in(web, world.bench_owner.token)
    page = web.get(f"/ui/benchmarks/{world.benchmark_id}")
    assert page.status_code == 200
    section = page.text.split('id="plan"', 1)[1].split("</section>", 1)[0]
    assert "What the board will read" in section and "80% power" in section
    lines = re.findall(r"<li>(.*?)</li>", section, re.S)
    pin = re.search(r"<dt>Metrics version</dt><dd><code>([^<]+)</code>", page.text)
    assert lines and pin is not None
    head = lines[0].replace("&#39;", "'").replace("&amp;", "&")
    sites, cases = (int(x) for x in re.findall(r"(\d+) (?:sites?|cases?) ", head)[:2])
    expected = plan(load_plugin(BenchmarkPin.parse(pin.group(1))), sites=sites, cases=cases,
                    in_tee=False).lines()
    assert [line.strip() for line in expected] == [
        re.sub(r"&#39;", "'", line).strip() for line in lines]
