"""The pooled leaderboard page in a real headless Chromium (Debian's ``chromium`` driven by
Playwright over CDP) against a registry served on a loopback port: the forest plots render (a
pooled diamond and a site interval per row, on an axis chosen from the data that covers every
drawn interval and says where it starts; a WDBC board's AUROCs of 0.93 to 0.99 spread over the
axis instead of one clump at the right edge of 0 to 1), the table equals the API, the per-region
breakdown is the sites' releases pooled, a site whose release is too noisy to read shows no
number, the mock-TEE badge shows, the layout holds on a phone-sized screen, the CSV download is
the API's CSV, and no request leaves the registry (the Content-Security-Policy holds).

The stored summaries are BraTS version 2 summaries (a differentially private release of Dice per
region) made with the insecure fixed noise source: zero noise offsets, so every figure has a
known answer, with the noise scale the pin declares, so intervals and "not informative" are
exactly what a real release of that many cases gives."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from playwright.sync_api import Browser, Page, sync_playwright

from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, CaseScores, RegionScores
from sealbench.benchmarks.brats.plugin import PLUGIN
from sealbench.benchmarks.release import Z95, InsecureFixedNoise
from sealbench.benchmarks.wdbc.plugin import PLUGIN as WDBC
from sealbench.benchmarks.wdbc.summary import WdbcCaseResult
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.confidential_space import CONFIDENTIAL_SPACE_ISSUER
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.models import Benchmark, Dataset, Model, Result
from sealbench.server.schemas.leaderboard import PooledLeaderboard, to_csv
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings
from sealbench.server.web import mount_dashboard

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = BRATS_2023_GLI_METRICS
#: Cases per site. hospital-a and hospital-b hold enough cases that each site's own release is
#: informative at epsilon 1 (noise sd of a region's mean Dice 8.45/n); hospital-c's 5 cases (the
#: small-cell minimum, so published) give a release whose noise alone spans more than half of
#: [0, 1]: its figures are not informative and must show no number.
SITES = {"hospital-a": 400, "hospital-b": 1200, "hospital-c": 5}
NOISY_SITE = "hospital-c"


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    benchmark_id: int
    models: int
    #: Each model's exact mean Dice per region over all its cases (name -> region -> mean):
    #: what the zero-noise releases pooled must give.
    exact: dict[str, dict[str, float]]
    #: Dataset id by site name.
    sites: dict[str, int]
    #: A WDBC benchmark whose models' AUROCs are 0.93 to 0.99 at two large sites.
    wdbc_benchmark_id: int

    def api(self, path: str, **params: Any) -> Any:
        r = httpx.get(f"{self.url}/api/v1{path}", params=params, timeout=30,
                      headers={"Authorization": f"Bearer {self.token}"})
        r.raise_for_status()
        return r.json()


def _cases(rng: np.random.Generator, n: int, dice: float) -> list[CaseScores]:
    cases = []
    for i in range(n):
        regions = {}
        for region in SPEC.regions:
            d = float(np.clip(rng.normal(dice, 0.08), 0, 1))
            regions[region] = RegionScores(
                dice=d, hd95=float(rng.gamma(2, 3)), sensitivity=d, specificity=1.0,
                lesion_dice=d, lesion_hd95=4.0, num_tp=1, num_fp=0, num_fn=0,
                gt_volume_mm3=1.0, pred_volume_mm3=1.0)
        cases.append(CaseScores(case_id=f"c{i}", regions=regions))
    return cases


#: WDBC-like models (name, separation of the classes' logits): AUROCs of about 0.93, 0.96 and
#: 0.99; 20000 cases per site make each release's 95% interval about +-0.01 wide.
WDBC_MODELS = (("logreg", 1.1), ("mlp", 1.35), ("boosted", 2.0))
WDBC_CASES = 20_000


def _wdbc_summary(rng: np.random.Generator, separation: float) -> dict[str, Any]:
    malignant = rng.random(WDBC_CASES) < 0.37
    logits = rng.normal(np.where(malignant, separation, -separation), 1.0)
    scores = 1.0 / (1.0 + np.exp(-logits))
    cases = [WdbcCaseResult(case_id=f"w{i}", malignant=bool(m), score=float(p))
             for i, (m, p) in enumerate(zip(malignant, scores, strict=True))]
    return {"format": "sealbench/result-summary", "version": 1, "metrics_version": "wdbc/1",
            "aggregates": WDBC.summarise(cases, InsecureFixedNoise()).to_json()}


def _summary(cases: list[CaseScores]) -> dict[str, Any]:
    """The run summary the enclave writes around the plug-in's version 2 summary: a release
    made with zero noise offsets and the noise scale the pin declares."""
    return {"format": "sealbench/result-summary", "version": 1,
            "metrics_version": "brats-2023-gli/1",
            "aggregates": PLUGIN.summarise(cases, InsecureFixedNoise()).to_json()}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("pooled-registry")
    settings = ServerSettings(data_dir=data, trusted_issuers=())
    db = open_database(settings.effective_database_url)
    upgrade_to_head(db.engine)
    rng = np.random.default_rng(5)
    with db.writer() as s:
        user, token = create_user(s, email="authority@bench.test", is_admin=False, now=NOW)
        bench = Benchmark(owner_id=user.id, name="brats", version="1", description="d",
                          data_contract={}, metrics_spec={}, metrics_version="brats-2023-gli/1",
                          image_reference="r", image_digest="sha256:" + "1" * 64,
                          state="approved", created_at=NOW, updated_at=NOW)
        s.add(bench)
        s.flush()
        sites = [Dataset(owner_id=user.id, name=name, digest=sha256_digest(name.encode()),
                         case_count=size, statistics={}, state="registered", created_at=NOW)
                 for name, size in SITES.items()]
        models = [Model(owner_id=user.id, name=f"unet-{k}", version="1",
                        digest=sha256_digest(k.encode()), format="onnx", io_contract={},
                        state="registered", created_at=NOW) for k in ("ref", "small", "weak")]
        s.add_all([*sites, *models])
        s.flush()
        n = 0
        exact: dict[str, dict[str, float]] = {}
        for model, skill in zip(models, (0.85, 0.83, 0.6), strict=True):
            everything: list[CaseScores] = []
            for site, size in zip(sites, SITES.values(), strict=True):
                n += 1
                cases = _cases(rng, size, skill)
                everything += cases
                s.add(Result(
                    benchmark_id=bench.id, dataset_id=site.id, model_id=model.id,
                    submitted_by_id=user.id, summary=_summary(cases),
                    sealed_result_digest=sha256_digest(f"s{n}".encode()),
                    attestation_token="t", created_at=NOW, image_digest="sha256:" + "1" * 64,
                    token_issuer=("https://mock-tee.invalid" if model.name == "unet-weak"
                                  else CONFIDENTIAL_SPACE_ISSUER), nonce=f"{n:064x}"))
            exact[model.name] = {r: float(np.mean([c.regions[r].dice for c in everything]))
                                 for r in SPEC.regions}
        wdbc = Benchmark(owner_id=user.id, name="wdbc", version="1", description="d",
                         data_contract={}, metrics_spec={}, metrics_version="wdbc/1",
                         image_reference="r", image_digest="sha256:" + "2" * 64,
                         state="approved", created_at=NOW, updated_at=NOW)
        s.add(wdbc)
        s.flush()
        for model, (_, separation) in zip(models, WDBC_MODELS, strict=True):
            for site in sites[:2]:
                n += 1
                s.add(Result(
                    benchmark_id=wdbc.id, dataset_id=site.id, model_id=model.id,
                    submitted_by_id=user.id, summary=_wdbc_summary(rng, separation),
                    sealed_result_digest=sha256_digest(f"s{n}".encode()),
                    attestation_token="t", created_at=NOW, image_digest="sha256:" + "2" * 64,
                    token_issuer=CONFIDENTIAL_SPACE_ISSUER, nonce=f"{n:064x}"))
        s.commit()
        bench_id, wdbc_id = bench.id, wdbc.id
        site_ids = {site.name: site.id for site in sites}
    db.dispose()
    app = create_app(settings)
    mount_dashboard(app, settings)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the registry did not start"
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}", token, bench_id, len(models), exact, site_ids,
                     wdbc_id)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run 'apt-get install -y chromium' as root")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _open(browser: Browser, served: Served, width: int, problems: list[str],
          benchmark_id: int | None = None) -> Page:
    context = browser.new_context(viewport={"width": width, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("request", lambda r: None if r.url.startswith(served.url)
            else problems.append(f"request to {r.url}"))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    target = f"/ui/benchmarks/{benchmark_id or served.benchmark_id}/pooled"
    page.goto(served.url + target)
    page.fill("#token", served.token)
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert page.url == served.url + target, page.locator("main").inner_text()
    return page


def test_forest_plots_and_table_equal_the_api(browser: Browser, served: Served) -> None:
    problems: list[str] = []
    page = _open(browser, served, 1280, problems)
    api = served.api(f"/benchmarks/{served.benchmark_id}/leaderboard/pooled")
    rows = page.locator("table#pooled tbody tr")
    assert rows.count() == served.models
    for i, standing in enumerate(api["standings"]):
        row = rows.nth(i)
        value = standing["values"][0]
        assert int(row.get_attribute("data-model-id") or 0) == standing["model_id"]
        assert float(row.get_attribute("data-pooled") or "nan") == value["pooled"]
        assert float(row.get_attribute("data-ci-low") or "nan") == value["ci95_low"]
        assert row.locator("td.score").inner_text().strip() == f"{value['pooled']:.4f}"
    forests = page.locator("figure.forest")
    assert forests.count() == served.models
    # the axis covers every drawn estimate and interval (hospital-c's is not drawn) and the
    # pooled intervals, is labelled, and says where it starts when that is not 0
    drawn = [x for st in api["standings"] for v in st["values"][:1]
             for x in (v["pooled"], v["ci95_low"], v["ci95_high"],
                       *(y for site in v["sites"] if site["value"] is not None
                         for y in (site["value"], site["ci95_low"], site["ci95_high"])))]
    for i in range(forests.count()):
        forest = forests.nth(i)
        diamond = forest.locator("polygon.diamond").bounding_box()
        interval = forest.locator("line.ci").first.bounding_box()
        assert diamond is not None and diamond["width"] > 1 and diamond["height"] > 1
        assert interval is not None and interval["width"] > 1
        ticks = [float(t) for t in forest.locator("text.tick").all_text_contents()]
        assert len(ticks) >= 3 and ticks == sorted(ticks) and ticks[0] >= 0.0
        assert ticks[-1] <= 1.0 and ticks[0] <= min(drawn) and max(drawn) <= ticks[-1]
        assert forest.locator("polygon.ci-arrow").count() == 0  # nothing runs off the axis
        note = forest.locator("text.axisnote")
        if ticks[0] > 0:
            assert note.text_content() == f"axis from {ticks[0]:g}, not 0: zoomed on the intervals"
        else:
            assert note.count() == 0
    weak = page.locator("table#pooled tbody tr", has_text="unet-weak")
    assert weak.locator(".badge-mock").first.is_visible()
    assert "mock TEE, not a confidential run" in weak.inner_text()
    assert page.locator("table#pooled tbody tr", has_text="unet-ref").locator(
        ".badge-mock").count() == 0
    assert problems == []


def test_breakdown_is_dice_per_region_pooled_from_the_releases(browser: Browser,
                                                                served: Served) -> None:
    """The headline is Dice averaged over the regions and the breakdown Dice per region, each
    the sites' released sums over their cases (zero noise offsets: the exact mean of every case),
    with a 95% interval at least as wide as the releases' own noise."""
    problems: list[str] = []
    page = _open(browser, served, 1280, problems)
    regions = [f"dice:{r}" for r in SPEC.regions]
    assert page.locator("select[name=metric] option").evaluate_all(
        "os => os.map(o => o.value)") == ["dice", *regions]
    header = page.locator("#breakdown thead th").all_text_contents()
    assert header == ["Model", *(f"Dice {r}" for r in SPEC.regions)]
    api = served.api(f"/benchmarks/{served.benchmark_id}/leaderboard/pooled", all_metrics="true")
    n = sum(SITES.values())
    # a region's pooled noise sd: every site's release adds sigma (the pin's) to its sum
    noise_se = PLUGIN.release_spec.sigma * len(SITES) ** 0.5 / n
    for standing in api["standings"]:
        name = standing["model_name"]
        exact = served.exact[name]
        values = {v["metric"]: v for v in standing["values"]}
        row = page.locator(f"table#pooled tbody tr[data-model-id='{standing['model_id']}']")
        headline = float(row.get_attribute("data-pooled") or "nan")
        assert headline == pytest.approx(sum(exact.values()) / len(exact), abs=1e-12)
        assert int(row.get_attribute("data-n-cases") or 0) == n
        cells = page.locator(f"#breakdown tbody tr[data-model-id='{standing['model_id']}'] td")
        assert cells.evaluate_all("ts => ts.map(t => t.dataset.metric)") == regions
        for i, (key, region) in enumerate(zip(regions, SPEC.regions, strict=True)):
            cell, value = cells.nth(i), values[key]
            shown = float(cell.get_attribute("data-value") or "nan")
            assert shown == value["pooled"] == pytest.approx(exact[region], abs=1e-12), name
            assert value["ci95_low"] < exact[region] < value["ci95_high"]
            assert value["ci95_high"] - value["ci95_low"] >= 2 * Z95 * noise_se
            assert cell.inner_text().split() == [
                f"{shown:.4f}", f"{value['ci95_low']:.4f}\N{EN DASH}{value['ci95_high']:.4f}"]
    assert problems == []


