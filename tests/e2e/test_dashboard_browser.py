"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright over
CDP; Playwright's own browser download is never used) against a real registry process on a
free loopback port.

The registry is filled the way a demo-sized evaluation fills it, through its public API: an
authority publishes BraTS (the shipped data contract and metrics spec), an admin approves it,
three hospitals and three model owners register, associate and are approved, and the hospitals
submit eight results whose attestation tokens are signed by a test issuer that the registry is
configured to trust (its JWKS served on loopback). The registry verifies every token, exactly
as for the mock TEE's tokens, and charges each release to the dataset's privacy budget.

Each summary is a BraTS version 2 summary: a differentially private release of Dice per region,
made by the release mechanism with the insecure fixed noise source (zero noise offsets, so the
figures are the chosen means; the noise scale the pin declares, so intervals and "not
informative" are what a real release of that many cases gives). hospital-a and hospital-b hold
hundreds of cases, enough for each release to be read; hospital-c holds 5 (the small-cell
minimum), whose release noise alone spans more than half of [0, 1]: its figures are not
informative and the dashboard must show no number for them.

Layout and legibility (issue 31 item 7): at 1280, 800 and 375 px no card is wider than its
column and nothing sticks out of one; every link and button reaches WCAG's 4.5:1 contrast
against its composited background; chart dots sit on their capped intervals; a done pair's
progress cell names the run of its result, not a refused run reported after it.

Screenshots go to the test's output directory; with ``SEALBENCH_UPDATE_SCREENSHOTS=1`` they are
also copied to ``docs/img/dashboard-*.png``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from playwright.sync_api import Browser, Page, sync_playwright

from sealbench.benchmarks.brats import BRATS_2023_GLI
from sealbench.benchmarks.brats.metrics import MetricsSpec
from sealbench.benchmarks.brats.plugin import PLUGIN
from sealbench.benchmarks.brats.published import PublishedSummary
from sealbench.benchmarks.release import Z95, InsecureFixedNoise, release
from sealbench.client.registry.local import free_port
from sealbench.contract.workload import ENV_DATA_DIGEST, ENV_MODEL_DIGEST, ENV_RECIPIENT_DIGEST
from sealbench.crypto.attestation import RESULT_AUDIENCE, Jwks, result_nonce
from sealbench.crypto.digest import Sha256Digest, sha256_digest
from sealbench.server.db import open_database
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.services.users import create_user

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
IMAGE_DIGEST = sha256_digest(b"sealbench evaluation image (test)")
PIN = "brats-2023-gli/1"  # the BraTS plug-in the benchmark pins (name/version)
KID = "dashboard-test-1"
_TIMEOUT_S = 10.0
_SERVE = """
import sys, uvicorn
from sealbench.server.app import create_app
from sealbench.server.settings import ServerSettings
from sealbench.server.web import mount_dashboard
settings = ServerSettings()
app = create_app(settings)
mount_dashboard(app, settings)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
USERS = {
    "admin": ("admin@registry.demo", True),
    "authority": ("authority@brats.demo", False),
    "hospital-a": ("it@hospital-a.demo", False),
    "hospital-b": ("it@hospital-b.demo", False),
    "hospital-c": ("it@hospital-c.demo", False),
    "model-ref": ("ml@reference-lab.demo", False),
    "model-small": ("ml@small-lab.demo", False),
    "model-weak": ("ml@weaker-lab.demo", False),
    "outsider": ("curious@elsewhere.demo", False),
}
# (hospital, cases), (model owner, model name, skill); hospital-c has not run the weak model.
# hospital-c's 5 cases give releases too noisy to read at epsilon 1 (noise sd of a region's mean
# Dice 8.45/n, of the mean over regions 4.88/n): its figures are not informative.
HOSPITALS = (("hospital-a", 240), ("hospital-b", 310), ("hospital-c", 5))
NOISY = "hospital-c"
REGIONS = ("WT", "TC", "ET")
MODELS = (
    ("model-ref", "unet3d-reference", 0.0),
    ("model-small", "unet3d-small", 0.045),
    ("model-weak", "unet3d-weak", 0.16),
)


# ---------------------------------------------------------------- browser


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed as CI would if it is missing; fails loudly if it cannot."""
    if not CHROMIUM.exists():
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.fail(f"{CHROMIUM} is missing: run 'apt-get install -y chromium' as root")
        for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode != 0:
                pytest.fail(f"{' '.join(argv)} failed: {proc.stderr[-2000:]}")
    if not CHROMIUM.exists():
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} does not exist")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


# ---------------------------------------------------------------- registry


