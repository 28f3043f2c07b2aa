"""``sealbench benchmark``: publish, approve and close benchmarks, their definitions, results,
leaderboards and progress (``benchmark score`` is in :mod:`sealbench.client.cli.score`). Each
command parses options, calls :mod:`sealbench.client.registry.api`,
:mod:`~sealbench.client.registry.governance`, :mod:`~sealbench.client.registry.definitions`
or :mod:`~sealbench.client.plugins`, and renders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, cast

import typer

from sealbench.benchmarks.interface import EXACT_SUFFIX
from sealbench.client import plugins
from sealbench.client.assets.prepare import plugin_of
from sealbench.client.cli.common import (
    JsonOpt,
    MockTeeOpt,
    ProfileOpt,
    emit_json,
    err_console,
    one_of,
    out,
    provider_label,
    session,
    table,
    user_label,
)
from sealbench.client.cli.leaderboard import benchmark_leaderboard
from sealbench.client.pin_words import pin_with_words
from sealbench.client.registry import definitions, governance
from sealbench.client.views import render
from sealbench.client.views.render import column_titles, result_cells
from sealbench.server.schemas import BenchmarkPublic, BenchmarkState
from sealbench.server.schemas.runs import ProgressCell

__all__ = ["benchmark_app"]

benchmark_app = typer.Typer(
    help="Benchmarks: publish, approve, close, read results and leaderboards."
)

_STATES: Final = ("pending", "approved", "rejected", "retired")


def benchmark_state(value: str | None) -> BenchmarkState | None:
    return cast("BenchmarkState | None", one_of(value, _STATES, "--state"))


def _benchmark_rows(rows: tuple[BenchmarkPublic, ...], me: int) -> None:
    table(
        "benchmarks",
        ("id", "name", "version", "state", "owner", "metrics", "image digest"),
        ((b.id, b.name, b.version, b.state + ("" if b.closed_at is None else ", closed"),
          user_label(b.owner_id, me), pin_with_words(b.metrics_version),
          b.image_digest[:19] + "…")
         for b in rows),
    )


@benchmark_app.command("ls")
def benchmark_ls(
    state: Annotated[
        str | None, typer.Option(help="pending, approved, rejected or retired")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List benchmarks."""
    with session(profile) as s:
        rows = s.client.list_benchmarks(benchmark_state(state))
        me = s.client.me().id
    emit_json(rows) if json_out else _benchmark_rows(rows, me)


