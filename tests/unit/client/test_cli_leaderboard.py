"""``sealbench benchmark leaderboard`` against a live registry: the pooled table, JSON and CSV
(one row per model and metric, a column per site), unknown metrics listing the valid ones, and
what each role sees through the CLI (visibility matrix)."""

from __future__ import annotations

import csv
import io
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import uvicorn
from typer.testing import CliRunner, Result

from sealbench.benchmarks.brats import BRATS_2023_GLI_METRICS, CaseScores, RegionScores
from sealbench.benchmarks.brats.plugin import PLUGIN
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.client.cli import app
from sealbench.crypto.digest import sha256_digest
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.logkeys import ensure_log_key
from sealbench.server.models import Benchmark, Dataset, Model, User
from sealbench.server.models import Result as ResultRow

SPEC = BRATS_2023_GLI_METRICS
NOW = datetime(2026, 1, 1, tzinfo=UTC)
Cli = Callable[..., Result]


def _summary(rng: np.random.Generator, n: int, dice: float) -> dict[str, Any]:
    cases = []
    for i in range(n):
        d = float(np.clip(rng.normal(dice, 0.05), 0, 1))
        row = RegionScores(dice=d, hd95=3.0, sensitivity=d, specificity=1.0, lesion_dice=d,
                           lesion_hd95=4.0, num_tp=1, num_fp=0, num_fn=0, gt_volume_mm3=1.0,
                           pred_volume_mm3=1.0)
        cases.append(CaseScores(case_id=f"c{i}", regions=dict.fromkeys(SPEC.regions, row)))
    # a release (zero noise offsets: known answers) with the noise scale the pin declares
    return PLUGIN.summarise(cases, InsecureFixedNoise()).to_json()


