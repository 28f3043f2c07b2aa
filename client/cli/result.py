"""``sealbench result``: the results of your runs: list, open locally, fetch, submit. Thin:
options in, :mod:`sealbench.client.runs.local_results` called, rendering out."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from sealbench.client.assets import owner
from sealbench.client.assets.accounts import owner_store
from sealbench.client.cli.audit import keep_receipt
from sealbench.client.cli.common import (
    JsonOpt,
    MockTeeOpt,
    ProfileOpt,
    emit_json,
    log,
    out,
    provider_label,
    session,
    table,
)
from sealbench.client.errors import LogKeyNotPinnedError
from sealbench.client.runs.batch import repair_stale_runs
from sealbench.client.runs.local_results import (
    SubmissionDeclined,
    open_local_result,
    run_store,
    submit_local_result,
)
from sealbench.client.runs.records import RunRecord
from sealbench.client.runs.submit import fetch_run_result
from sealbench.client.views import render
from sealbench.server.schemas import ResultCreate, ResultPublic

__all__ = ["result_app", "result_fetch", "result_ls", "result_open", "result_submit"]

result_app = typer.Typer(help="Results of your runs: list, open locally, submit to the registry.")

RunIdArg = Annotated[str, typer.Argument(help="run id (see 'sealbench result ls')")]


@result_app.command("ls")
def result_ls(profile: ProfileOpt = None, json_out: JsonOpt = False) -> list[RunRecord]:
    """Runs launched from this machine with this profile, and whether they were submitted."""
    with session(profile) as s:
        store = run_store(s.profile)
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


UnverifiedOpt = Annotated[
    bool,
    typer.Option("--unverified",
                 help="open the result even when the attestation verifier's keys cannot be "
                 "fetched (offline, none cached): its signature is then NOT checked, and the "
                 "output says so"),
]


@result_app.command("open")
def result_open(
    run_id: RunIdArg,
    unverified: UnverifiedOpt = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> Any:
    """Verify and decrypt a run's result locally: per-case scores stay on this machine. The
    result token's signature is checked against the keys of the profile's attestation verifier
    (Google's, fetched and cached; the mock's), and the command refuses when they cannot be
    had, unless --unverified."""
    from sealbench.client.runs.result_open import UNVERIFIED

    with session(profile) as s:
        record, opened = open_local_result(s.profile, run_id, unverified=unverified)
    attestation = (f"signature verified: signed by {opened.claims.iss}"
                   if opened.signature_verified else UNVERIFIED)
    if json_out:
        emit_json({"summary": opened.summary_json, "per_case": opened.per_case,
                   "signature_verified": opened.signature_verified,
                   "attestation": attestation})
        return opened
    render.opened_result(out(), run_id, record, opened)
    return opened


@result_app.command("fetch")
def result_fetch(
    run_id: RunIdArg,
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
) -> RunRecord:
    """Copy a run's result from its Cloud Storage destination (where a Confidential Space VM
    writes it) to this machine, with your own cloud credentials; then 'result open' it."""
    with session(profile) as s:
        store = run_store(s.profile)
        record = store.get(run_id)
        cloud = owner.owner_cloud(s.profile, s.client, mock_tee)
        fetched = fetch_run_result(
            record, owner_store(cloud), s.profile.data_dir / "results", store
        )
    where = fetched.result_uri.removeprefix("file://")
    out().print(f"run {run_id}: result in {where}; open it with 'sealbench result open {run_id}'")
    return fetched


@result_app.command("submit")
def result_submit(
    run_id: RunIdArg,
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

    def confirm(body: ResultCreate) -> bool:
        _preview_submission(body, json_out)
        return yes or not sys.stdin.isatty() or typer.confirm("send it?", default=True)

    with session(profile) as s:
        try:
            submitted = submit_local_result(s.profile, s.client, run_id, confirm=confirm)
        except SubmissionDeclined:
            raise typer.Exit(1) from None
    result, opened = submitted.result, submitted.opened
    if json_out:
        emit_json(result)
    else:
        render.submission_accepted(out(), submitted)
    _receipt(profile, result, opened, quiet=json_out)
    return result


def _preview_submission(body: ResultCreate, json_out: bool) -> None:
    """Print what the registry will receive (on stderr under --json): every figure of the
    summary as sent; the attestation token (public, long, checked by the registry) by size."""
    typer.echo(render.exact_request(body, sized_member="attestation_token"), err=json_out)


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
        render.receipt_kept(out(), result.id, receipt, path)
