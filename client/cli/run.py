"""``sealbench keys|policy|run|result|mock-tee``: the commands that touch keys, clouds and TEEs.
Thin: options in, library calls (:mod:`sealbench.client.assets.owner`,
:mod:`sealbench.client.runs.single`),
rendering out."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sealbench.client.assets import owner
from sealbench.client.assets.result_key import (
    init_result_key,
    load_result_key,
    load_result_private_key,
)
from sealbench.client.cli.audit import keep_receipt
from sealbench.client.cli.common import (
    JsonOpt,
    ProfileOpt,
    emit_json,
    log,
    out,
    progress_bar,
    provider_label,
    session,
    table,
)
from sealbench.client.cli.progress import JsonEvents, RunDisplay
from sealbench.client.errors import ClientError, ConfigError, LogKeyNotPinnedError
from sealbench.client.registry import workflows
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile
from sealbench.client.runs import single as runs
from sealbench.client.runs.attestation_keys import (
    KEYS_DIR,
    AttestationKeysUnavailableError,
    HttpxKeySetFetcher,
    KeyCache,
    KeySource,
    gcp_key_source,
    mock_key_source,
    token_kid,
)
from sealbench.client.runs.batch import (
    DEFAULT_IAM_WAIT_S,
    Runner,
    RunOutcome,
    RunPlan,
    StageTimeouts,
    iam_wait_window,
    owners_synced_at,
    plan_runs,
    repair_stale_runs,
    with_run_options,
)
from sealbench.server.schemas import ResultCreate, ResultPublic

if TYPE_CHECKING:
    from sealbench.client.runs.launchers import Launcher
    from sealbench.contract.spec import RunSpec

__all__ = [
    "keys_app",
    "mock_tee_app",
    "policy_app",
    "result_app",
    "run",
]

keys_app = typer.Typer(help="Your result key pair (data owners): results are sealed to it.")
policy_app = typer.Typer(help="Who may unwrap your key: sync it with the approved associations.")
result_app = typer.Typer(help="Results of your runs: list, open locally, submit to the registry.")
mock_tee_app = typer.Typer(help="The INSECURE local mock of the confidential cloud.")

MockTeeOpt = Annotated[
    Path | None,
    typer.Option(help="state directory of the mock TEE (default: the profile's)"),
]
# -- keys --------------------------------------------------------------------------------------


@keys_app.command("init")
def keys_init(
    force: Annotated[
        bool,
        typer.Option("--force", help="replace an existing key (old results stay sealed to it)"),
    ] = False,
    profile: ProfileOpt = None,
) -> str:
    """Create your HPKE result key pair (private key mode 0600, never leaves this machine)."""
    with session(profile) as s:
        key = init_result_key(s.profile.secrets_dir, force=force)
    out().print(f"result key created: {key.private_path} (0600)\nrecipient digest {key.digest}")
    return key.digest


@keys_app.command("show")
def keys_show(profile: ProfileOpt = None, json_out: JsonOpt = False) -> str:
    """Show your result public key's digest (what policies and runs bind)."""
    with session(profile) as s:
        key = load_result_key(s.profile.secrets_dir)
    if json_out:
        emit_json({"recipient_digest": key.digest, "public_key": key.public_b64,
                   "private_key_path": str(key.private_path)})
    else:
        out().print(f"recipient digest {key.digest}\nprivate key {key.private_path}")
    return key.digest


# -- policy ------------------------------------------------------------------------------------


