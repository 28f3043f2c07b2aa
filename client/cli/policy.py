"""``sealbench policy``: who may unwrap your key. Thin: options in,
:mod:`sealbench.client.assets.policy` called, rendering out."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from sealbench.client.assets import owner
from sealbench.client.assets.policy import policy_watcher, sync_asset_policy
from sealbench.client.cli.common import (
    JsonOpt,
    MockTeeOpt,
    ProfileOpt,
    emit_json,
    out,
    session,
)
from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import AssetKind
from sealbench.client.views import render

__all__ = ["policy_app", "policy_sync"]

policy_app = typer.Typer(help="Who may unwrap your key: sync it with the approved associations.")


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
    undelete: Annotated[
        bool,
        typer.Option("--undelete", help="undelete your workload identity pool or provider if "
                     "it was deleted (kept 30 days, federating nothing); without it the sync "
                     "refuses and names the command"),
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
    if watch and undelete:
        raise ConfigError("--undelete goes with one sync, not --watch: undelete once, then watch")
    if watch:
        _policy_watch(dataset, model, result_bucket, interval, once, mock_tee, profile)
        return None
    kind: AssetKind = "dataset" if dataset is not None else "model"
    asset_id = dataset if dataset is not None else model
    assert asset_id is not None
    with session(profile) as s:
        synced = sync_asset_policy(s.profile, s.client, kind, asset_id,
                                   result_bucket=result_bucket, mock_tee=mock_tee,
                                   undelete=undelete)
    report = synced.report
    if json_out:
        emit_json({
            "workloads": [{"benchmark": g.benchmark_id, "dataset": g.dataset_id,
                           "model": g.model_id, "uid": g.identity.uid()} for g in synced.grants],
            "provider": report.provider, "pool_created": report.pool_created,
            "undeleted": list(getattr(report, "undeleted", ())),
            "added": list(report.key.added), "removed": list(report.key.removed),
            "result_bucket": _change(report.result_bucket),
            # the aggregator's read access to the result bucket (issue 27)
            "result_readers": _change(getattr(report, "result_readers", None)),
            "reported": {str(k): v for k, v in synced.reported.items()},
        })
        return synced
    render.policy_synced(out(), kind, asset_id, synced)
    return synced


def _change(change: Any) -> dict[str, list[str]] | None:
    return None if change is None else {"added": list(change.added),
                                         "removed": list(change.removed)}


def _policy_watch(
    dataset: int | None, model: int | None, result_bucket: str | None, interval: float,
    once: bool, mock_tee: Path | None, profile: str | None,
) -> None:
    """``policy sync --watch``: :class:`~sealbench.client.assets.grants_watch.PolicyWatch` with one
    printed line per action; SIGINT and SIGTERM (a scheduler stopping the job) end it with
    exit 130."""
    assets: tuple[tuple[AssetKind, int], ...] | None = (
        (("dataset", dataset),) if dataset is not None
        else (("model", model),) if model is not None else None)
    with session(profile) as s:
        watcher = policy_watcher(
            s.profile, s.client, assets=assets, interval_s=interval, result_bucket=result_bucket,
            mock_tee=mock_tee, on_line=lambda line: out().print(line, markup=False),
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