def test_a_site_too_noisy_to_read_shows_no_number(browser: Browser, served: Served) -> None:
    """hospital-c published 5 cases: its release's noise alone spans more than half of [0, 1],
    so its value is not informative. The page shows no number for it (a dash in the table, no
    estimate or interval drawn in the forest plot), never a misleading figure; the other sites
    show theirs, and its release still counts, noise and all, in the pooled figure."""
    problems: list[str] = []
    page = _open(browser, served, 1280, problems)
    api = served.api(f"/benchmarks/{served.benchmark_id}/leaderboard/pooled")
    noisy = served.sites[NOISY_SITE]
    for standing in api["standings"]:
        value = standing["values"][0]
        by_site = {x["dataset_id"]: x for x in value["sites"]}
        gone = by_site[noisy]
        assert gone["value"] is None and gone["n_cases"] == SITES[NOISY_SITE]
        assert gone["ci95_low"] is not None and gone["ci95_high"] is not None
        assert gone["ci95_high"] - gone["ci95_low"] > 0.5  # why it is not informative
        assert value["pooled"] is not None and value["n_sites"] == len(SITES)
        row = page.locator(f"table#pooled tbody tr[data-model-id='{standing['model_id']}']")
        cell = row.locator(f"td.cell[data-dataset-id='{noisy}']")
        assert cell.get_attribute("data-value") == ""
        text = cell.inner_text()
        # why, in words computed from the release (issue 41), and beside it no number
        why = cell.locator(".why").inner_text()
        assert why == gone["withheld_reason"] and why.startswith("privacy noise at ε")
        shown = text.replace(why, "")
        assert "—" in shown and not any(ch.isdigit() for ch in shown), text
        assert "not informative" in text
        # the reason is one hover away: the interval the release allows
        assert cell.locator(".uninformative").get_attribute("title") == (
            f"95% interval {gone['ci95_low']:.4f} to {gone['ci95_high']:.4f} "
            "(release noise dominates)")
        for name in set(SITES) - {NOISY_SITE}:
            site = served.sites[name]
            readable = row.locator(f"td.cell[data-dataset-id='{site}']")
            assert float(readable.get_attribute("data-value") or "nan") == by_site[site]["value"]
            assert f"{by_site[site]['value']:.4f}" in readable.inner_text()
        # the site range is the readable sites' values only
        readable_values = [x["value"] for x in value["sites"] if x["value"] is not None]
        assert (value["site_min"], value["site_max"]) == (min(readable_values),
                                                          max(readable_values))
        forest = page.locator(f"figure.forest[data-model-id='{standing['model_id']}']")
        drawn = forest.locator("g.site-row", has_text=NOISY_SITE)
        assert drawn.count() == 1
        assert drawn.locator("rect.estimate").count() == 0
        # its interval is drawn, dashed, with no estimate on it (issue 41)
        assert drawn.locator("line.ci").count() == 1
        assert drawn.locator("line.ci.withheld").count() == 1
        assert drawn.locator("title").text_content() == (
            f"{NOISY_SITE}: - not informative (95% CI {gone['ci95_low']:.4f} to "
            f"{gone['ci95_high']:.4f})")
        for name in set(SITES) - {NOISY_SITE}:
            shown = forest.locator("g.site-row", has_text=name)
            assert shown.locator("rect.estimate").count() == 1
            assert shown.locator("line.ci").count() == 1
    assert problems == []