@policy_app.command("sync")
def policy_sync(
    dataset: Annotated[int | None, typer.Option(help="your dataset id")] = None,
    model: Annotated[int | None, typer.Option(help="your model id")] = None,
    result_bucket: Annotated[
        str | None,
        typer.Option(
            help="with --dataset: your result bucket; the same workloads may create objects in "
            "it (needed for results written to gs://, e.g. from Confidential Space)"
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="keep syncing: every --interval, sync each of your sealed assets (or the one "
            "named) whose approvals changed since its grants were last synced; Ctrl-C stops",
        ),
    ] = False,
    interval: Annotated[
        float,
        typer.Option(min=0.1, help="with --watch: seconds between passes (failed passes back "
                     "off, doubling, up to 15 minutes)"),
    ] = 60.0,
    once: Annotated[
        bool,
        typer.Option("--once", help="with --watch: one pass, then exit (for a scheduled job); "
                     "exits non-zero when a sync failed"),
    ] = False,
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> owner.PolicySync | None:
    """Grant your key to exactly the workloads of approved (benchmark, dataset, model) triples,
    and revoke the rest; bindings you made by hand are kept. The registry is told which grants
    were written, so it can list "policy sync needed" when approvals move on; --watch syncs
    them as they do."""
    if once and not watch:
        raise ConfigError("--once goes with --watch")
    if not watch and (dataset is None) == (model is None):
        raise ConfigError("name exactly one of --dataset and --model (or use --watch)")
    if dataset is not None and model is not None:
        raise ConfigError("name at most one of --dataset and --model")
    if result_bucket is not None and model is not None:
        raise ConfigError("--result-bucket goes with --dataset: results belong to the data owner")
    if watch:
        _policy_watch(dataset, model, result_bucket, interval, once, mock_tee, profile)
        return None
    kind: AssetKind = "dataset" if dataset is not None else "model"
    asset_id = dataset if dataset is not None else model
    assert asset_id is not None
    with session(profile) as s:
        recipient = (
            load_result_key(s.profile.secrets_dir).digest if kind == "dataset" else None
        )
        cloud = owner.owner_cloud(s.profile, s.client, mock_tee)
        synced = owner.sync_policy(
            s.client, cloud, kind, asset_id, local_recipient=recipient, result_bucket=result_bucket
        )
    report = synced.report
    if json_out:
        emit_json({
            "workloads": [{"benchmark": g.benchmark_id, "dataset": g.dataset_id,
                           "model": g.model_id, "uid": g.identity.uid()} for g in synced.grants],
            "provider": report.provider, "pool_created": report.pool_created,
            "added": list(report.key.added), "removed": list(report.key.removed),
            "result_bucket": None if report.result_bucket is None else {
                "added": list(report.result_bucket.added),
                "removed": list(report.result_bucket.removed),
            },
            "reported": {str(k): v for k, v in synced.reported.items()},
        })
        return synced
    table(
        f"workloads allowed to use {kind} {asset_id}'s key",
        ("benchmark", "dataset", "model", "image"),
        ((g.benchmark_id, g.dataset_id, g.model_id, g.identity.image_digest[:19] + "…")
         for g in synced.grants),
    )
    out().print(f"policy synced: provider {report.provider}, key +{len(report.key.added)} "
                f"-{len(report.key.removed)} workloads"
                + ("" if report.changed else " (nothing to change)"))
    return synced


def _policy_watch(
    dataset: int | None, model: int | None, result_bucket: str | None, interval: float,
    once: bool, mock_tee: Path | None, profile: str | None,
) -> None:
    """``policy sync --watch``: :class:`~sealbench.client.assets.grants_watch.PolicyWatch` with one
    printed line per action; SIGINT and SIGTERM (a scheduler stopping the job) end it with
    exit 130."""
    from sealbench.client.assets.grants_watch import PolicyWatch

    assets: tuple[tuple[AssetKind, int], ...] | None = (
        (("dataset", dataset),) if dataset is not None
        else (("model", model),) if model is not None else None)
    with session(profile) as s:
        recipient = None
        with contextlib.suppress(ConfigError):  # no result key: a model owner's profile
            recipient = load_result_key(s.profile.secrets_dir).digest
        watcher = PolicyWatch(
            s.client, owner.owner_cloud(s.profile, s.client, mock_tee), assets=assets,
            interval_s=interval, local_recipient=recipient, result_bucket=result_bucket,
            on_line=lambda line: out().print(line, markup=False),
        )
        if once:
            result = watcher.run_once()
            if result.failures:
                raise result.failures[0][2]
            if not result.synced:
                out().print("every grant follows its approvals: nothing to sync")
            return
        if threading.current_thread() is threading.main_thread():
            def on_signal(*_: object) -> None:
                watcher.stop.set()

            previous = {sig: signal.signal(sig, on_signal)
                        for sig in (signal.SIGINT, signal.SIGTERM)}
        else:
            previous = {}
        try:
            watcher.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    out().print("stopped watching")
    raise typer.Exit(130)


# -- run ---------------------------------------------------------------------------------------


def _endpoints(profile: ResolvedProfile, mock_tee: Path | None) -> Any:
    from sealbench.mocktee import MockEndpoints

    state = mock_tee or profile.profile.mock_tee
    if state is None:
        raise ConfigError(
            f"profile {profile.name} has no mock TEE configured",
            hint="pass --mock-tee DIR (the state directory of 'sealbench mock-tee up')",
        )
    try:
        return MockEndpoints.load(Path(state))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"no running mock TEE found in {state}",
            hint="start it with 'sealbench mock-tee up --state-dir DIR'",
        ) from exc


