"""``sealbench run``: evaluate datasets with models inside a TEE. Thin: the flags become a
:class:`~sealbench.client.runs.options.RunOptions`, :mod:`sealbench.client.runs.launch` runs it,
the events are rendered (:mod:`sealbench.client.cli.progress`).

The command is ``run`` here; :mod:`sealbench.client.cli` registers it as ``run_command`` so
that ``sealbench.client.cli.run`` stays this module's name."""

from __future__ import annotations

import contextlib
import copy
from typing import Annotated, Any

import typer

from sealbench.client.cli.common import (
    JsonOpt,
    MockTeeOpt,
    ProfileOpt,
    out,
    progress_bar,
    session,
)
from sealbench.client.cli.progress import JsonEvents, RunDisplay
from sealbench.client.errors import ClientError
from sealbench.client.runs.batch import DEFAULT_IAM_WAIT_S, StageTimeouts
from sealbench.client.runs.launch import prepare_runs
from sealbench.client.runs.launchers.for_profile import launch_options
from sealbench.client.runs.options import RunOptions
from sealbench.client.runs.records import RunRecord
from sealbench.client.views.render import run_outcomes as render_outcomes

__all__ = ["run"]


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
        str, typer.Option(help="TEE backend: mock, docker, confidential-space, or one that "
                          "another installed platform brings")
    ] = "mock",
    force: Annotated[
        bool, typer.Option("--force", help="run again even if a run already succeeded")
    ] = False,
    start_timeout: Annotated[
        float, typer.Option(min=1, help="seconds a run may take to start (VM creation, ...)")
    ] = StageTimeouts.start_s,
    run_timeout: Annotated[
        float | None,
        typer.Option(min=1, help="seconds a started run may take to finish (default: what the "
                     "benchmark's per-case limits allow the dataset's cases, plus the launch; "
                     "a shorter one is refused, since a model that spins on cases up to their "
                     "limit would fail the run and everyone reading the run would see it)")
    ] = None,
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
) -> list[RunRecord]:
    """Evaluate your dataset(s) with a model, or every approved pair (--all-approved), inside
    a TEE, --parallel N at a time. Each run is recorded locally and its status reported to the
    registry; a pair already evaluated with the benchmark's image is skipped unless --force.
    Ctrl-C stops launching, tears down what runs and records it interrupted: the same command
    again resumes with what is left. --json prints one event per line."""
    options = RunOptions(
        benchmark=benchmark, dataset=dataset, model=model, all_approved=all_models,
        parallel=parallel, tee=tee, force=force, start_timeout_s=start_timeout,
        run_timeout_s=run_timeout, insecure_debug_image=insecure_debug_image, image=image,
        launch=launch_options(
            tee, project=project, zone=zone, service_account=service_account,
            image_reference=image_reference, tdx=tdx, keep_vm=keep_vm, debug=debug,
            compute_endpoint=compute_endpoint, accelerator=accelerator),
        keep_vm=keep_vm, result_uri=result_uri,
        allow_cpu_fallback=allow_cpu_fallback, iam_wait_s=iam_wait, mock_tee=mock_tee,
    )
    with session(profile) as s:
        prepared = prepare_runs(s.profile, s.client, options)
        with contextlib.ExitStack() as stack:
            if json_out:
                render: Any = JsonEvents()
            else:
                bar = stack.enter_context(progress_bar())
                render = RunDisplay(bar, len(prepared.plan.todo))
            batch = prepared.execute(on_event=render)
    if not json_out:
        render_outcomes(out(), batch.outcome.records)
    if batch.interrupted:
        left = [r for r in batch.outcome.records if r.status == "interrupted"]
        if not json_out:
            out().print(f"interrupted: {len(left)} run(s) recorded interrupted; run the same "
                        "command again to resume with what is left")
        raise typer.Exit(130)
    failed = len(batch.outcome.failed)
    try:
        batch.raise_first_error()
    except ClientError as exc:
        if json_out or not failed:
            raise
        raise cause_shown_above(exc, failed, len(batch.outcome.records)) from exc
    return batch.records


def cause_shown_above(exc: ClientError, failed: int, total: int) -> ClientError:
    """``exc`` (the batch's first failure: its exit code and hint) with its cause, which the
    failed run's line above already printed in full (a key refusal's runs to ~700 characters),
    replaced by a pointer to it, so that each cause is printed once."""
    short = copy.copy(exc)
    short.args = (f"{failed} of {total} run(s) failed; the cause is on each failed run's "
                  "line above",)
    return short