class _JwksHandler(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/jwks" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if self.path == "/jwks":
            self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        return


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _sign(key: rsa.RSAPrivateKey, claims: dict[str, Any]) -> str:
    header = {"alg": "RS256", "typ": "JWT", "kid": KID}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def _dice(skill: float, site: float) -> dict[str, float]:
    """The mean Dice per region a run of ``skill`` on a site of index offset ``site`` gets."""
    base = {"WT": 0.91, "TC": 0.85, "ET": 0.79}
    return {region: round(base[region] - skill - site * (k + 1), 4)
            for k, region in enumerate(REGIONS)}


def _summary(run: str, cases: int, dice: dict[str, float]) -> dict[str, Any]:
    """The run summary the enclave writes (``sealbench/result-summary``) around the plug-in's
    version 2 summary: the release of ``cases`` cases whose Dice per region is ``dice`` (each
    region's sum ``mean * n``), with zero noise offsets and the noise scale the pin declares."""
    spec = MetricsSpec()
    rows = np.tile([dice[r] for r in spec.regions], (cases, 1))
    made = release(rows, PLUGIN.release_spec, InsecureFixedNoise())
    aggregates = PublishedSummary(metrics_id=spec.metrics_id, metrics_version=spec.version,
                                  n_cases=cases, release=made)
    return {
        "format": "sealbench/result-summary",
        "version": 1,
        "run_id": run,
        "benchmark_id": "1",
        "metrics_version": PIN,
        "aggregates": aggregates.to_json(),
    }


@dataclass(frozen=True)
class Registry:
    url: str
    tokens: dict[str, str]
    benchmark_id: int
    result_ids: tuple[int, ...]
    database: Path

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def api(self, who: str, path: str) -> Any:
        r = httpx.get(f"{self.url}/api/v1{path}", headers=self.headers(who), timeout=_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return r.json()


def _post(url: str, path: str, token: str, body: dict[str, Any] | None = None) -> Any:
    r = httpx.post(
        f"{url}/api/v1{path}",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=_TIMEOUT_S,
    )
    assert r.status_code in (200, 201), f"{path}: {r.status_code} {r.text}"
    return r.json()


def _populate(
    url: str, tokens: dict[str, str], issuer: str, key: rsa.RSAPrivateKey, database: Path
) -> Registry:
    spec = MetricsSpec()
    bench = _post(
        url,
        "/benchmarks",
        tokens["authority"],
        {
            "name": "brats-gli",
            "version": "2023.1",
            "description": "Adult glioma segmentation (BraTS 2023 GLI): Dice of the whole "
            "tumour, tumour core and enhancing tumour, published as differentially private "
            "releases.",
            "data_contract": BRATS_2023_GLI.model_dump(mode="json"),
            "metrics_spec": spec.model_dump(mode="json"),
            "metrics_version": PIN,
            # pinned by digest, as a real benchmark publishes it: one long unbreakable line
            "image_reference": "europe-west4-docker.pkg.dev/brats-authority/evaluation/"
            f"sealbench_evaluation_image@{IMAGE_DIGEST}",
            "image_digest": IMAGE_DIGEST,
        },
    )
    b = bench["id"]
    _post(url, f"/benchmarks/{b}/approve", tokens["admin"])
    _post(  # a second benchmark, still awaiting the admin's approval
        url,
        "/benchmarks",
        tokens["authority"],
        {
            "name": "brats-men",
            "version": "2024.0",
            "description": "Meningioma segmentation (BraTS 2024 MEN), same regions and metrics.",
            "data_contract": BRATS_2023_GLI.model_dump(mode="json"),
            "metrics_spec": spec.model_dump(mode="json"),
            "metrics_version": PIN,
            "image_reference": "europe-docker.pkg.dev/brats-authority/eval/sealbench-eval",
            "image_digest": IMAGE_DIGEST,
        },
    )
    models: dict[str, tuple[int, str, float]] = {}
    for owner, name, skill in MODELS:
        digest = sha256_digest(name.encode())
        body = {"name": name, "version": "1.0", "digest": digest}
        m = _post(url, "/models", tokens[owner], body)["id"]
        _post(url, f"/benchmarks/{b}/models", tokens[owner], {"asset_id": m})
        _post(url, f"/benchmarks/{b}/models/{m}/approve", tokens["authority"])
        models[owner] = (m, digest, skill)
    results: list[int] = []
    for index, (hospital, cases) in enumerate(HOSPITALS):
        digest = sha256_digest(hospital.encode())
        body = {"name": f"{hospital}-glioma", "digest": digest, "case_count": cases,
                "statistics": {"grid": BRATS_2023_GLI.grid}}  # the benchmark's grid
        d = _post(url, "/datasets", tokens[hospital], {**body, "prepared_for_id": b})["id"]
        _post(url, f"/benchmarks/{b}/datasets", tokens[hospital], {"asset_id": d})
        _post(url, f"/benchmarks/{b}/datasets/{d}/approve", tokens["authority"])
        coordinates = {
            "kms_key_name": f"projects/{hospital}-tre/locations/europe-west4/keyRings/"
            "sealbench/cryptoKeys/dataset",
            "storage_uri": f"gs://{hospital}-sealed/brats-gli",
            "wip_provider": f"projects/200000000{index}/locations/global/"
            f"workloadIdentityPools/{hospital}-pool/providers/attestation",
        }
        r = httpx.put(
            f"{url}/api/v1/datasets/{d}/coordinates",
            json=coordinates,
            headers={"Authorization": f"Bearer {tokens[hospital]}"},
            timeout=_TIMEOUT_S,
        )
        assert r.status_code == 200, r.text
        for owner, (m, model_digest, skill) in models.items():
            if hospital == "hospital-c" and owner == "model-weak":
                continue
            run = f"run-{d}-{m}"
            summary = _summary(run, cases, _dice(skill, site=0.012 * index))
            sealed = sha256_digest(f"sealed {run}".encode())
            now = int(datetime.now(UTC).timestamp())
            claims = {
                "iss": issuer,
                "aud": RESULT_AUDIENCE,
                "sub": "https://www.googleapis.com/compute/v1/projects/h/zones/z/instances/i",
                "iat": now,
                "nbf": now,
                "exp": now + 3600,
                "eat_nonce": result_nonce(summary, Sha256Digest(sealed)),
                "secboot": True,
                "hwmodel": "GCP_AMD_SEV",
                "swname": "CONFIDENTIAL_SPACE",
                "swversion": ["250301"],
                "dbgstat": "disabled-since-boot",
                "submods": {
                    "container": {
                        "image_reference": f"europe-docker.pkg.dev/x/eval@{IMAGE_DIGEST}",
                        "image_digest": IMAGE_DIGEST,
                        "env_override": {
                            "SEALBENCH_BENCHMARK_ID": str(b),
                            "SEALBENCH_METRICS_VERSION": PIN,
                            ENV_DATA_DIGEST: digest,
                            ENV_MODEL_DIGEST: model_digest,
                            ENV_RECIPIENT_DIGEST: sha256_digest(f"{hospital} key".encode()),
                        },
                    },
                    "confidential_space": {"support_attributes": ["LATEST", "STABLE"]},
                },
            }
            body = {
                "benchmark_id": b,
                "dataset_id": d,
                "model_id": m,
                "summary": summary,
                "sealed_result_digest": sealed,
                "attestation_token": _sign(key, claims),
            }
            results.append(_post(url, "/results", tokens[hospital], body)["id"])
    return Registry(url, tokens, b, tuple(results), database)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the registry exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the registry did not start: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    root = tmp_path_factory.mktemp("dashboard-registry")
    db = open_database(f"sqlite:///{root / 'registry.sqlite3'}")
    tokens: dict[str, str] = {}
    try:
        upgrade_to_head(db.engine)
        for name, (email, admin) in USERS.items():
            with db.writer() as session:
                _, tokens[name] = create_user(
                    session, email=email, is_admin=admin, now=datetime.now(UTC)
                )
    finally:
        db.dispose()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = Jwks.from_keys({KID: key.public_key()}).to_json()
    handler = type("Handler", (_JwksHandler,), {"body": jwks})
    jwks_server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=jwks_server.serve_forever, daemon=True).start()
    issuer = f"http://127.0.0.1:{jwks_server.server_address[1]}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALBENCH_SERVER_")}
    env["SEALBENCH_SERVER_DATA_DIR"] = str(root)
    env["SEALBENCH_SERVER_TRUSTED_ISSUERS"] = json.dumps(
        [{"issuer": issuer, "jwks_url": f"{issuer}/jwks"}]
    )
    log_path = root / "server.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(port)],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log_path)
        yield _populate(url, tokens, issuer, key, root / "registry.sqlite3")
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        jwks_server.shutdown()
        jwks_server.server_close()