def run(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    dataset: Annotated[
        int | None,
        typer.Option(help="your dataset id (default with --all-approved: each of yours "
                     "approved in the benchmark)"),
    ] = None,
    model: Annotated[int | None, typer.Option(help="model id to evaluate")] = None,
    all_models: Annotated[
        bool,
        typer.Option("--all-approved", "--all-models",
                     help="every approved (dataset, model) pair not yet evaluated with the "
                     "benchmark's current image"),
    ] = False,
    parallel: Annotated[
        int, typer.Option(min=1, max=64, help="runs at once (each its own process, container "
                          "or VM)")
    ] = 1,
    tee: Annotated[
        str, typer.Option(help="TEE backend: mock, docker or confidential-space")
    ] = "mock",
    force: Annotated[
        bool, typer.Option("--force", help="run again even if a run already succeeded")
    ] = False,
    start_timeout: Annotated[
        float, typer.Option(min=1, help="seconds a run may take to start (VM creation, ...)")
    ] = StageTimeouts.start_s,
    run_timeout: Annotated[
        float, typer.Option(min=1, help="seconds a started run may take to finish")
    ] = StageTimeouts.workload_s,
    insecure_debug_image: Annotated[
        bool,
        typer.Option(
            "--insecure-debug-image",
            help="launch as a debug image, to check that the key owners refuse it",
        ),
    ] = False,
    image: Annotated[
        str | None,
        typer.Option(help="docker: image to run (default: the benchmark's image digest)"),
    ] = None,
    project: Annotated[str | None, typer.Option(help="confidential-space: GCP project")] = None,
    zone: Annotated[str | None, typer.Option(help="confidential-space: zone")] = None,
    service_account: Annotated[
        str | None, typer.Option(help="confidential-space: the VM's service account")
    ] = None,
    image_reference: Annotated[
        str | None,
        typer.Option(help="confidential-space: REPO@sha256:… (default: the benchmark's)"),
    ] = None,
    tdx: Annotated[
        bool, typer.Option("--tdx", help="confidential-space: Intel TDX (default AMD SEV)")
    ] = False,
    keep_vm: Annotated[
        bool, typer.Option("--keep-vm", help="confidential-space: keep the VM after the run "
                           "(also when interrupted)")
    ] = False,
    debug: Annotated[
        bool,
        typer.Option("--debug", help="confidential-space: debug image family (keys refused)"),
    ] = False,
    compute_endpoint: Annotated[
        str | None, typer.Option(help="confidential-space: Compute API endpoint")
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option(help="confidential-space: confidential GPU, nvidia-h100-80gb (an A3 TDX "
                     "VM on the preview GPU image; keys only under a benchmark that accepts "
                     "EXPERIMENTAL images)"),
    ] = None,
    result_uri: Annotated[
        str | None,
        typer.Option(help="confidential-space: gs://bucket/prefix for results (no mock TEE)"),
    ] = None,
    allow_cpu_fallback: Annotated[
        bool,
        typer.Option("--allow-cpu-fallback",
                     help="a GPU run whose model ends on ONNX Runtime's CPU provider goes on "
                     "(default: it fails, naming the providers available)"),
    ] = False,
    iam_wait: Annotated[
        int | None,
        typer.Option(min=0, max=900,
                     help="seconds a run may wait for IAM to apply a fresh grant (a key or "
                     "bucket refusal right after an owner's policy sync) before it fails; "
                     f"default: what is left of {DEFAULT_IAM_WAIT_S} s after the owners' last "
                     "sync"),
    ] = None,
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> list[runs.RunRecord]:
    """Evaluate your dataset(s) with a model, or every approved pair (--all-approved), inside
    a TEE, --parallel N at a time. Each run is recorded locally and its status reported to the
    registry; a pair already evaluated with the benchmark's image is skipped unless --force.
    Ctrl-C stops launching, tears down what runs and records it interrupted: the same command
    again resumes with what is left. --json prints one event per line."""
    from sealbench.client.cli.tee import CsOptions, make_launcher
    from sealbench.client.runs.launchers.trust import check_owner_trust, issuers_released_to

    backend = workflows.check_tee(tee)
    if (model is None) == (not all_models):
        raise ConfigError("name --model ID or --all-approved (not both)")
    if dataset is None and not all_models:
        raise ConfigError("name --dataset ID (or --all-approved for each of your datasets)")
    cs = CsOptions(project, zone, service_account, image_reference, tdx, keep_vm, debug,
                   compute_endpoint, accelerator)
    with session(profile) as s:
        pairs = runs.approved_pairs(s.client, benchmark, dataset, model)
        recipient = load_result_key(s.profile.secrets_dir)
        mock_profile = bool(mock_tee or s.profile.profile.mock_tee)
        production = backend == "confidential-space" and not mock_profile
        gcp = s.profile.profile.gcp
        if production and not result_uri and gcp is not None:
            result_uri = f"gs://{owner.gcp_owner_cloud(gcp).bucket}/results"
        if production and not result_uri:
            raise ConfigError("a Confidential Space VM writes its result to Cloud Storage",
                              hint="pass --result-uri gs://BUCKET/PREFIX")
        endpoints = None if production else _endpoints(s.profile, mock_tee)
        launcher = make_launcher(
            backend, profile=s.profile, client=s.client, benchmark_id=benchmark,
            endpoints=endpoints, mock_tee=mock_tee, debug=insecure_debug_image,
            image=image, cs=cs,
        )
        store = runs.RunStore(s.profile.data_dir / "runs")
        metrics_version = s.client.get_benchmark(benchmark).metrics_version
        plan = plan_runs(store, benchmark_id=benchmark, pairs=pairs,
                         image_digest=launcher.image_digest, metrics_version=metrics_version,
                         force=force)
        client = s.client

        verifier = _tee_verifier(s.profile, endpoints, mock_tee)

        def make_spec(dataset_id: int, model_id: int, run_id: str) -> RunSpec:
            spec = runs.build_spec(
                client, run_id=run_id, benchmark_id=benchmark, dataset_id=dataset_id,
                model_id=model_id, recipient=recipient,
                result_dir=s.profile.data_dir / "results" / run_id,
                endpoints=endpoints or owner.spec_endpoints(s.profile),
                result_uri=f"{result_uri.rstrip('/')}/{run_id}" if result_uri else None,
            )
            window = iam_wait if iam_wait is not None else iam_wait_window(
                owners_synced_at(client, dataset_id, model_id), datetime.now(UTC))
            spec = with_run_options(spec, iam_wait_s=window,
                                    allow_cpu_fallback=allow_cpu_fallback)
            ids = {"dataset": dataset_id, "model": model_id}
            check_owner_trust(spec, verifier, trusted_issuers=lambda kind: issuers_released_to(
                _visible_results(client, benchmark), kind, ids[kind]))
            return spec

        outcome, errors = _run_plan(
            plan, launcher, store, make_spec, client=client, tee=backend, parallel=parallel,
            timeouts=StageTimeouts(start_s=start_timeout, workload_s=run_timeout),
            keep=keep_vm, json_out=json_out,
        )
    if not json_out:
        for record in outcome.records:
            if record.status == "succeeded":
                out().print(f"model {record.model_id}: run {record.run_id} succeeded in "
                            f"{record.wall_seconds or 0:.1f} s{_breakdown(record)}; open it "
                            f"with 'sealbench result open {record.run_id}'")
            elif record.status == "failed":
                out().print(f"model {record.model_id}: run {record.run_id} failed "
                            f"({record.reason}): {record.error}", markup=False)
    if outcome.interrupted:
        left = [r for r in outcome.records if r.status == "interrupted"]
        if not json_out:
            out().print(f"interrupted: {len(left)} run(s) recorded interrupted; run the same "
                        "command again to resume with what is left")
        raise typer.Exit(130)
    if errors:
        first = errors[0]
        raise first if isinstance(first, ClientError) else runs.translate_launch_error(first)
    return [*outcome.skipped, *outcome.succeeded]


def _tee_verifier(profile: ResolvedProfile, endpoints: Any, mock_tee: Path | None) -> Any:
    """The verifier this profile's runs attest to: its mock-tee's, or Google's (or the
    profile's ``attestation`` override)."""
    from sealbench.client.runs.launchers.trust import TeeVerifier

    if endpoints is not None:
        state = mock_tee or profile.profile.mock_tee
        return TeeVerifier(endpoints.issuer, f"the mock-tee of {state}, yours")
    gcp = profile.profile.gcp
    source = gcp_key_source({} if gcp is None else gcp.api_endpoints)
    google = gcp is None or "attestation" not in gcp.api_endpoints
    return TeeVerifier(source.issuer, "Google's Confidential Space verifier" if google else
                       "the attestation verifier your profile names")


def _visible_results(client: RegistryClient, benchmark: int) -> tuple[Any, ...]:
    try:
        return client.list_results(benchmark)
    except ClientError:
        return ()


def _run_plan(
    plan: RunPlan,
    launcher: Launcher,
    store: runs.RunStore,
    make_spec: Callable[[int, int, str], RunSpec],
    *,
    client: RegistryClient,
    tee: str,
    parallel: int,
    timeouts: StageTimeouts,
    keep: bool,
    json_out: bool,
) -> tuple[RunOutcome, list[Exception]]:
    """Run ``plan`` with the runner, rendering its events, with SIGINT and SIGTERM (when this
    is the main thread) turned into :meth:`Runner.interrupt`."""
    with contextlib.ExitStack() as stack:
        if json_out:
            render: Any = JsonEvents()
        else:
            bar = stack.enter_context(progress_bar())
            render = RunDisplay(bar, len(plan.todo))
        runner = Runner(
            launcher, store, make_spec, client=client, tee=tee, parallel=parallel,
            timeouts=timeouts, keep_on_interrupt=keep, on_event=render,
        )
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, lambda *_: runner.interrupt())
                        for sig in (signal.SIGINT, signal.SIGTERM)}
            stack.callback(lambda: [signal.signal(k, v) for k, v in previous.items()])
        outcome = runner.run(plan)
    # a refused key release names whose grants lag (asked while the session is open)
    return outcome, runs.explain_refusals(client, runner.errors, outcome.records)