@benchmark_app.command("show")
def benchmark_show(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one benchmark with its data contract and metrics spec."""
    with session(profile) as s:
        b = s.client.get_benchmark(benchmark_id)
    if json_out:
        emit_json(b)
        return
    console = out()
    console.print(f"benchmark {b.id}: {b.name} {b.version} [{b.state}]")
    console.print(b.description)
    console.print(f"evaluation image {b.image_reference}\n  digest {b.image_digest}")
    reference = "-" if b.reference_model_id is None else b.reference_model_id
    console.print(f"metrics {pin_with_words(b.metrics_version)}; reference model {reference}")
    if b.closed_at is not None:
        console.print(f"closed to new associations since {b.closed_at:%Y-%m-%d %H:%M} UTC "
                      f"(by user {b.closed_by_id})")
    shape = b.data_contract.get("shape")
    console.print(f"data contract: modalities {b.data_contract.get('modalities')}, grid {shape}")
    if b.aggregator_image_digest is not None:
        console.print(f"pools in the TEE: aggregator image {b.aggregator_image_digest}")
        console.print("per-site releases: " + (
            "yes, each run also publishes its site's own release (charged to its budget)"
            if b.site_releases else "none; each model's figure is its pooled release (each "
            "hospital reads its exact figures locally with 'result open')"))
    if b.accept_experimental:
        console.print("accepts EXPERIMENTAL images: runs on confidential-GPU preview images "
                      "(GPU cc_mode ON) are released keys besides STABLE ones")
    if b.metrics_version.version.removesuffix("-pool").endswith(EXACT_SUFFIX):
        console.print("publishes EXACT figures: each site's results are released without noise "
                      "and without a privacy bound; every dataset's owner consents to it "
                      "(--consent-exact-release)")


@benchmark_app.command("create")
def benchmark_create(
    definition: Annotated[
        str,
        typer.Option(help="a definition an installed plug-in ships ('sealbench benchmark "
                     "definition ls': 'brats' for BraTS 2023 on 240x240x155, 'brats-small' on "
                     "64x64x48, 'wdbc', ...) or a definition JSON file"),
    ],
    tee: Annotated[
        str,
        typer.Option(help="take the image digest of this TEE backend's evaluation image"),
    ] = "mock",
    image_reference: Annotated[
        str | None, typer.Option(help="evaluation image reference (overrides --tee)")
    ] = None,
    image_digest: Annotated[
        str | None, typer.Option(help="evaluation image digest sha256:… (overrides --tee)")
    ] = None,
    reference_model: Annotated[
        int | None, typer.Option(help="registry id of the reference model")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="publish under this name (a variant of the definition)")
    ] = None,
    version: Annotated[
        str | None, typer.Option(help="publish as this version (a variant of the definition)")
    ] = None,
    publish_leaderboard: Annotated[
        bool, typer.Option(help="publish the leaderboard: every signed-in user sees every "
                           "model's pooled and per-site values (default: a model owner sees "
                           "only its own model's; 'benchmark publish-leaderboard' changes it)")
    ] = False,
    accept_experimental: Annotated[
        bool, typer.Option(help="also accept confidential-GPU preview images (EXPERIMENTAL, "
                           "GPU cc_mode ON) for the benchmark's image; owners see it before "
                           "approving")
    ] = False,
    aggregator_digest: Annotated[
        str | None,
        typer.Option(help="pool in the TEE: the digest sha256:… of the benchmark's "
                     "aggregator image, a second approved workload that pools the sites' exact "
                     "per-case results and publishes one differentially private figure per "
                     "model; each dataset's owner grants its key to it when it associates. "
                     "Fixed at creation, like the evaluation image; without it the benchmark "
                     "pools outside the TEE")
    ] = None,
    pool_in_tee: Annotated[
        bool, typer.Option("--pool-in-tee", help="pool in the TEE with the --tee backend's "
                           "aggregator image (mock: derived from the enclave code; docker: "
                           "sealbench-aggregate:latest, built by 'sealbench image build'); a "
                           "pushed image is named with --aggregator-digest")
    ] = False,
    witness: Annotated[
        list[str] | None,
        typer.Option(help="a witness (its cosigner verifier key, as 'sealbench audit witness' "
                     "prints it) whose cosignature a checkpoint needs before the aggregator "
                     "accepts a pool authorization logged in it; repeat for several. Fixed at "
                     "creation, part of the aggregator's identity")
    ] = None,
    witness_quorum: Annotated[
        int | None,
        typer.Option(min=1, max=16, help="how many of the --witness keys must cosign "
                     "(default: all of them)")
    ] = None,
    site_releases: Annotated[
        bool | None,
        typer.Option("--site-releases/--no-site-releases",
                     help="whether each site also publishes its own release of every run. "
                     "Default for a benchmark that pools in the TEE: no, the pooled release is "
                     "the one public figure per model and pooling round, and each run spends a "
                     "site's budget only on it (each hospital still reads its exact figures "
                     "with 'result open'); the pin gets '-pool', so the owners' key-release "
                     "conditions bind the choice. --site-releases publishes per-site releases "
                     "too (each charged to its site's budget); exact benchmarks keep them. "
                     "Shown in 'benchmark show' and to hospitals before they consent",
                     show_default=False)
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> BenchmarkPublic:
    """Publish a benchmark (an admin must approve it before anyone can join). A variant needs no
    Python: 'sealbench benchmark definition export brats > my.json', edit it, then
    'benchmark create --definition my.json', or rename the shipped one with --name/--version."""
    with session(profile) as s:
        created = governance.create_benchmark(
            s.client, definition, tee=tee, image_reference=image_reference,
            image_digest=image_digest, reference_model=reference_model, name=name,
            version=version, publish_leaderboard=publish_leaderboard,
            accept_experimental=accept_experimental, aggregator_digest=aggregator_digest,
            pool_in_tee=pool_in_tee, witnesses=tuple(witness or ()),
            witness_quorum=witness_quorum, site_releases=site_releases)
    if json_out:
        emit_json(created)
        return created
    render.benchmark_created(out(), created)
    render.board_plan(out(), plugin_of(created), in_tee=created.aggregator_image_digest
                      is not None)
    return created


definition_app = typer.Typer(help="Benchmark definitions: export one to start a variant.")
benchmark_app.add_typer(definition_app, name="definition")


@definition_app.command("ls")
def definition_ls(json_out: JsonOpt = False) -> list[dict[str, str]]:
    """List the definitions the installed plug-ins ship: what 'benchmark create --definition'
    and 'benchmark definition export' take by name."""
    rows = [{"definition": name, "plugin": str(doc.get("plugin", "")),
             "name": str(doc.get("name", "")), "version": str(doc.get("version", ""))}
            for name, doc in sorted(plugins.shipped_definitions().items())]
    if json_out:
        emit_json(rows)
    else:
        table("Shipped benchmark definitions", ("definition", "pin", "name", "version"),
              ([r["definition"], r["plugin"], r["name"], r["version"]] for r in rows))
    return rows


@definition_app.command("export")
def definition_export(
    definition: Annotated[
        str, typer.Argument(help="a definition an installed plug-in ships ('brats', "
                            "'brats-small', ...) or a definition JSON file")
    ],
) -> None:
    """Print a benchmark definition as JSON (redirect it to a file, edit it, and publish it
    with 'sealbench benchmark create --definition FILE')."""
    loaded = definitions.load_benchmark_definition(definition)
    typer.echo(loaded.model_dump_json(indent=2))


@benchmark_app.command("plan")
def benchmark_plan(
    benchmark_id: Annotated[
        int | None, typer.Argument(help="a registered benchmark's id (or --definition)")
    ] = None,
    definition: Annotated[
        str | None, typer.Option(help="plan a definition instead: one an installed plug-in "
                                 "ships ('wdbc', 'brats-small', ...) or a definition JSON file")
    ] = None,
    sites: Annotated[int, typer.Option(min=1, help="hospitals (datasets) joining")] = 3,
    cases: Annotated[int, typer.Option(min=1, help="cases per hospital")] = 50,
    epsilon: Annotated[
        float | None, typer.Option(min=0.0, help="privacy loss per release (default: the "
                                   "plug-in's declared epsilon)")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What the board will be able to read before anyone runs: the expected 95% half-width of
    the headline pooled over SITES x CASES (and of each site's own release), the pooled case
    count from which it shows at all, and the smallest difference between two models it ranks
    apart at 80% power, from the plug-in's release spec (its noise at EPSILON) and the
    headline's typical per-case spread (the plug-in's, or the widest possible)."""
    from sealbench.benchmarks.planning import plan

    if epsilon is not None and epsilon <= 0:
        raise typer.BadParameter("--epsilon must be above 0 (an exact release has no plan "
                                 "to make: it adds no noise)")
    in_tee: bool | None = None
    if benchmark_id is not None:
        with session(profile) as s:
            bench = s.client.get_benchmark(benchmark_id)
        plugin = plugin_of(bench, definition)
        in_tee = bench.aggregator_image_digest is not None
    else:
        plugin = plugin_of(None, definition)
    planned = plan(plugin, sites=sites, cases=cases, epsilon=epsilon, in_tee=in_tee)
    if json_out:
        emit_json(planned.to_json())
        return
    for line in planned.lines():
        out().print(line, markup=False)


@benchmark_app.command("init")
def benchmark_init(
    name: Annotated[str, typer.Argument(help="the plug-in's name (lower case, e.g. my-task)")],
    dest: Annotated[
        Path, typer.Option(help="folder to create the package in (as DEST/NAME)")
    ] = Path(),
) -> Path:
    """Scaffold a benchmark plug-in package to start from: a complete, working example written
    against the public interface (docs/benchmark-authoring.md), with its entry point and a
    test. 'pip install ./NAME' makes it a benchmark sealbench finds by name."""
    from sealbench.client.scaffold import package_name, scaffold_plugin

    made = scaffold_plugin(name, dest)
    out().print(f"created {made}: edit src/{package_name(name)}/plugin.py, then "
                f"'pip install -e {made}' and 'python -m pytest {made}/tests'")
    return made


@benchmark_app.command("approve")
def benchmark_approve(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
) -> BenchmarkPublic:
    """Approve a pending benchmark (registry admins only)."""
    with session(profile) as s:
        b = governance.approve_benchmark(s.client, benchmark_id)
    out().print(f"benchmark {b.id} is {b.state}")
    return b


@benchmark_app.command("publish-leaderboard")
def benchmark_publish_leaderboard(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    withdraw: Annotated[
        bool, typer.Option("--withdraw", help="stop publishing it: a model owner sees only its "
                           "own model's values again")
    ] = False,
    profile: ProfileOpt = None,
) -> BenchmarkPublic:
    """Publish the benchmark's leaderboard (its owner or an admin): every signed-in user sees
    every model's pooled and per-site values; --withdraw stops publishing it."""
    with session(profile) as s:
        b = s.client.publish_leaderboard(benchmark_id, not withdraw)
    if b.leaderboard_published:
        out().print(f"benchmark {b.id} publishes its leaderboard: every signed-in user sees "
                    "every model's pooled and per-site values")
    else:
        out().print(f"benchmark {b.id} does not publish its leaderboard: a model owner sees "
                    "only its own model's values")
    return b


@benchmark_app.command("close")
def benchmark_close(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
) -> BenchmarkPublic:
    """Close an approved benchmark to new associations (its owner or an admin): no request,
    invitation or approval gets in any more; approved datasets and models keep running."""
    with session(profile) as s:
        b = s.client.close_benchmark(benchmark_id)
    out().print(f"benchmark {b.id} is closed to new associations; its "
                "approved datasets and models keep running and submitting results")
    return b


@benchmark_app.command("results")
def benchmark_results(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Verified results of a benchmark (aggregates only; per-case values stay with hospitals)."""
    with session(profile) as s:
        rows = s.client.list_results(benchmark_id)
        plugin = None if json_out else plugins.plugin_for(s.client.get_benchmark(benchmark_id))
    if plugin is None:
        emit_json(rows)
        return
    table(
        f"verified results of benchmark {benchmark_id}",
        ("id", "dataset", "model", "cases", *column_titles(plugin), "issuer", "at",
         "withdrawn"),
        ((r.id, r.dataset_id, r.model_id, plugins.summary_cases(plugin, r.summary),
          *result_cells(plugin, r.summary), r.token_issuer,
          r.created_at.strftime("%Y-%m-%d %H:%M"), ", ".join(r.withdrawn) or "-")
         for r in rows),
    )


benchmark_app.command("leaderboard")(benchmark_leaderboard)


@benchmark_app.command("pool")
def benchmark_pool(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    tee: Annotated[str, typer.Option(
        "--tee", help="TEE backend that runs the aggregator image: mock, docker (the local "
        "aggregator image, attested by the mock TEE) or confidential-space")] = "mock",
    model: Annotated[list[int] | None, typer.Option(
        "--model", help="pool only this model (repeatable; default: every approved model)")] = None,
    pool_uri: Annotated[str | None, typer.Option(
        help="where each pool's inputs and release go, one folder per pool: a local folder "
        "(file://…) or, for Confidential Space outside the mock, gs://bucket/prefix "
        "(default: <data dir>/pools)")] = None,
    pool_provider: Annotated[str | None, typer.Option(
        help="gs:// pool folders: your workload identity pool provider, through which the "
        "aggregator reads its inputs and writes its release")] = None,
    image: Annotated[str | None, typer.Option(
        help="docker: the aggregator image to run (default: the benchmark's aggregator "
        "digest)")] = None,
    project: Annotated[str | None, typer.Option(help="confidential-space: GCP project")] = None,
    zone: Annotated[str | None, typer.Option(help="confidential-space: zone")] = None,
    service_account: Annotated[str | None, typer.Option(
        help="confidential-space: the VM's service account")] = None,
    image_reference: Annotated[str | None, typer.Option(
        help="confidential-space: REPO@sha256:… of the aggregator image (default: the "
        "benchmark's aggregator digest in its evaluation image's repository)")] = None,
    tdx: Annotated[bool, typer.Option(
        "--tdx", help="confidential-space: Intel TDX (default AMD SEV)")] = False,
    compute_endpoint: Annotated[str | None, typer.Option(
        help="confidential-space: Compute API endpoint")] = None,
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Pool each model's accepted results inside the TEE (benchmark authority): the registry
    authorizes each pool (it picks every current approved site's latest result and debits each
    site's privacy budget on its log first), then the benchmark's aggregator image checks that
    authorization, is released each site's sealed exact statistics by the site's own key, pools
    them and draws the release noise once; the registry verifies the attested release and
    publishes it. Nobody, the authority included, sees a site's exact figure. A pool whose
    aggregator failed is run again at no further cost (same release); models with nothing new
    since their last release, or fewer than two sites, are skipped with the reason."""
    from sealbench.client.runs.launchers.for_profile import CsOptions
    from sealbench.client.runs.pool import pool_on_tee

    console = out()
    progress = err_console()  # stdout stays the JSON document under --json

    def started(model_id: int, index: int, total: int) -> None:
        progress.print(f"[{index + 1}/{total}] model {model_id}: pooling in the TEE")

    cs = CsOptions(project=project, zone=zone, service_account=service_account,
                   image_reference=image_reference, tdx=tdx, compute_endpoint=compute_endpoint)
    with session(profile) as s:
        outcomes = pool_on_tee(
            s.profile, s.client, benchmark_id, tee=tee, model_ids=model, pool_uri=pool_uri,
            pool_provider=pool_provider, mock_tee=mock_tee, image=image, cs=cs,
            on_output=None if json_out else _aggregator_line, on_model=started)
    if json_out:
        emit_json([vars(o) for o in outcomes])
        return
    render.pool_outcomes(console, outcomes)


def _aggregator_line(line: str) -> None:
    """The aggregator's prose lines, for people (its typed events are not shown twice)."""
    if not line.startswith("{"):
        err_console().print(f"  {line}")


@benchmark_app.command("progress")
def benchmark_progress(
    benchmark_id: Annotated[int, typer.Argument(help="benchmark id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per approved (model, dataset): pending, planned, running, failed (with its failure
    class), interrupted or done with the benchmark's current image, and the ONNX Runtime
    execution provider its latest run said it ran on. Done is attested (a verified result), and
    so is a failure the enclave signed (its failure record, verified by the registry: "attested
    failure"); every other status and reason is as the hospital's client reported it, a claim
    the registry cannot check. The authority sees every pair, a data or model owner the pairs
    of its assets."""
    with session(profile) as s:
        board = s.client.benchmark_progress(benchmark_id)
    if json_out:
        emit_json(board)
        return
    counts = ", ".join(f"{n} {status}" for status, n in sorted(board.counts.items()))
    table(
        f"progress of benchmark {benchmark_id} (image {board.image_digest[:19]}…): "
        f"{counts or 'no approved pair'}",
        ("model", "dataset", "status", "reason", "source", "provider", "run", "result",
         "updated"),
        ((f"{c.model_id} {c.model_name}", f"{c.dataset_id} {c.dataset_name}", c.status,
          c.reason or "", _source(c), provider_label(c.execution_provider), c.run_id or "",
          "" if c.result_id is None else c.result_id,
          "" if c.updated_at is None else c.updated_at.strftime("%Y-%m-%d"))
         for c in board.cells),
    )
    if any(c.reported_by_id is not None and not c.attested for c in board.cells):
        out().print("statuses and reasons marked 'reported by hospital' are the hospital's "
                    "client's claims: the registry cannot check them (only a verified result "
                    "or an attested failure is the enclave's own account)")


def _source(cell: ProgressCell) -> str:
    """Who vouches for a progress cell: the registry's verified result, the enclave's attested
    failure record, or the hospital."""
    if cell.attested:
        return "attested failure" if cell.status == "failed" else "attested result"
    if cell.reported_by_id is not None:
        return f"reported by hospital (user {cell.reported_by_id})"
    return ""