# ---------------------------------------------------------------- helpers


class Shots:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.update = os.environ.get("SEALBENCH_UPDATE_SCREENSHOTS") == "1"

    def take(self, page: Page, name: str, *, full_page: bool = True) -> Path:
        path = self.out / f"dashboard-{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        assert path.stat().st_size > 10_000, f"{name}: the screenshot is (nearly) empty"
        if self.update:
            DOCS_IMG.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS_IMG / path.name)
        return path


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    return Shots(tmp_path)


@dataclass
class Watched:
    page: Page
    problems: list[str]


@pytest.fixture
def page(browser: Browser, registry: Registry) -> Iterator[Watched]:
    """A fresh browser context (no cookies) that records any request leaving the registry and
    any console error (a Content-Security-Policy violation would show there)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="en-GB")
    p = context.new_page()
    problems: list[str] = []
    p.on(
        "request",
        lambda r: (
            None
            if r.url.startswith(registry.url) or r.url.startswith("data:")
            else problems.append(f"request to {r.url}")
        ),
    )
    p.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    p.set_default_timeout(_TIMEOUT_S * 1000)
    try:
        yield Watched(p, problems)
    finally:
        context.close()


def sign_in(page: Page, registry: Registry, who: str, target: str = "/ui/") -> None:
    page.goto(f"{registry.url}{target}")
    assert "/ui/sign-in" in page.url
    page.fill("#token", registry.tokens[who])
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert page.url == f"{registry.url}{target}", page.locator("main").inner_text()


def _read(columns: list[dict[str, Any]], n: int) -> float | None:
    """The mean of released columns (one region's, or the regions' average): ``sum / n``, or
    None when the release noise alone makes its 95% interval span more than half of [0, 1]
    (not informative: the page must show no number)."""
    k = len(columns)
    value = sum(c["sum"] for c in columns) / k / n
    noise_se = math.sqrt(sum(c["sd"] ** 2 for c in columns)) / k / n
    return None if 2 * Z95 * noise_se > 0.5 else min(max(value, 0.0), 1.0)


def _text(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _release(entry: dict[str, Any]) -> dict[str, Any]:
    rel: dict[str, Any] = entry["summary"]["aggregates"]["release"]
    assert [c["key"] for c in rel["columns"]] == [f"dice:{r}" for r in REGIONS]
    return rel


def headline(entry: dict[str, Any]) -> float | None:
    """A leaderboard entry's headline, the mean Dice over the regions, from its release."""
    rel = _release(entry)
    return _read(list(rel["columns"]), rel["n_cases"])