@pytest.fixture
def served(registry: Any) -> Iterator[str]:
    """The test registry served by uvicorn on a loopback port (the CLI speaks HTTP)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(create_app(registry.settings), host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the test registry did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def cli(cli_home: Any, registry: Any, served: str) -> Cli:
    runner = CliRunner()
    key = ensure_log_key(registry.settings, create=False).verifier().to_string()
    for name, token in registry.tokens.items():
        added = runner.invoke(app, ["profile", "add", name, "--server", served,
                                    "--token", token, "--no-use", "--log-key", key])
        assert added.exit_code == 0, added.output

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args))

    return run


@pytest.fixture
def board(registry: Any) -> dict[str, int]:
    """Benchmark (authority's), two hospital sites, a model of modelco's and one of the
    hospital's own, results inserted directly."""
    db = open_database(registry.settings.effective_database_url)
    rng = np.random.default_rng(1)
    try:
        with db.writer() as s:
            users = {u.email.split("@")[0]: u.id for u in s.query(User).all()}
            bench = Benchmark(owner_id=users["authority"], name="pooled", version="1",
                              description="d", data_contract={}, metrics_spec={},
                              metrics_version="brats-2023-gli/1", image_reference="r",
                              image_digest="sha256:" + "1" * 64, state="approved",
                              created_at=NOW, updated_at=NOW)
            s.add(bench)
            s.flush()
            sites = [Dataset(owner_id=users["hospital"], name=f"site-{k}",
                             digest=sha256_digest(f"d{k}".encode()), case_count=1,
                             statistics={}, state="registered", created_at=NOW)
                     for k in ("a", "b")]
            models = [Model(owner_id=users[owner], name=name, version="1",
                            digest=sha256_digest(name.encode()), format="onnx", io_contract={},
                            state="registered", created_at=NOW)
                      for name, owner in (("vendor-net", "modelco"), ("house-net", "hospital"))]
            s.add_all([*sites, *models])
            s.flush()
            n = 0
            for model, base in zip(models, (0.8, 0.4), strict=True):
                # enough cases that each site's own release is informative at epsilon 1
                for site, size in zip(sites, (400, 4000), strict=True):
                    n += 1
                    s.add(ResultRow(
                        benchmark_id=bench.id, dataset_id=site.id, model_id=model.id,
                        submitted_by_id=users["hospital"], summary=_summary(rng, size, base),
                        sealed_result_digest=sha256_digest(f"s{n}".encode()),
                        attestation_token="tok", token_issuer="https://mock.invalid",
                        image_digest="sha256:" + "1" * 64, nonce=f"{n:064x}", created_at=NOW))
            s.commit()
            return {"benchmark": bench.id, "vendor": models[0].id, "house": models[1].id,
                    "a": sites[0].id, "b": sites[1].id}
    finally:
        db.dispose()


def test_table_ranks_with_intervals_and_marks_the_mock_tee(cli: Cli, board: dict[str, int]
                                                           ) -> None:
    shown = cli("benchmark", "leaderboard", str(board["benchmark"]), "--profile", "authority")
    assert shown.exit_code == 0, shown.output
    assert "95% CI" in shown.output and "mock TEE, not a confidential run" in shown.output
    assert shown.output.index("vendor-net") < shown.output.index("house-net")
    assert "overlap" in shown.output


def test_csv_has_a_row_per_model_and_metric_and_a_column_per_site(
        cli: Cli, board: dict[str, int]) -> None:
    shown = cli("benchmark", "leaderboard", str(board["benchmark"]), "--format", "csv",
                "--profile", "authority")
    assert shown.exit_code == 0, shown.output
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    header = next(csv.reader(io.StringIO(shown.stdout)))
    assert header[:7] == ["model", "model_id", "metric", "rank", "tied", "n_sites", "n_cases"]
    assert {"pooled", "ci95_low", "ci95_high", f"site-a (#{board['a']})",
            f"site-b (#{board['b']})"} <= set(header)
    metrics = {r["metric"] for r in rows}
    assert metrics == {"dice", "dice:WT", "dice:TC", "dice:ET"}
    assert len(rows) == 2 * len(metrics)
    dice = next(r for r in rows if r["metric"] == "dice" and r["model"] == "vendor-net 1")
    a, b = float(dice[f"site-a (#{board['a']})"]), float(dice[f"site-b (#{board['b']})"])
    assert float(dice["pooled"]) == pytest.approx((400 * a + 4000 * b) / 4400, abs=1e-12)
    assert dice["n_cases"] == "4400" and float(dice["ci95_low"]) < float(dice["pooled"])
    one = cli("benchmark", "leaderboard", str(board["benchmark"]), "--format", "csv",
              "--metric", "dice:TC", "--profile", "authority")
    assert {r["metric"] for r in csv.DictReader(io.StringIO(one.stdout))} == {"dice:TC"}


def test_unknown_metric_lists_the_valid_ones(cli: Cli, board: dict[str, int]) -> None:
    shown = cli("benchmark", "leaderboard", str(board["benchmark"]), "--metric", "auroc",
                "--profile", "authority")
    assert shown.exit_code != 0
    assert "unknown metric 'auroc'" in shown.output and "dice:ET" in shown.output


def test_visibility_through_the_cli(cli: Cli, board: dict[str, int]) -> None:
    def seen(profile: str) -> dict[int, set[int]]:
        shown = cli("benchmark", "leaderboard", str(board["benchmark"]), "--format", "json",
                    "--profile", profile)
        assert shown.exit_code == 0, shown.output
        doc = json.loads(shown.stdout)
        return {s["model_id"]: {x["dataset_id"] for x in s["values"][0]["sites"]}
                for s in doc["standings"]}

    both = {board["a"], board["b"]}
    assert seen("authority") == {board["vendor"]: both, board["house"]: both}
    assert seen("hospital") == {board["vendor"]: both, board["house"]: both}  # its own sites
    assert seen("modelco") == {board["vendor"]: both}  # its own model only
    assert seen("admin") == {}  # neither authority, hospital nor model owner here


def test_visibility_of_a_published_leaderboard_through_the_cli(
    cli: Cli, board: dict[str, int]
) -> None:
    """'benchmark publish-leaderboard B' (the authority's): every signed-in user, here the
    other model's owner and an outsider, sees every model's per-site values; --withdraw ends
    it. Nobody else may change it."""
    def seen(profile: str) -> dict[int, set[int]]:
        shown = cli("benchmark", "leaderboard", str(board["benchmark"]), "--format", "json",
                    "--profile", profile)
        assert shown.exit_code == 0, shown.output
        doc = json.loads(shown.stdout)
        return {s["model_id"]: {x["dataset_id"] for x in s["values"][0]["sites"]}
                for s in doc["standings"]}

    b = str(board["benchmark"])
    both = {board["a"], board["b"]}
    refused = cli("benchmark", "publish-leaderboard", b, "--profile", "modelco")
    assert refused.exit_code != 0 and "owner or an admin" in refused.output
    published = cli("benchmark", "publish-leaderboard", b, "--profile", "authority")
    assert published.exit_code == 0 and "publishes its leaderboard" in published.output
    for profile in ("authority", "hospital", "modelco", "admin"):
        assert seen(profile) == {board["vendor"]: both, board["house"]: both}, profile
    withdrawn = cli("benchmark", "publish-leaderboard", b, "--withdraw", "--profile", "authority")
    assert withdrawn.exit_code == 0 and "does not publish" in withdrawn.output
    assert seen("modelco") == {board["vendor"]: both}