def _breakdown(record: runs.RunRecord) -> str:
    """`` (infer 12.0 s, score 3.1 s; on CUDAExecutionProvider)``: the two or three longest
    steps of the enclave and the execution provider it said ran the model."""
    parts = []
    if record.step_seconds:
        longest = sorted(record.step_seconds.items(), key=lambda kv: -kv[1])[:3]
        parts.append(", ".join(f"{name} {seconds:.1f} s" for name, seconds in longest))
    if record.execution_provider is not None:
        parts.append(f"on {record.execution_provider}")
    return f" ({'; '.join(parts)})" if parts else ""


# -- result ------------------------------------------------------------------------------------


@result_app.command("ls")
def result_ls(profile: ProfileOpt = None, json_out: JsonOpt = False) -> list[runs.RunRecord]:
    """Runs launched from this machine with this profile, and whether they were submitted."""
    with session(profile) as s:
        store = runs.RunStore(s.profile.data_dir / "runs")
        if any(r.active for r in store.all()):  # left unfinished by a process that ended?
            repair_stale_runs(store, s.client, datetime.now(UTC))
        records = store.all()
    if json_out:
        emit_json(records)
        return records
    table(
        "runs",
        ("run", "benchmark", "dataset", "model", "status", "seconds", "provider",
         "submitted as"),
        ((r.run_id, r.benchmark_id, r.dataset_id, r.model_id, r.status,
          "" if r.wall_seconds is None else f"{r.wall_seconds:.1f}",
          provider_label(r.execution_provider),
          "" if r.result_id is None else f"result {r.result_id}") for r in records),
    )
    return records