def region_dice(entry: dict[str, Any]) -> dict[str, str]:
    """Each region's Dice of a leaderboard entry as the page shows it, from its release."""
    rel = _release(entry)
    return {c["key"].split(":", 1)[1]: _text(_read([c], rel["n_cases"]))
            for c in rel["columns"]}


def api_cells(registry: Registry, who: str) -> dict[str, str]:
    """Each visible result's headline as the page shows it, from its release."""
    board = registry.api(who, f"/benchmarks/{registry.benchmark_id}/leaderboard")
    return {str(e["result_id"]): _text(headline(e)) for e in board["entries"]}


def shown_cells(page: Page) -> dict[str, str]:
    cells = page.locator("td.cell[data-result-id]")
    return {
        str(cells.nth(i).get_attribute("data-result-id")): cells.nth(i)
        .locator(".dice")
        .inner_text()
        .strip()
        for i in range(cells.count())
    }


# ---------------------------------------------------------------- tests


def test_authority_leaderboard_equals_the_api(
    page: Watched, registry: Registry, shots: Shots
) -> None:
    p = page.page
    sign_in(p, registry, "authority", f"/ui/benchmarks/{registry.benchmark_id}/leaderboard")
    shown = shown_cells(p)
    expected = api_cells(registry, "authority")
    assert len(expected) == 8 and shown == expected
    assert p.locator("table#leaderboard tbody tr").count() == 3
    ranks = p.locator("table#leaderboard tbody th[scope=row] a").all_inner_texts()
    assert ranks == ["unet3d-reference 1.0", "unet3d-small 1.0", "unet3d-weak 1.0"]
    assert p.locator("td.cell.missing").count() == 1  # hospital-c has not run the weak model
    # one chart per region, Dice only (the release's one metric), one dot per readable result
    # (hospital-c's two releases are not informative) with its 95% interval as a whisker
    entries = registry.api("authority", f"/benchmarks/{registry.benchmark_id}/leaderboard")[
        "entries"]
    readable = [e for e in entries if e["dataset_name"] != f"{NOISY}-glioma"]
    assert len(readable) == 6
    assert p.locator("figure.chart svg").count() == len(REGIONS)
    assert p.locator("figure.chart circle").count() == len(REGIONS) * len(readable)
    assert "HD95" not in p.locator("main").inner_text()
    for k, region in enumerate(REGIONS):
        dots = p.locator("figure.chart").nth(k).locator("g.dot")
        titles = dots.locator("title").all_text_contents()
        for e in readable:
            label = f"{e['model_name']} {e['model_version']} on {e['dataset_name']}: {region} "
            shown = [t for t in titles if t.startswith(label)]
            assert len(shown) == 1 and region_dice(e)[region] in shown[0], (label, titles)
        for i in range(dots.count()):
            dot = dots.nth(i)
            whisker = dot.locator("line.interval").bounding_box()
            assert whisker is not None and whisker["width"] > 1  # the release's interval
            # the dot (the mean) sits on its own interval, which ends in a cap at each end
            circle = dot.locator("circle").bounding_box()
            assert circle is not None
            centre = circle["x"] + circle["width"] / 2
            assert whisker["x"] - 0.5 <= centre <= whisker["x"] + whisker["width"] + 0.5
            caps = [c.bounding_box() for c in dot.locator("line.cap").all()]
            assert len(caps) == 2 and all(c is not None for c in caps)
            assert "outside" not in (dot.get_attribute("class") or "")
    # the legend and the caption say what the marks mean: a mean and its 95% interval
    assert p.locator("#chart-legend li.key").inner_text().strip() == (
        "mean, with its 95% interval")
    assert "not a spread of the cases" in p.locator("#chart-caption").inner_text()
    shots.take(p, "leaderboard")
    with p.expect_navigation():
        p.locator(f"td.cell[data-result-id='{registry.result_ids[0]}'] a").click()
    attestation = p.locator("#attestation").inner_text()
    result = registry.api("authority", f"/results/{registry.result_ids[0]}")
    assert result["token_issuer"] in attestation and result["image_digest"] in attestation
    assert "matches the benchmark" in attestation
    # the public summary: Dice per region as the release gives it, nothing else
    first = next(e for e in entries if e["result_id"] == registry.result_ids[0])
    table = p.locator("table.metrics")
    header = [t.lower() for t in table.locator("thead th").all_text_contents()]
    assert len(header) == 2 and header[0] == "region" and "dice" in header[1]
    assert table.locator("tbody th").all_text_contents() == list(REGIONS)
    assert table.locator("tbody td .dice").all_text_contents() == list(
        region_dice(first).values())
    for cell in table.locator("tbody td").all():  # each with the release's 95% interval
        value = float(cell.locator(".dice").inner_text())
        label, interval = cell.locator(".sub").inner_text().rsplit(" ", 1)
        low, high = (float(x) for x in interval.split("\N{EN DASH}"))
        assert label == "95% CI" and low < value < high
    release_line = p.locator("#release").inner_text()
    assert "differentially private" in release_line
    assert f"ε {PLUGIN.release_spec.epsilon}" in release_line
    shots.take(p, "result")
    assert page.problems == []


