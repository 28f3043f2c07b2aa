"""The pooled leaderboard (issue 15) through the API and the dashboard: case-weighted
pooled figures equal to pooling the raw cases, each site's value the one it published, rank
groups from overlapping intervals, figures the release noise dominates shown as intervals and
never ranked, the small-cell rule, the mock-TEE mark, the visibility matrix (API and page),
forest plots, the CSV download, and an answer that carries numbers, never summaries or tokens.

Summaries are differentially private releases (issue 25), made here with the INSECURE fixed
noise source: zero offsets unless a test sets them, so every figure has a known answer, at the
noise scale the pin declares, so intervals and "not informative" are what real releases of that
many cases give (at epsilon 1 a region's noise sd is about 9.3/n, the mean over regions' 5.3/n).
"""

from __future__ import annotations

import csv
import inspect
import io
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import fastapi.routing
import numpy as np
import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy import func, select

from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, CaseScores, RegionScores
from sealbench.benchmarks.registry import load as load_plugin
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.benchmarks.wdbc import summary as wdbc_summary
from sealbench.client.views.render import print_table
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.confidential_space import CONFIDENTIAL_SPACE_ISSUER
from sealbench.server import db_cache
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.models import Benchmark, BenchmarkDataset, Dataset, Model, Result
from sealbench.server.routers import results as results_router
from sealbench.server.schemas.leaderboard import PooledLeaderboard, to_csv
from sealbench.server.settings import ServerSettings
from sealbench.server.web import _leaderboard_page, mount_dashboard

SPEC = BRATS_2023_GLI_METRICS
BRATS = load_plugin(BenchmarkPin.parse("brats-2023-gli/1"))
NOW = datetime(2026, 1, 1, tzinfo=UTC)
_seq = itertools.count(1)


def _brats_cases(rng: np.random.Generator, n: int, dice: float, sd: float) -> list[CaseScores]:
    out = []
    for i in range(n):
        regions = {}
        for region in SPEC.regions:
            d = float(np.clip(rng.normal(dice, sd), 0, 1))
            regions[region] = RegionScores(
                dice=d, hd95=float(rng.gamma(2, 3)), sensitivity=d, specificity=1.0,
                lesion_dice=d, lesion_hd95=5.0, num_tp=1, num_fp=0, num_fn=0,
                gt_volume_mm3=1.0, pred_volume_mm3=1.0)
        out.append(CaseScores(case_id=f"c{i}", regions=regions))
    return out


@dataclass
class Board:
    """A benchmark (owned by ``authority``) with models and datasets of several owners."""

    client: TestClient
    db_url: str
    users: dict[str, Any]
    benchmark_id: int
    datasets: dict[str, int]
    models: dict[str, int]
    cases: dict[tuple[str, str], list[CaseScores]]

    def get(self, who: str, **params: Any) -> Any:
        return self.client.get(f"/api/v1/benchmarks/{self.benchmark_id}/leaderboard/pooled",
                               params=params, headers=self.users[who].headers)


def _insert(db_url: str, rows: list[Any]) -> list[int]:
    db = open_database(db_url)
    try:
        with db.writer() as session:
            session.add_all(rows)
            session.commit()
            return [r.id for r in rows]
    finally:
        db.dispose()


def _result(bench: int, dataset: int, model: int, by: int, summary: dict[str, Any],
            issuer: str = "https://attestation.test.invalid") -> Result:
    n = next(_seq)
    return Result(benchmark_id=bench, dataset_id=dataset, model_id=model, submitted_by_id=by,
                  summary=summary, sealed_result_digest=sha256_digest(f"sealed-{n}".encode()),
                  attestation_token=f"header.payload-{n}.signature", token_issuer=issuer,
                  image_digest="sha256:" + "1" * 64,
                  nonce=sha256_digest(f"nonce-{n}".encode())[7:], created_at=NOW)


def _world(client: TestClient, make_user: Any, database_url: str, plugin: str) -> Board:
    users = {name: make_user(f"{name}@example.test") for name in
             ("authority", "hospital_a", "hospital_b", "vendor_x", "vendor_y", "outsider")}
    bench = Benchmark(owner_id=users["authority"].user_id, name=f"b-{plugin}", version="1",
                      description="d", data_contract={}, metrics_spec={}, metrics_version=plugin,
                      image_reference="r", image_digest="sha256:" + "1" * 64, state="approved",
                      created_at=NOW, updated_at=NOW)
    (bid,) = _insert(database_url, [bench])
    ds = {name: Dataset(owner_id=users[owner].user_id, name=name, digest=sha256_digest(
        name.encode()), case_count=1, statistics={}, state="registered", created_at=NOW)
        for name, owner in (("small", "hospital_a"), ("large", "hospital_b"),
                            ("tiny", "hospital_a"))}
    ms = {name: Model(owner_id=users[owner].user_id, name=name, version="1",
                      digest=sha256_digest(name.encode()), format="onnx", io_contract={},
                      state="registered", created_at=NOW)
          for name, owner in (("x", "vendor_x"), ("y", "vendor_y"), ("z", "vendor_y"))}
    dids = dict(zip(ds, _insert(database_url, list(ds.values())), strict=True))
    mids = dict(zip(ms, _insert(database_url, list(ms.values())), strict=True))
    return Board(client, database_url, users, bid, dids, mids, {})