def _plot_x(forest: Any, selector: str) -> list[float]:
    """Centres (page x) of the marks ``selector`` in one forest plot."""
    boxes = [m.bounding_box() for m in forest.locator(selector).all()]
    return [b["x"] + b["width"] / 2 for b in boxes if b is not None]


def test_wdbc_forest_plot_spreads_the_models_over_the_axis(browser: Browser,
                                                           served: Served) -> None:
    """AUROCs of 0.93 to 0.99 with intervals about +-0.01: on a fixed 0-1 axis they were one
    clump at the right edge. The axis is chosen from the data: the extreme estimates lie more
    than 40% of the plot's width apart, every drawn interval fits, and the axis says it does not
    start at 0."""
    problems: list[str] = []
    page = _open(browser, served, 1280, problems, served.wdbc_benchmark_id)
    api = served.api(f"/benchmarks/{served.wdbc_benchmark_id}/leaderboard/pooled")
    assert api["metric"] == "auroc"
    values = [site["value"] for st in api["standings"] for site in st["values"][0]["sites"]]
    assert len(values) == 6 and all(v is not None for v in values)
    assert 0.9 < min(values) < 0.95 and 0.97 < max(values) < 1.0, values
    forests = page.locator("figure.forest")
    assert forests.count() == len(WDBC_MODELS)
    axis = forests.first.locator("line.axis").bounding_box()
    assert axis is not None and axis["width"] > 100
    estimates = [x for i in range(forests.count())
                 for x in _plot_x(forests.nth(i), "rect.estimate")]
    assert len(estimates) == 6
    assert max(estimates) - min(estimates) > 0.4 * axis["width"], (estimates, axis)
    ticks = [float(t) for t in forests.first.locator("text.tick").all_text_contents()]
    assert 0.5 < ticks[0] < min(values) and max(values) <= ticks[-1] <= 1.0
    assert forests.first.locator("text.axisnote").text_content() == (
        f"axis from {ticks[0]:g}, not 0: zoomed on the intervals")
    assert page.locator("figure.forest polygon.ci-arrow").count() == 0
    assert problems == []