def test_a_release_too_noisy_to_read_shows_no_number(page: Watched, registry: Registry) -> None:
    """hospital-c published 5 cases: each release's noise alone spans more than half of [0, 1],
    so neither its headline nor any region's Dice is informative. The leaderboard shows a dash
    in its verified cells (not a number, not a zero), draws no dot for it, and ranks the models
    by their readable results; its result page shows no figure either."""
    p = page.page
    sign_in(p, registry, "authority", f"/ui/benchmarks/{registry.benchmark_id}/leaderboard")
    entries = registry.api("authority", f"/benchmarks/{registry.benchmark_id}/leaderboard")[
        "entries"]
    noisy = [e for e in entries if e["dataset_name"] == f"{NOISY}-glioma"]
    assert len(noisy) == 2
    for e in noisy:
        assert e["summary"]["aggregates"]["n_cases"] == 5
        assert headline(e) is None and set(region_dice(e).values()) == {"—"}
        cell = p.locator(f"td.cell[data-result-id='{e['result_id']}']")
        assert cell.locator(".dice").inner_text().strip() == "—"
        assert not any(ch.isdigit() for ch in cell.inner_text()), cell.inner_text()
        assert "verified" in cell.inner_text()  # a verified result, just not readable
        assert "not informative" in cell.inner_text()
        # its interval, one hover away: 5 cases' noise spans all of [0, 1]
        assert "95% interval 0.0000 to 1.0000" in (cell.locator("a").get_attribute("title")
                                                   or "")
        assert all(not t.startswith(f"{e['model_name']} {e['model_version']} on {NOISY}")
                   for t in p.locator("figure.chart g.dot title").all_text_contents())
    # each model's score is the mean of its readable cells only
    for row in p.locator("table#leaderboard tbody tr").all():
        model_id = int(row.get_attribute("data-model-id") or 0)
        values = [headline(e) for e in entries if e["model_id"] == model_id]
        readable = [v for v in values if v is not None]
        assert len(readable) == 2  # hospital-a and hospital-b (hospital-c's are not read)
        assert row.locator("td.score").inner_text().strip() == _text(
            sum(readable) / len(readable))
    with p.expect_navigation():
        p.locator(f"td.cell[data-result-id='{noisy[0]['result_id']}'] a").click()
    values = p.locator("table.metrics tbody td").all_inner_texts()
    assert len(values) == len(REGIONS)
    assert all(not any(ch.isdigit() for ch in v) for v in values), values
    assert all("not informative" in v for v in values), values
    assert page.problems == []


def test_hospital_sees_only_its_own_results(page: Watched, registry: Registry) -> None:
    p = page.page
    sign_in(p, registry, "hospital-b", f"/ui/benchmarks/{registry.benchmark_id}/leaderboard")
    shown = shown_cells(p)
    assert len(shown) == 3 and shown == api_cells(registry, "hospital-b")
    assert page.problems == []


def test_user_without_access_sees_no_result(
    page: Watched, registry: Registry, shots: Shots
) -> None:
    p = page.page
    sign_in(p, registry, "outsider", f"/ui/benchmarks/{registry.benchmark_id}/leaderboard")
    assert api_cells(registry, "outsider") == {}
    assert shown_cells(p) == {}
    assert p.locator("figure.chart").count() == 0
    assert "No verified result of this benchmark is visible to you" in p.content()
    shots.take(p, "no-access")
    assert page.problems == []
    response = p.goto(f"{registry.url}/ui/results/{registry.result_ids[0]}")
    assert response is not None and response.status == 403
    secret = api_cells(registry, "authority")[str(registry.result_ids[0])]
    assert secret not in p.content() and "unet3d" not in p.content()
    assert [m for m in page.problems if "403" not in m] == []