def _key_source(profile: ResolvedProfile) -> KeySource:
    """The attestation verifier of the profile's platform: the mock's or Google's (or the
    profile's ``attestation`` endpoint override)."""
    if profile.profile.mock_tee is not None:
        return mock_key_source(_endpoints(profile, None))
    if profile.profile.gcp is not None:
        return gcp_key_source(profile.profile.gcp.api_endpoints)
    raise AttestationKeysUnavailableError(
        f"profile {profile.name} names no cloud, so no attestation verifier to check the "
        "result's signature with",
        hint="add the profile again with --cloud gcp --project P or --mock-tee DIR, or pass "
        "--unverified",
    )


def _open(
    profile: ResolvedProfile, run_id: str, *, unverified: bool = False, lenient: bool = False
) -> tuple[runs.RunRecord, Any]:
    """Open a run's result, its token's signature checked against the keys of the profile's
    attestation verifier (fetched, or cached in the profile's data directory); not checked only
    with ``unverified`` (the user's ``--unverified``) or, with ``lenient`` (submit: the
    registry checks it), when the keys cannot be had."""
    record = runs.RunStore(profile.data_dir / "runs").get(run_id)
    private_key = load_result_private_key(profile.secrets_dir)
    if unverified:
        log.warning("opening run %s without checking its signature (--unverified)", run_id)
        return record, runs.open_run_result(record, private_key, None)
    cache = KeyCache(profile.data_dir / KEYS_DIR, HttpxKeySetFetcher())
    try:
        source = _key_source(profile)
        return record, runs.open_run_result(
            record, private_key, lambda token: cache.get(source, token_kid(token))
        )
    except AttestationKeysUnavailableError as exc:
        if not lenient:
            raise
        log.warning("%s; the registry checks the signature", exc)
        return record, runs.open_run_result(record, private_key, None)