@pytest.fixture
def web(settings: ServerSettings, clock: Any, jwks_fetcher: Any) -> Iterator[TestClient]:
    """The app with its dashboard (the API answers on it too)."""
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher)
    mount_dashboard(app, settings)
    with TestClient(app) as test_client:
        yield test_client


def _released(cases: list[CaseScores]) -> dict[str, Any]:
    """The public summary the enclave publishes for ``cases`` (a release; zero noise offsets)."""
    return BRATS.summarise(cases, InsecureFixedNoise()).to_json()


#: (model, dataset): cases, mean Dice, sd. x's and z's releases are informative at every site;
#: y's 60 cases a site give an informative mean over the regions but not a region's Dice (a
#: region needs about 73 cases), which pooling y's two sites makes informative.
PLAN = {
    ("x", "small"): (100, 0.85, 0.15), ("x", "large"): (2000, 0.70, 0.10),
    ("y", "small"): (60, 0.74, 0.20), ("y", "large"): (60, 0.68, 0.20),
    ("z", "small"): (600, 0.30, 0.05), ("z", "large"): (600, 0.32, 0.05),
    ("x", "tiny"): (2, 0.99, 0.01),
}


@pytest.fixture
def brats(web: TestClient, make_user: Any, database_url: str) -> Board:
    board = _world(web, make_user, database_url, "brats-2023-gli/1")
    rng = np.random.default_rng(7)
    rows = []
    for (model, dataset), (n, mean, sd) in PLAN.items():
        cases = _brats_cases(rng, n, mean, sd)
        board.cases[(model, dataset)] = cases
        summary = _released(cases)
        wrapped = {"summary_id": "sealbench/result-summary", "aggregates": summary}
        issuer = CONFIDENTIAL_SPACE_ISSUER if model == "z" else "https://attestation.test.invalid"
        rows.append(_result(board.benchmark_id, board.datasets[dataset], board.models[model],
                            board.users["hospital_a"].user_id,
                            wrapped if model == "x" else summary, issuer))
    _insert(database_url, rows)
    return board


def _ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _standing(doc: Any, model_id: int) -> Any:
    return next(s for s in doc["standings"] if s["model_id"] == model_id)


def _raw_dice(cases: list[CaseScores]) -> np.ndarray:
    return np.array([np.mean([c.regions[r].dice for r in SPEC.regions]) for c in cases])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_pooled_headline_is_case_weighted_over_the_raw_cases(brats: Board) -> None:
    doc = _ok(brats.get("authority"))
    assert doc["metric"] == doc["headline"] == "dice"
    x = _standing(doc, brats.models["x"])["values"][0]
    raw = np.concatenate([_raw_dice(brats.cases[("x", d)]) for d in ("small", "large")])
    assert (x["n_sites"], x["n_cases"]) == (2, 2100)
    assert x["pooled"] == pytest.approx(float(raw.mean()), abs=1e-12)
    assert x["ci95_low"] < float(raw.mean()) < x["ci95_high"]
    site_means = [float(_raw_dice(brats.cases[("x", d)]).mean()) for d in ("small", "large")]
    assert abs(x["pooled"] - sum(site_means) / 2) > 0.02  # not the unweighted mean of sites
    assert sorted(s["value"] for s in x["sites"]) == pytest.approx(sorted(site_means), abs=1e-12)
    assert x["site_min"] == pytest.approx(min(site_means)) and x["i2"] is not None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_site_values_are_the_values_the_sites_published(web: TestClient, make_user: Any,
                                                         database_url: str, h: Any) -> None:
    """Each site's value, with its interval, is the figure of that site's own release (noise
    included: offsets make the releases differ from the cases), and the pooled value is the
    plug-in's pooling of the releases, never a re-estimate from anything else."""
    board = _world(web, make_user, database_url, "brats-2023-gli/1")
    # offsets on the scaled sums: +20 over 400 cases is +0.05 a region, -8 over 800 is -0.01
    stored = {"small": h.brats_aggregates(0.60, 400, offsets=(20.0,)),
              "large": h.brats_aggregates(0.70, 800, offsets=(-8.0,))}
    _insert(database_url, [
        _result(board.benchmark_id, board.datasets[d], board.models["x"],
                board.users["hospital_a"].user_id, summary) for d, summary in stored.items()])
    doc = _ok(board.get("authority", all_metrics="true"))
    values = {v["metric"]: v for v in _standing(doc, board.models["x"])["values"]}
    parsed = {board.datasets[d]: BRATS.parse_summary(summary) for d, summary in stored.items()}
    for key, value in values.items():
        for site in value["sites"]:
            published = {_key(f.ref): f for f in BRATS.figures(parsed[site["dataset_id"]])}[key]
            assert (site["value"], site["ci95_low"], site["ci95_high"]) == (
                published.value, published.low, published.high), key
        pooled = {_key(f.ref): f for f in BRATS.pool(list(parsed.values())).figures}[key]
        assert (value["pooled"], value["ci95_low"], value["ci95_high"]) == (
            pooled.value, pooled.low, pooled.high), key
    by_site = {s["dataset_id"]: s["value"] for s in values["dice"]["sites"]}
    assert by_site[board.datasets["small"]] == pytest.approx(0.65, abs=1e-12)
    assert by_site[board.datasets["large"]] == pytest.approx(0.69, abs=1e-12)
    assert values["dice"]["pooled"] == pytest.approx((0.65 * 400 + 0.69 * 800) / 1200,
                                                     abs=1e-12)