#: Elements reaching past the screen's right edge, outside any horizontal scroll container.
_WIDER_THAN_SCREEN = """() => {
  const out = [];
  for (const e of document.querySelectorAll('body *')) {
    if (e.closest('.scroll, .chartcard')) continue;
    const r = e.getBoundingClientRect();
    if (r.right > window.innerWidth + 1) out.push(`${e.tagName}.${e.className} ${r.right}`);
  }
  return out.slice(0, 12);
}"""


def test_narrow_screen_keeps_the_page_inside_the_viewport(browser: Browser,
                                                          served: Served) -> None:
    problems: list[str] = []
    page = _open(browser, served, 375, problems)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    wide = page.evaluate(_WIDER_THAN_SCREEN)
    assert overflow <= 1, f"the page is {overflow}px wider than a 375px screen: {wide}"
    box = page.locator("figure.forest svg").first.bounding_box()
    assert box is not None and box["width"] <= 375
    assert problems == []


def test_csv_download_is_the_apis_csv(browser: Browser, served: Served, tmp_path: Path) -> None:
    problems: list[str] = []
    page = _open(browser, served, 1280, problems)
    with page.expect_download() as info:
        page.click("#csv-download")
    path = tmp_path / "board.csv"
    info.value.save_as(path)
    api = PooledLeaderboard.model_validate(served.api(
        f"/benchmarks/{served.benchmark_id}/leaderboard/pooled", all_metrics="true"))
    assert path.read_text() == to_csv(api)
    assert problems == []