UnverifiedOpt = Annotated[
    bool,
    typer.Option("--unverified",
                 help="open the result even when the attestation verifier's keys cannot be "
                 "fetched (offline, none cached): its signature is then NOT checked, and the "
                 "output says so"),
]


@result_app.command("open")
def result_open(
    run_id: Annotated[str, typer.Argument(help="run id (see 'sealbench result ls')")],
    unverified: UnverifiedOpt = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> Any:
    """Verify and decrypt a run's result locally: per-case scores stay on this machine. The
    result token's signature is checked against the keys of the profile's attestation verifier
    (Google's, fetched and cached; the mock's), and the command refuses when they cannot be
    had, unless --unverified."""
    from sealbench.client.runs.results import UNVERIFIED

    with session(profile) as s:
        record, opened = _open(s.profile, run_id, unverified=unverified)
    attestation = (f"signature verified: signed by {opened.claims.iss}"
                   if opened.signature_verified else UNVERIFIED)
    if json_out:
        emit_json({"summary": opened.summary_json, "per_case": opened.per_case,
                   "signature_verified": opened.signature_verified,
                   "attestation": attestation})
        return opened
    if not opened.signature_verified:
        out().print(f"[bold red]{UNVERIFIED}[/]: nothing proves an enclave produced this result "
                    "(opened with --unverified)")
    agg = opened.aggregates
    out().print(f"run {run_id}: benchmark {record.benchmark_id}, dataset {record.dataset_id}, "
                f"model {record.model_id}; {agg.n_cases} cases, "
                f"{sum(c.failed for c in opened.cases)} failed")
    signed = (f"signed by {opened.claims.iss}, " if opened.signature_verified
              else f"{UNVERIFIED}, ")
    out().print(f"attestation: {signed}image {opened.claims.image_digest[:19]}"
                "…, binds this summary and sealed result")
    held = opened.summary.withheld
    if held is not None:
        why = (f"{held.n_cases} case(s), the benchmark's minimum is {held.minimum}"
               if held.rule == "cases" else "a histogram bin under the plug-in's minimum")
        out().print(f"public summary withheld by the enclave (small-cell rule: {why}): "
                    "submitting it files a withheld result, never ranked; the per-case results "
                    "below are yours")
    shown = opened.benchmark.presentation
    table(
        "per-case results (private to you)"
        + ("" if opened.signature_verified else f" ({UNVERIFIED})"),
        ("case", "outcome",
         *(shown.label(ref) for ref in workflows.case_columns(opened.benchmark))),
        (workflows.case_cells(opened.benchmark, case) for case in opened.cases),
    )
    return opened


@result_app.command("fetch")
def result_fetch(
    run_id: Annotated[str, typer.Argument(help="run id (see 'sealbench result ls')")],
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
) -> runs.RunRecord:
    """Copy a run's result from its Cloud Storage destination (where a Confidential Space VM
    writes it) to this machine, with your own cloud credentials; then 'result open' it."""
    with session(profile) as s:
        store = runs.RunStore(s.profile.data_dir / "runs")
        record = store.get(run_id)
        cloud = owner.owner_cloud(s.profile, s.client, mock_tee)
        fetched = runs.fetch_run_result(
            record, cloud.blob_store, s.profile.data_dir / "results", store
        )
    where = fetched.result_uri.removeprefix("file://")
    out().print(f"run {run_id}: result in {where}; open it with 'sealbench result open {run_id}'")
    return fetched


@result_app.command("submit")
def result_submit(
    run_id: Annotated[str, typer.Argument(help="run id (see 'sealbench result ls')")],
    yes: Annotated[bool, typer.Option(
        "--yes", help="send without asking (the request is still printed first)")] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> ResultPublic:
    """Send the run's public summary, sealed-result digest and attestation token; the registry
    verifies the attestation before accepting it. The exact request is printed before it is
    sent; at a terminal you confirm it (--yes: no question). Its receipt (the proof that the
    registry logged exactly this result) is then checked and kept ('sealbench audit prove
    ID'). Submitting an accepted run again changes nothing."""
    with session(profile) as s:
        record, opened = _open(s.profile, run_id, lenient=True)
        earlier = [
            r for r in s.client.list_results(record.benchmark_id)
            if (r.dataset_id, r.model_id) == (record.dataset_id, record.model_id)
        ]
        twin = next((r for r in earlier
                     if r.sealed_result_digest == opened.sealed_result_sha256), None)
        if twin is not None:
            runs.link_result(s.client, record, twin, runs.RunStore(s.profile.data_dir / "runs"))
            if not json_out:
                out().print(f"run {run_id} is already result {twin.id}, accepted "
                            f"{twin.created_at:%Y-%m-%d %H:%M} UTC; nothing changed")
            else:
                emit_json(twin)
            _receipt(profile, twin, opened, quiet=json_out)
            return twin
        body = runs.result_submission(record, opened)
        _preview_submission(body, json_out)
        if not yes and sys.stdin.isatty() and not typer.confirm("send it?", default=True):
            raise typer.Exit(1)
        result = runs.submit_run_result(
            s.client, record, body, runs.RunStore(s.profile.data_dir / "runs")
        )
    if json_out:
        emit_json(result)
        _receipt(profile, result, opened, quiet=True)
        return result
    out().print(f"result {result.id} accepted: attestation verified (issuer "
                f"{result.token_issuer}, image {result.image_digest[:19]}…)")
    if earlier:
        latest = max(earlier, key=lambda r: r.id)
        same = "same image" if latest.image_digest == result.image_digest else "another image"
        out().print(
            f"it supersedes result {latest.id} of {latest.created_at:%Y-%m-%d %H:%M} UTC "
            f"({same}) for dataset {record.dataset_id} and model {record.model_id} on the "
            "leaderboard"
        )
    _receipt(profile, result, opened, quiet=False)
    return result


def _preview_submission(body: ResultCreate, json_out: bool) -> None:
    """Print what the registry will receive (on stderr under --json): every figure of the
    summary as sent; the attestation token (public, long, checked by the registry) by size."""
    shown = body.model_dump(mode="json")
    token = shown["attestation_token"]
    shown["attestation_token"] = (f"{token[:16]}… ({len(token)} characters: the enclave's "
                                  "attestation token, verified by the registry)")
    typer.echo("the registry will receive exactly this:\n"
               + json.dumps(shown, indent=2, ensure_ascii=False), err=json_out)


def _receipt(profile: str | None, result: ResultPublic, opened: Any, *, quiet: bool) -> None:
    """Fetch, check and keep the receipt of an accepted result (not without a pinned log key:
    the result is in, and 'audit prove' checks its receipt once a key is pinned)."""
    with session(profile) as s:
        try:
            receipt, path = keep_receipt(s, result.id, opened)
        except LogKeyNotPinnedError as exc:
            log.warning("the receipt of result %s is not checked: %s; %s", result.id, exc,
                        exc.hint)
            return
    if not quiet:
        out().print(f"receipt kept in {path}: event {receipt.event.seq} of the registry's log, "
                    f"proven in its checkpoint of {receipt.tree_size} events "
                    f"('sealbench audit prove {result.id}' shows it)")


# -- mock TEE ----------------------------------------------------------------------------------


@mock_tee_app.command("up")
def mock_tee_up(
    state_dir: Annotated[Path, typer.Option(help="where the mock keeps its state")],
    iam_propagation_s: Annotated[float, typer.Option(
        min=0, max=86400,
        help="seconds before a changed KMS key or bucket IAM policy takes effect, as Google's "
        "IAM propagation delay (typically 2 minutes there; default 0: at once)",
    )] = 0.0,
) -> None:
    """Run the INSECURE mock confidential cloud in the foreground until Ctrl-C; prints its
    endpoints. Never put real data in it."""
    from sealbench.mocktee import MockCloud

    stop = threading.Event()
    cloud = MockCloud(state_dir.resolve(), iam_propagation_s=iam_propagation_s)
    endpoints = cloud.start()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        emit_json(endpoints.to_json())
        out().print(f"mock TEE up (state {state_dir.resolve()}); use it with "
                    f"'sealbench profile add NAME --server URL --mock-tee {state_dir.resolve()}'."
                    " Ctrl-C stops it.")
        stop.wait()
    finally:
        cloud.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