def test_pages_for_authority_owner_and_admin(
    page: Watched, registry: Registry, shots: Shots
) -> None:
    p = page.page
    p.goto(f"{registry.url}/ui/")
    shots.take(p, "sign-in")
    sign_in(p, registry, "admin", "/ui/")
    assert "brats-gli" in p.locator("table.data").inner_text()
    shots.take(p, "benchmarks")
    with p.expect_navigation():
        p.click(f"a[href='/ui/benchmarks/{registry.benchmark_id}']")
    text = p.locator("main").inner_text()
    assert IMAGE_DIGEST in text and "unet3d-small" in text and "hospital-c-glioma" in text
    shots.take(p, "benchmark")
    p.goto(f"{registry.url}/ui/audit")
    assert "Chain intact" in p.locator("#chain-status").inner_text()
    shots.take(p, "audit", full_page=False)
    with p.expect_navigation():
        p.click("button:has-text('Sign out')")
    assert "/ui/sign-in" in p.url
    sign_in(p, registry, "hospital-a", "/ui/mine")
    with p.expect_navigation():
        p.click("a:has-text('hospital-a-glioma')")
    assert p.locator("#results tbody tr").count() == 3
    shots.take(p, "dataset")
    assert page.problems == []


def test_tables_work_without_javascript(browser: Browser, registry: Registry) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        p = context.new_page()
        sign_in(p, registry, "authority", f"/ui/benchmarks/{registry.benchmark_id}/leaderboard")
        assert shown_cells(p) == api_cells(registry, "authority")
    finally:
        context.close()


def _request_to_join(registry: Registry, owner: str, name: str) -> int:
    """A new model of ``owner`` that asks to join the benchmark (pending: the authority
    decides)."""
    token = registry.tokens[owner]
    body = {"name": name, "version": "2.0", "digest": sha256_digest(name.encode())}
    model = int(_post(registry.url, "/models", token, body)["id"])
    _post(registry.url, f"/benchmarks/{registry.benchmark_id}/models", token, {"asset_id": model})
    return model


def _model_status(registry: Registry, model: int) -> str:
    rows = registry.api("outsider", f"/benchmarks/{registry.benchmark_id}/models?limit=200")
    return str(next(r["status"] for r in rows["items"] if r["asset_id"] == model))


def test_authority_approves_a_pending_association_in_the_dashboard(
    page: Watched, registry: Registry, shots: Shots
) -> None:
    """The one write the dashboard offers: signed in as the deciding party, approve from the
    inbox; the API then shows the link approved. A forged POST (same browser, same session
    cookie, no CSRF token) is refused and changes nothing."""
    approved = _request_to_join(registry, "model-small", "unet3d-candidate")
    untouched = _request_to_join(registry, "model-weak", "unet3d-other")
    p = page.page
    sign_in(p, registry, "authority", "/ui/inbox")
    row = p.locator(f"#to-decide tr[data-kind='model'][data-asset-id='{approved}']")
    assert "unet3d-candidate 2.0" in row.inner_text()
    shots.take(p, "inbox")
    with p.expect_navigation():
        row.locator("button:has-text('Approve')").click()
    assert p.url == f"{registry.url}/ui/inbox"
    assert p.locator(f"#to-decide tr[data-asset-id='{approved}']").count() == 0
    assert _model_status(registry, approved) == "approved"
    events = registry.api("admin", "/audit?limit=200")["items"]
    decided = [e for e in events if e["action"] == "association.approve"
               and e["entity_id"] == f"{registry.benchmark_id}:{approved}"]
    assert len(decided) == 1
    forged = p.request.post(
        f"{registry.url}/ui/benchmarks/{registry.benchmark_id}/models/{untouched}/approve",
        form={"next": "/ui/inbox"},
        max_redirects=0,
    )
    assert forged.status == 403 and "not sent by this site" in forged.text()
    assert _model_status(registry, untouched) == "pending"
    assert page.problems == []


# ---------------------------------------------------------------- layout and legibility (issue 31)

#: What sticks out of a card: the page's own horizontal overflow, a card reaching outside
#: ``main`` or wider than its box, and any element of a card outside it (an element inside a
#: scroll container within the card, such as a wide table's wrapper or a JSON block, scrolls
#: there by design and is left out).
_OVERFLOW = """() => {
  const out = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1)
    out.push(`the page scrolls sideways: scrollWidth ${root.scrollWidth} > ${root.clientWidth}`);
  const scrolls = (e) => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const main = document.querySelector('main').getBoundingClientRect();
  for (const card of document.querySelectorAll('main .card')) {
    const c = card.getBoundingClientRect();
    const name = (card.querySelector('h2, h3') || card).textContent.trim().slice(0, 30);
    if (c.right > main.right + 1 || c.left < main.left - 1)
      out.push(`card '${name}' [${c.left}, ${c.right}] is outside main`
               + ` [${main.left}, ${main.right}]`);
    if (!scrolls(card) && card.scrollWidth > card.clientWidth + 1)
      out.push(`card '${name}': scrollWidth ${card.scrollWidth} > clientWidth ${card.clientWidth}`);
    for (const e of card.querySelectorAll('*')) {
      let scrolled = false;
      for (let p = e.parentElement; p && p !== card.parentElement; p = p.parentElement)
        if (scrolls(p)) { scrolled = true; break; }
      if (scrolled) continue;
      const r = e.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (r.right > c.right + 1 || r.left < c.left - 1)
        out.push(`card '${name}': <${e.tagName.toLowerCase()} class="${e.getAttribute('class')}">`
                 + ` [${Math.round(r.left)}, ${Math.round(r.right)}] is outside the card`
                 + ` [${Math.round(c.left)}, ${Math.round(c.right)}]`);
    }
  }
  return out.slice(0, 20);
}"""