def _key(ref: Any) -> str:
    return ref.metric if ref.group is None else f"{ref.metric}:{ref.group}"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_overlapping_intervals_share_a_rank(brats: Board) -> None:
    doc = _ok(brats.get("authority"))
    order = [s["model_id"] for s in doc["standings"]]
    x, y, z = (_standing(doc, brats.models[m]) for m in ("x", "y", "z"))
    # y (120 cases, wide interval) overlaps x (2,100 cases): tied, not ordered by noise
    xv, yv, zv = (s["values"][0] for s in (x, y, z))
    assert yv["ci95_low"] <= xv["ci95_high"] and xv["ci95_low"] <= yv["ci95_high"]
    assert yv["ci95_high"] - yv["ci95_low"] > 3 * (xv["ci95_high"] - xv["ci95_low"])
    assert (x["rank"], y["rank"], x["tied"], y["tied"]) == (1, 1, True, True)
    assert zv["ci95_high"] < min(xv["ci95_low"], yv["ci95_low"])
    assert (z["rank"], z["tied"]) == (3, False)
    assert order[-1] == brats.models["z"]
    assert "overlap" in doc["rank_rule"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_summary_under_the_small_cell_minimum_is_withheld(brats: Board) -> None:
    doc = _ok(brats.get("authority"))
    assert [(w["model_id"], w["dataset_id"]) for w in doc["withheld"]] == [
        (brats.models["x"], brats.datasets["tiny"])]
    assert brats.datasets["tiny"] not in {s["dataset_id"] for s in doc["sites"]}
    assert all(site["dataset_id"] != brats.datasets["tiny"]
               for s in doc["standings"] for v in s["values"] for site in v["sites"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_summary_the_enclave_withheld_is_listed_withheld_never_ranked(brats: Board) -> None:
    held = {"format": "sealbench/result-summary", "version": 1, "run_id": "r-held",
            "benchmark_id": str(brats.benchmark_id), "metrics_version": "brats-2023-gli/1",
            "aggregates": {}, "withheld": {"rule": "cases", "n_cases": 3, "minimum": 5}}
    _insert(brats.db_url, [_result(brats.benchmark_id, brats.datasets["tiny"],
                                   brats.models["y"], brats.users["hospital_a"].user_id, held)])
    doc = _ok(brats.get("authority"))
    reasons = {(w["model_id"], w["dataset_id"]): w["reason"] for w in doc["withheld"]}
    assert "withheld by the enclave" in reasons[(brats.models["y"], brats.datasets["tiny"])]
    y = _standing(doc, brats.models["y"])
    assert all(site["dataset_id"] != brats.datasets["tiny"]
               for v in y["values"] for site in v["sites"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_unknown_metric_is_refused_listing_valid_ones(brats: Board) -> None:
    response = brats.get("authority", metric="dice_wt")
    assert response.status_code == 422
    assert "dice:WT" in response.text and "dice:ET" in response.text
    # HD95 and the other secondary metrics are no longer published: not a metric to rank by
    gone = brats.get("authority", metric="hd95:ET")
    assert gone.status_code == 422 and "hd95" not in gone.text.split("valid metrics:")[1]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_rank_by_a_region_and_filter_by_site(brats: Board) -> None:
    doc = _ok(brats.get("authority", metric="dice:ET", site=[brats.datasets["large"]]))
    assert doc["metric"] == "dice:ET" and doc["direction"] == "higher"
    assert [s["dataset_id"] for s in doc["sites"]] == [brats.datasets["large"]]
    for s in doc["standings"]:
        (value,) = s["values"]
        assert value["metric"] == "dice:ET" and value["n_sites"] == 1
    x, y, z = (_standing(doc, brats.models[m]) for m in ("x", "y", "z"))
    assert (x["rank"], z["rank"]) == (1, 2)
    # y's 60 cases on this site alone: ET's Dice is not informative, so y is not ranked
    (yv,) = y["values"]
    assert y["rank"] is None and yv["pooled"] is None and yv["sites"][0]["value"] is None
    assert yv["ci95_high"] - yv["ci95_low"] > 0.5
    assert [s["model_id"] for s in doc["standings"]][-1] == brats.models["y"]
    every = _ok(brats.get("authority", all_metrics="true"))
    keys = [v["metric"] for v in every["standings"][0]["values"]]
    assert keys == ["dice", "dice:WT", "dice:TC", "dice:ET"] == [m["key"] for m in
                                                                 every["metrics"]]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_mock_issuer_results_are_marked(brats: Board) -> None:
    doc = _ok(brats.get("authority"))
    assert _standing(doc, brats.models["x"])["mock_tee"] is True
    z = _standing(doc, brats.models["z"])
    assert z["mock_tee"] is False and not any(s["mock_tee"] for s in z["values"][0]["sites"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_site_value_states_its_privacy_loss(brats: Board) -> None:
    """The pooled answer carries each site's epsilon and delta (its release's), the CSV the
    largest epsilon of each row."""
    doc = _ok(brats.get("authority"))
    sites = [s for st in doc["standings"] for v in st["values"] for s in v["sites"]]
    assert sites and all((s["epsilon"], s["delta"]) == (1.0, 1e-6) for s in sites)
    rows = list(csv.DictReader(io.StringIO(to_csv(PooledLeaderboard.model_validate(doc)))))
    assert rows and all(row["epsilon"] == "1.0" for row in rows)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_answer_carries_numbers_not_tokens_or_summaries(brats: Board) -> None:
    text = brats.get("authority", all_metrics="true").text
    assert "header.payload" not in text and "aggregates" not in text and "histograms" not in text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_visibility_matrix(brats: Board) -> None:
    m, d = brats.models, brats.datasets

    def seen(who: str) -> dict[int, set[int]]:
        doc = _ok(brats.get(who))
        return {s["model_id"]: {site["dataset_id"] for site in s["values"][0]["sites"]}
                for s in doc["standings"]}

    both = {d["small"], d["large"]}
    assert seen("authority") == {m["x"]: both, m["y"]: both, m["z"]: both}
    # a hospital: its own sites only, every model on them
    assert seen("hospital_b") == {m["x"]: {d["large"]}, m["y"]: {d["large"]},
                                  m["z"]: {d["large"]}}
    # a model owner: its own models on every site, never another model's values
    assert seen("vendor_x") == {m["x"]: both}
    assert seen("vendor_y") == {m["y"]: both, m["z"]: both}
    assert seen("outsider") == {}
    # the pooled figure of a hospital's view is pooled from its own site alone
    own = _standing(_ok(brats.get("hospital_b")), m["x"])["values"][0]
    assert own["n_cases"] == 2000


def _publish(board: Board, who: str, published: bool) -> Any:
    return board.client.post(f"/api/v1/benchmarks/{board.benchmark_id}/leaderboard",
                             json={"published": published}, headers=board.users[who].headers)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_visibility_matrix_of_a_published_leaderboard(brats: Board) -> None:
    """Once the authority publishes the leaderboard, every signed-in role (hospital, own and
    other model owner, outsider) sees every model's pooled and per-site values; withdrawn,
    the unpublished matrix holds again. Only the authority (or an admin) changes it."""
    m, d = brats.models, brats.datasets

    def seen(who: str) -> dict[int, set[int]]:
        doc = _ok(brats.get(who))
        return {s["model_id"]: {site["dataset_id"] for site in s["values"][0]["sites"]}
                for s in doc["standings"]}

    everything = {m["x"]: {d["small"], d["large"]}, m["y"]: {d["small"], d["large"]},
                  m["z"]: {d["small"], d["large"]}}
    for who in ("hospital_b", "vendor_x", "vendor_y", "outsider"):
        assert _publish(brats, who, True).status_code == 403
    assert seen("vendor_x") == {m["x"]: {d["small"], d["large"]}}  # still unpublished
    published = _ok(_publish(brats, "authority", True))
    assert published["leaderboard_published"] is True
    pooled = {who: _ok(brats.get(who)) for who in
              ("authority", "hospital_b", "vendor_x", "vendor_y", "outsider")}
    for who in pooled:
        assert seen(who) == everything, who
        assert pooled[who]["standings"] == pooled["authority"]["standings"], who
    # the small-cell rule still holds for everyone
    assert all(w["dataset_id"] == d["tiny"] for w in pooled["outsider"]["withheld"])
    assert _ok(_publish(brats, "authority", False))["leaderboard_published"] is False
    assert seen("vendor_x") == {m["x"]: {d["small"], d["large"]}}
    assert seen("outsider") == {}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("who", ["hospital_b", "vendor_x", "outsider"])
def test_page_of_a_published_leaderboard_shows_every_model(brats: Board, who: str) -> None:
    _ok(_publish(brats, "authority", True))
    api = _ok(brats.get(who, metric="dice:TC"))
    _sign_in(brats.client, brats.users[who].token)
    page = brats.client.get(f"/ui/benchmarks/{brats.benchmark_id}/pooled",
                            params={"metric": "dice:TC"})
    assert page.status_code == 200
    assert _page_rows(page.text) == _api_rows(api)
    assert len(api["standings"]) == 3


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_wdbc_pooled_sensitivity_equals_the_raw_cases(client: TestClient, make_user: Any,
                                                       database_url: str) -> None:
    """Through the plug-in's interface only (its summary is its own business): with zero
    noise offsets the pooled sensitivity is the raw cases' (0.5 is a bin edge), with an
    interval around it."""
    wdbc = load_plugin(BenchmarkPin.parse("wdbc/1"))
    board = _world(client, make_user, database_url, "wdbc/1")
    rng = np.random.default_rng(3)
    labels_all: list[np.ndarray] = []
    scores_all: list[np.ndarray] = []
    rows = []
    for dataset, n in (("small", 30), ("large", 900)):
        y = rng.random(n) < 0.4
        p = np.clip(np.where(y, rng.normal(0.7, 0.2, n), rng.normal(0.3, 0.2, n)), 0, 1)
        labels_all.append(y)
        scores_all.append(p)
        results = [wdbc_summary.WdbcCaseResult(case_id=f"c{i}", malignant=bool(y[i]),
                                               score=float(p[i])) for i in range(n)]
        summary = wdbc.summarise(results, InsecureFixedNoise()).to_json()
        rows.append(_result(board.benchmark_id, board.datasets[dataset], board.models["x"],
                            board.users["hospital_a"].user_id, summary))
    _insert(database_url, rows)
    y, p = np.concatenate(labels_all), np.concatenate(scores_all)
    doc = _ok(board.get("authority", metric="sensitivity"))
    value = _standing(doc, board.models["x"])["values"][0]
    expected = float(((p >= 0.5) & y).sum() / y.sum())
    assert value["pooled"] == pytest.approx(expected, abs=1e-12)
    assert value["n_cases"] == 930 and value["ci95_low"] < expected < value["ci95_high"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_benchmark_without_an_installed_plugin_says_so(client: TestClient, make_user: Any,
                                                        database_url: str) -> None:
    board = _world(client, make_user, database_url, "brats-2023/1")
    response = board.get("authority")
    assert response.status_code == 409 and "plug-in" in response.text


# -- the dashboard ------------------------------------------------------------------------------

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_ROW = re.compile(r'<tr data-model-id="(\d+)" data-rank="([^"]*)" data-pooled="([^"]*)" '
                  r'data-ci-low="([^"]*)" data-ci-high="([^"]*)" data-n-sites="(\d+)" '
                  r'data-n-cases="(\d+)">(.*?)</tr>', re.S)
_CELL = re.compile(r'<td class="num cell" data-dataset-id="(\d+)" data-value="([^"]*)">')


def _sign_in(web: TestClient, token: str) -> None:
    web.cookies.clear()
    form = web.get("/ui/sign-in")
    csrf = _CSRF.search(form.text)
    assert csrf is not None
    r = web.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token, "next": "/ui/"},
                 follow_redirects=False)
    assert r.status_code == 303, r.text


def _float(text: str) -> float | None:
    return None if text == "" else float(text)


def _page_rows(html: str) -> dict[int, tuple[Any, ...]]:
    return {int(m[0]): (None if m[1] == "" else int(m[1]), _float(m[2]), _float(m[3]),
                        _float(m[4]), int(m[5]), int(m[6]),
                        {int(d): _float(v) for d, v in _CELL.findall(m[7])})
            for m in _ROW.findall(html)}


def _api_rows(doc: Any) -> dict[int, tuple[Any, ...]]:
    out = {}
    for s in doc["standings"]:
        v = s["values"][0]
        out[s["model_id"]] = (s["rank"], v["pooled"], v["ci95_low"], v["ci95_high"],
                              v["n_sites"], v["n_cases"],
                              {x["dataset_id"]: x["value"] for x in v["sites"]})
    return out


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("who", ["authority", "hospital_b", "vendor_x", "vendor_y", "outsider"])
def test_page_shows_exactly_what_the_api_answers(brats: Board, who: str) -> None:
    api = _ok(brats.get(who, metric="dice:TC"))
    _sign_in(brats.client, brats.users[who].token)
    page = brats.client.get(f"/ui/benchmarks/{brats.benchmark_id}/pooled",
                            params={"metric": "dice:TC"})
    assert page.status_code == 200
    assert _page_rows(page.text) == _api_rows(api)
    assert len(api["standings"]) == {"authority": 3, "hospital_b": 3, "vendor_x": 1,
                                     "vendor_y": 2, "outsider": 0}[who]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_forest_plots_breakdown_badge_and_small_cells_on_the_page(brats: Board) -> None:
    _sign_in(brats.client, brats.users["authority"].token)
    html = brats.client.get(f"/ui/benchmarks/{brats.benchmark_id}/pooled").text
    forests = re.findall(r'<figure class="chart forest" data-model-id="(\d+)">(.*?)</figure>',
                         html, re.S)
    assert {int(m) for m, _ in forests} == set(brats.models.values())
    api = _ok(brats.get("authority", all_metrics="true"))
    for model_id, svg in forests:
        # the pooled diamond, and one estimate with its interval per site it published
        value = _standing(api, int(model_id))["values"][0]
        assert value["pooled"] is not None and all(s["value"] for s in value["sites"])
        assert svg.count('class="diamond"') == 1 and svg.count('class="estimate"') == 2
        assert svg.count('<line class="ci"') == 2
        ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', svg)
        assert ticks[0] == "0" and ticks[-1] == "1"  # Dice starts at 0 and ends at 1
    shown = re.findall(r'<td class="num" data-metric="dice:(WT|TC|ET)" data-value="([^"]*)">',
                       html)
    assert [g for g, _ in shown[:3]] == ["WT", "TC", "ET"]  # the per-region breakdown
    values = {v["metric"]: v["pooled"] for v in api["standings"][0]["values"]}
    assert [float(v) for _, v in shown[:3]] == [values[f"dice:{g}"] for g in ("WT", "TC", "ET")]
    x_row = next(m for m in _ROW.findall(html) if int(m[0]) == brats.models["x"])
    z_row = next(m for m in _ROW.findall(html) if int(m[0]) == brats.models["z"])
    assert "mock TEE, not a confidential run" in x_row[7]
    assert "mock TEE" not in z_row[7]
    assert f"dataset #{brats.datasets['tiny']}" in html and "small-cell" in html
    assert f'data-dataset-id="{brats.datasets["tiny"]}"' not in html


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_csv_download_equals_the_api(brats: Board) -> None:
    _sign_in(brats.client, brats.users["vendor_y"].token)
    download = brats.client.get(f"/ui/benchmarks/{brats.benchmark_id}/pooled.csv")
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/csv")
    assert "attachment" in download.headers["content-disposition"]
    api = PooledLeaderboard.model_validate(_ok(brats.get("vendor_y", all_metrics="true")))
    assert download.text == to_csv(api)
    assert {line.split(",")[0] for line in download.text.splitlines()[1:]} == {"y 1", "z 1"}
    bad = brats.client.get(f"/ui/benchmarks/{brats.benchmark_id}/pooled.csv",
                           params={"metric": "nope"})
    assert bad.status_code == 422 and "dice:WT" in bad.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_result_page_of_a_mock_issuer_says_so(brats: Board) -> None:
    api = _ok(brats.get("authority"))
    ids = {s["model_id"]: s["values"][0]["sites"][0]["result_id"] for s in api["standings"]}
    _sign_in(brats.client, brats.users["authority"].token)
    mock = brats.client.get(f"/ui/results/{ids[brats.models['x']]}")
    real = brats.client.get(f"/ui/results/{ids[brats.models['z']]}")
    assert mock.status_code == real.status_code == 200
    assert "mock TEE, not a confidential run" in mock.text
    assert "mock TEE" not in real.text
    board = brats.client.get(f"/ui/benchmarks/{brats.benchmark_id}/leaderboard")
    assert f'/ui/benchmarks/{brats.benchmark_id}/pooled"' in board.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_board_of_releases_too_noisy_to_read_ranks_nobody_and_shows_only_intervals(
        web: TestClient, make_user: Any, database_url: str, h: Any) -> None:
    """5 cases a site (the small-cell minimum, so published): at epsilon 1 the noise alone
    spans more than half of [0, 1] for every figure, site and pooled. Nobody is ranked (not even
    the model whose noisy value would lead), no value is shown, in the API, the page or the
    forest plots; each figure carries its interval, and the page says why."""
    board = _world(web, make_user, database_url, "brats-2023-gli/1")
    plan = {("x", "small"): 0.95, ("x", "large"): 0.90, ("y", "small"): 0.40,
            ("y", "large"): 0.35}
    _insert(database_url, [
        _result(board.benchmark_id, board.datasets[d], board.models[m],
                board.users["hospital_a"].user_id, h.brats_summary(dice, 5))
        for (m, d), dice in plan.items()])
    doc = _ok(board.get("authority", all_metrics="true"))
    assert {s["model_id"] for s in doc["standings"]} == {board.models["x"], board.models["y"]}
    assert doc["withheld"] == []
    for standing in doc["standings"]:
        assert (standing["rank"], standing["tied"]) == (None, False)
        for value in standing["values"]:
            assert value["pooled"] is None and value["n_cases"] == 10
            assert value["ci95_high"] - value["ci95_low"] > 0.5
            assert (value["site_min"], value["site_max"], value["i2"]) == (None, None, None)
            for site in value["sites"]:
                assert site["value"] is None and site["n_cases"] == 5
                assert site["ci95_high"] - site["ci95_low"] > 0.5
                # why, and what would show it: computed from the site's release
                assert site["withheld_reason"].startswith(
                    "privacy noise at ε 1 over 5 cases spreads ±")
            # the pool of two sites' releases: computed, and the same words everywhere
            why = value["withheld_reason"]
            assert value["epsilon"] == 1.0 and value["tee_pooled"] is False
            assert why.startswith("privacy noise at ε 1 over 10 cases spreads ±"), why
            needed = int(why.rsplit("shows from about ", 1)[1].split()[0].replace(",", ""))
            assert why.endswith(f"shows from about {needed:,} cases over these 2 sites")
            assert 10 < needed < 1000
    parsed = PooledLeaderboard.model_validate(doc)
    headline = _ok(board.get("authority"))
    reasons = [s["values"][0]["withheld_reason"] for s in headline["standings"]]
    for width in (80, 140):
        console = Console(width=width, record=True, force_terminal=False)
        print_table(console, PooledLeaderboard.model_validate(headline))
        shown = " ".join(console.export_text().split())
        assert "withheld (1)" in shown and "withheld (2)" in shown
        for why in reasons:
            assert " ".join(why.split()) in shown, (width, shown)
        assert "ε" in shown
    rows = list(csv.DictReader(io.StringIO(to_csv(parsed))))
    assert rows and all(r["pooled"] == "" and r["withheld_reason"].startswith(
        "privacy noise at ε 1 over 10 cases") and r["epsilon"] == "1.0"
        and r["tee_pooled"] == "false" for r in rows)
    _sign_in(board.client, board.users["authority"].token)
    html = board.client.get(f"/ui/benchmarks/{board.benchmark_id}/pooled").text
    api = _ok(board.get("authority"))
    assert _page_rows(html) == _api_rows(api)
    rows = _ROW.findall(html)
    assert len(rows) == 2
    for row in rows:
        assert (row[1], row[2]) == ("", "")  # no rank, no pooled value
        assert float(row[3]) < float(row[4])  # the interval
        cells = re.findall(r'<td class="num(?: [a-z]+)?"[^>]*>(.*?)</td>', row[7], re.S)
        rank, score, interval, _, _, epsilon, site_range, i2, *sites = cells
        assert rank.strip() == "—" and site_range == "—" and i2 == "—"
        assert epsilon == "1"
        for shown in (score, *sites):
            why = re.search(r'<span class="why">(.*?)</span>', shown)
            assert why is not None and why.group(1).startswith("privacy noise at ε 1 over ")
            # what the cell shows beside its reason, not its tooltip: no number
            text = re.sub(r"<[^>]+>", " ", shown.replace(why.group(0), ""))
            assert "not informative" in text and not re.search(r"\d", text), shown
            assert "95% interval" in shown
        assert re.fullmatch(r"[0-9.]+ to [0-9.]+", interval)
    forests = re.findall(r'<figure class="chart forest" data-model-id="(\d+)">(.*?)</figure>',
                         html, re.S)
    assert len(forests) == 2
    for _, svg in forests:
        assert 'class="diamond"' not in svg and 'class="estimate"' not in svg
        assert '<line class="ci"' not in svg
        # the withheld figures' intervals are drawn, dashed: two sites and the pool
        assert svg.count('<line class="ci withheld"') == 3
        titles = re.findall(r"<title>([^<]*)</title>", svg)
        assert len(titles) == 3 and all("not informative (95% CI" in t for t in titles)
    assert "not informative" in html.split('id="rank-rule"')[0]  # the lede says why


# -- the boards kept in the database (issue 42, sealbench.server.db_cache) ----------------------
# A stored board is served without building it only while nothing it was built from changed (a
# new result, a withdrawn association, publication), never to a viewer of another class (a
# hospital never reads the authority's board, nor one user another's), never for a site filter;
# the page shows what a person reads first and the rest on demand; a fresh app's first request
# reads no endpoint's source file.


def _stored_rows(board: Board) -> list[tuple[str, str]]:
    db = open_database(board.db_url)
    try:
        with db.reader() as s:
            return [(k, st) for k, st in s.execute(
                select(db_cache.BoardCache.key, db_cache.BoardCache.stamp))]
    finally:
        db.dispose()


def _no_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the board was built, not read from the database")

    monkeypatch.setattr(results_router, "pooled_board", refuse)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_unchanged_board_is_served_as_stored_without_building_it(
        brats: Board, monkeypatch: pytest.MonkeyPatch) -> None:
    first = brats.get("authority")
    assert [k for k, _ in _stored_rows(brats)] == ["owner|metric=|every=0|breakdown=0"]
    _no_building(monkeypatch)
    again = brats.get("authority")
    assert again.status_code == 200 and again.content == first.content


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_new_result_makes_the_stored_board_stale(brats: Board,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    before = _ok(brats.get("authority"))
    cases = brats.cases[("z", "small")]
    _insert(brats.db_url, [_result(brats.benchmark_id, brats.datasets["tiny"],
                                   brats.models["z"], brats.users["hospital_a"].user_id,
                                   _released(cases))])
    after = _ok(brats.get("authority"))
    z = next(s for s in after["standings"] if s["model_id"] == brats.models["z"])
    z_before = next(s for s in before["standings"] if s["model_id"] == brats.models["z"])
    assert z["values"][0]["n_sites"] == z_before["values"][0]["n_sites"] + 1
    _no_building(monkeypatch)
    assert _ok(brats.get("authority")) == after


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_withdrawn_association_marks_the_stored_board_again(brats: Board) -> None:
    before = _ok(brats.get("authority"))
    assert not any(x["withdrawn"] for s in before["standings"] for x in s["values"][0]["sites"])
    hospital = brats.users["hospital_b"].user_id
    _insert(brats.db_url, [BenchmarkDataset(
        benchmark_id=brats.benchmark_id, asset_id=brats.datasets["large"], revision=1,
        status="withdrawn", initiator_role="asset_owner", initiated_by_id=hospital,
        actor_id=hospital, created_at=NOW)])
    after = _ok(brats.get("authority"))
    marked = {x["dataset_id"] for s in after["standings"] for x in s["values"][0]["sites"]
              if x["withdrawn"]}
    assert marked == {brats.datasets["large"]}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_hospital_never_reads_the_authoritys_stored_board(brats: Board) -> None:
    authority = _ok(brats.get("authority"))
    hospital = _ok(brats.get("hospital_b"))
    vendor = _ok(brats.get("vendor_x"))
    assert hospital["scope"] != authority["scope"]
    # each viewer its own row; the vendor sees its own model only, as built for it
    assert {s["model_id"] for s in vendor["standings"]} == {brats.models["x"]}
    keys = {k.split("|")[0] for k, _ in _stored_rows(brats)}
    assert keys == {"owner", f"user:{brats.users['hospital_b'].user_id}",
                    f"user:{brats.users['vendor_x'].user_id}"}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_one_user_never_reads_another_users_stored_board(brats: Board) -> None:
    x = _ok(brats.get("vendor_x"))
    y = _ok(brats.get("vendor_y"))
    assert {s["model_id"] for s in x["standings"]} == {brats.models["x"]}
    assert {s["model_id"] for s in y["standings"]} == {brats.models["y"], brats.models["z"]}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_publishing_the_board_restamps_it_for_everyone(brats: Board) -> None:
    assert _ok(brats.get("outsider"))["standings"] == []
    db = open_database(brats.db_url)
    try:
        with db.writer() as s:
            bench = s.get(Benchmark, brats.benchmark_id)
            assert bench is not None
            bench.leaderboard_published = True
            s.commit()
    finally:
        db.dispose()
    assert len(_ok(brats.get("outsider"))["standings"]) == 3


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_site_filter_is_never_stored(brats: Board) -> None:
    _ok(brats.get("authority", site=[brats.datasets["small"]]))
    assert _stored_rows(brats) == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_stored_board_of_an_older_format_is_not_served(
        brats: Board, monkeypatch: pytest.MonkeyPatch) -> None:
    _ok(brats.get("authority"))
    monkeypatch.setattr(db_cache, "BOARD_FORMAT", "board/older")
    built = []
    original = results_router.pooled_board

    def counting(*a: Any, **k: Any) -> Any:
        built.append(1)
        return original(*a, **k)

    monkeypatch.setattr(results_router, "pooled_board", counting)
    _ok(brats.get("authority"))
    assert built == [1]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_page_shows_the_first_forests_and_the_rest_on_demand(
        brats: Board, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_leaderboard_page, "FIRST_FORESTS", 1)
    monkeypatch.setattr(_leaderboard_page, "SITE_COLUMNS", 1)
    _sign_in(brats.client, brats.users["authority"].token)
    url = f"/ui/benchmarks/{brats.benchmark_id}/pooled"
    first = brats.client.get(url).text
    assert len(re.findall(r'<figure class="chart forest"', first)) == 1
    assert 'id="more-forests"' in first and 'id="site-values"' in first
    assert 'class="num cell' not in first  # no site column
    every = brats.client.get(url, params={"show": "all"}).text
    assert len(re.findall(r'<figure class="chart forest"', every)) == 3
    assert 'id="more-forests"' not in every and 'class="num cell' in every
    assert brats.client.get(url, params={"show": "bogus"}).status_code == 422


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_fresh_apps_first_request_reads_no_endpoint_source(
        brats: Board, monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[object] = []
    original = inspect.getsourcelines

    def counting(obj: Any) -> Any:
        read.append(obj)
        return original(obj)

    monkeypatch.setattr(fastapi.routing.inspect, "getsourcelines", counting)
    _ok(brats.get("authority"))
    # endpoints no request has reached since the start (the per-site board, a result list)
    _ok(brats.client.get(f"/api/v1/benchmarks/{brats.benchmark_id}/leaderboard",
                         headers=brats.users["authority"].headers))
    _ok(brats.client.get("/api/v1/results", headers=brats.users["authority"].headers))
    assert read == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_stamp_names_what_the_board_was_built_from(brats: Board) -> None:
    db = open_database(brats.db_url)
    try:
        with db.reader() as s:
            found = db_cache.stamp(s, brats.benchmark_id)
            assert found is not None
            text, owner, published = found
            assert owner == brats.users["authority"].user_id and published is False
            assert text.startswith(db_cache.BOARD_FORMAT + "|")
            assert db_cache.stamp(s, 10**6) is None
            n = s.execute(select(func.count()).select_from(db_cache.BoardCache)).scalar_one()
            assert n == 0
    finally:
        db.dispose()