def test_cards_fit_their_columns_at_1280_and_800_px(page: Watched, registry: Registry) -> None:
    """At 1280 px the benchmark page's Governance card overflowed and was cut off: a long
    image reference widened the first column. No card may be wider than its column, no element
    of a card may stick out of it, and no page may scroll sideways, at 1280 and at 800 px (and
    on a 375 px phone, where wide tables scroll inside their cards)."""
    p = page.page
    b = registry.benchmark_id
    sign_in(p, registry, "authority", f"/ui/benchmarks/{b}")
    pages = [f"/ui/benchmarks/{b}", f"/ui/benchmarks/{b}/leaderboard",
             f"/ui/benchmarks/{b}/pooled", f"/ui/benchmarks/{b}/progress",
             f"/ui/results/{registry.result_ids[0]}"]
    for width in (1280, 800, 375):
        p.set_viewport_size({"width": width, "height": 900})
        for target in pages:
            p.goto(f"{registry.url}{target}")
            assert p.evaluate(_OVERFLOW) == [], f"{target} at {width} px"
        if width < 800:
            continue
        p.goto(f"{registry.url}/ui/benchmarks/{b}")
        governance = p.locator("section.card", has_text="Governance").bounding_box()
        image = p.locator("section.card", has_text="Evaluation image").bounding_box()
        main = p.locator("main").bounding_box()
        assert governance is not None and image is not None and main is not None
        assert governance["x"] + governance["width"] <= main["x"] + main["width"] + 1
        if width == 1280:  # side by side, equal halves
            assert abs(governance["width"] - image["width"]) <= 1
            assert governance["x"] > image["x"] + image["width"]
    assert page.problems == []


#: The text colour and the background layers (innermost first, up to the first opaque one) of
#: every visible link and button and of each element inside one that holds text of its own.
_COLOURS = """() => {
  const out = [];
  const rgba = (s) => {
    const m = s.match(/rgba?\\(([^)]*)\\)/);
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(parseFloat);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const layers = (e) => {
    const found = [];
    for (let n = e; n; n = n.parentElement) {
      const c = rgba(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0) { found.push(c); if (c[3] >= 1) break; }
    }
    return found;
  };
  const ownText = (e) => [...e.childNodes].some(
    (n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim() !== '');
  const seen = new Set();
  for (const control of document.querySelectorAll('a, button, .btn')) {
    for (const e of [control, ...control.querySelectorAll('*')]) {
      if (seen.has(e) || !ownText(e) || e.getClientRects().length === 0) continue;
      if (getComputedStyle(e).visibility === 'hidden') continue;
      seen.add(e);
      out.push({text: e.textContent.trim().slice(0, 40), tag: e.tagName.toLowerCase(),
                cls: e.getAttribute('class') || '', fg: rgba(getComputedStyle(e).color),
                bg: layers(e)});
    }
  }
  return out;
}"""


def _linear(channel: float) -> float:
    c = channel / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def relative_luminance(rgb: tuple[float, float, float]) -> float:
    """WCAG 2.x relative luminance of an sRGB colour (0-255 channels)."""
    r, g, b = (_linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """WCAG 2.x contrast ratio ``(L1 + 0.05) / (L2 + 0.05)``, L1 the lighter."""
    high, low = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _over(top: list[float], below: tuple[float, float, float]) -> tuple[float, float, float]:
    alpha = top[3]
    r, g, b = (alpha * t + (1 - alpha) * u for t, u in zip(top[:3], below, strict=True))
    return (r, g, b)


def _effective(layers: list[list[float]]) -> tuple[float, float, float]:
    """The colour the layers composite to over the white canvas (outermost first)."""
    colour = (255.0, 255.0, 255.0)
    for layer in reversed(layers):
        colour = _over(layer, colour)
    return colour


def test_contrast_formula_matches_wcag_examples() -> None:
    assert contrast_ratio((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert contrast_ratio((255, 255, 255), (255, 255, 255)) == pytest.approx(1.0)
    assert contrast_ratio((118, 118, 118), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)
    # the old Download CSV: the top bar's near-white quiet button on a white card
    assert contrast_ratio((0xE6, 0xED, 0xF3), (255, 255, 255)) < 1.2


def test_every_link_and_button_has_wcag_aa_contrast(page: Watched, registry: Registry) -> None:
    """"Download CSV" was near-white on white. The rendered text colour of every link and
    button (and of text inside one) against its effective background (its own or the first
    non-transparent one behind it, composited) must reach 4.5:1 on every page."""
    p = page.page
    b = registry.benchmark_id
    failures: list[str] = []
    checked = 0

    def check(target: str) -> None:
        nonlocal checked
        for item in p.evaluate(_COLOURS):
            bg = _effective(item["bg"])
            fg = _over(item["fg"], bg) if item["fg"][3] < 1 else tuple(item["fg"][:3])
            ratio = contrast_ratio(fg, bg)  # type: ignore[arg-type]
            checked += 1
            if ratio < 4.5:
                failures.append(f"{target}: <{item['tag']} class={item['cls']!r}> "
                                f"{item['text']!r} {ratio:.2f}:1 (text {fg}, background {bg})")

    p.goto(f"{registry.url}/ui/")
    check("/ui/sign-in")
    sign_in(p, registry, "authority", "/ui/")
    for target in ("/ui/", f"/ui/benchmarks/{b}", f"/ui/benchmarks/{b}/leaderboard",
                   f"/ui/benchmarks/{b}/pooled", f"/ui/benchmarks/{b}/progress", "/ui/inbox",
                   "/ui/mine", f"/ui/results/{registry.result_ids[0]}"):
        p.goto(f"{registry.url}{target}")
        check(target)
    csv = p.locator("#csv-download")
    p.goto(f"{registry.url}/ui/benchmarks/{b}/pooled")
    assert csv.is_visible() and csv.inner_text().strip() == "Download CSV"
    with p.expect_navigation():
        p.click("button:has-text('Sign out')")
    sign_in(p, registry, "admin", "/ui/audit")
    check("/ui/audit")
    assert checked > 50
    assert failures == [], "\n".join(failures)
    assert page.problems == []


def test_progress_cell_shows_the_run_of_the_accepted_result(
    page: Watched, registry: Registry
) -> None:
    """The demo's refused debug-image attack run, reported after the pair's result, was listed
    as the pair's "done" run. The cell shows the run that produced the accepted result."""
    result = registry.api("authority", f"/results/{registry.result_ids[0]}")
    pair = {"benchmark_id": registry.benchmark_id, "dataset_id": result["dataset_id"],
            "model_id": result["model_id"], "image_digest": IMAGE_DIGEST, "tee": "mock"}

    def report(run: str, **body: Any) -> None:
        r = httpx.put(f"{registry.url}/api/v1/runs/{run}", json={**pair, **body},
                      headers=registry.headers("hospital-a"), timeout=_TIMEOUT_S)
        assert r.status_code == 200, r.text

    report("run-accepted", state="succeeded", seq=1, result_id=result["id"],
           execution_provider="CPUExecutionProvider")
    report("run-debug-image", state="planned", seq=1)
    report("run-debug-image", state="failed", seq=2, reason="key_release_denied")
    p = page.page
    sign_in(p, registry, "authority", f"/ui/benchmarks/{registry.benchmark_id}/progress")
    cell = p.locator(f"td.cell[data-model-id='{result['model_id']}']"
                     f"[data-dataset-id='{result['dataset_id']}']")
    assert cell.get_attribute("data-status") == "done"
    text = cell.inner_text()
    assert "run-accepted" in text and f"result #{result['id']}" in text
    assert "run-debug-image" not in text and "key_release_denied" not in text
    assert "attested result" in text
    assert page.problems == []


def test_audit_trail_names_the_first_broken_link_after_tampering(
    page: Watched, registry: Registry, shots: Shots
) -> None:
    """Runs last: it breaks the module's registry on purpose (a result's audit record is
    edited in the database, as an insider with database access would)."""
    with sqlite3.connect(registry.database) as db:
        (seq,) = db.execute(
            "SELECT seq FROM audit_events WHERE action = 'result.submit' ORDER BY seq LIMIT 1"
        ).fetchone()
        db.execute(
            "UPDATE audit_events SET payload = replace(payload, '\"model_id\":1', "
            "'\"model_id\":2') WHERE seq = ?",
            (seq,),
        )
    assert registry.api("admin", "/audit/verify")["first_broken_seq"] == seq
    p = page.page
    sign_in(p, registry, "admin", "/ui/audit")
    status = p.locator("#chain-status").inner_text()
    assert f"Chain broken at event {seq}" in status and "does not match its hash" in status
    assert "result.submit" in status and '"model_id":2' in status  # the edited record
    with p.expect_navigation():
        p.click(f"a:has-text('Show event {seq}')")
    assert p.locator(f"tr#event-{seq}.broken").count() == 1
    p.set_viewport_size({"width": 1280, "height": 900})
    p.goto(f"{registry.url}/ui/audit")
    shots.take(p, "audit-broken", full_page=False)
    assert page.problems == []
