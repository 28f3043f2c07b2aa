"""How the CLI shows what the registry and the plug-ins say, shared by the commands and by
``sealbench demo`` (which prints what the commands print): the pooled leaderboard's table
(``sealbench benchmark leaderboard``), a plug-in's compact result columns (``benchmark
results``) and a hospital's private per-case rows (``result open``). Rendering only: every value
comes from the registry or the plug-in."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from rich.console import Console

from sealbench.benchmarks.release import LocalExact
from sealbench.client.plugins import summary_of
from sealbench.client.views.table import table
from sealbench.server.schemas.leaderboard import (
    PooledLeaderboard,
    PooledValuePublic,
    StandingPublic,
)

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark, CaseResult, MetricRef
    from sealbench.client.assets.owner import PolicySync
    from sealbench.client.runs.local_results import Submission
    from sealbench.client.runs.records import RunRecord
    from sealbench.client.runs.result_open import OpenedResult
    from sealbench.server.schemas import AssociationPublic, BenchmarkPublic, DatasetPublic

__all__ = [
    "BIAS_NOTE",
    "MOCK_BADGE",
    "association",
    "benchmark_created",
    "board_plan",
    "breakdown",
    "case_cells",
    "case_columns",
    "column_titles",
    "consent_plan",
    "dataset_registered",
    "exact_request",
    "opened_result",
    "policy_synced",
    "print_table",
    "receipt_kept",
    "result_cells",
    "run_outcomes",
    "submission_accepted",
]

MOCK_BADGE = "mock TEE, not a confidential run"
BIAS_NOTE = ("* ±: the largest error the plug-in's method of computing the value can make beside "
             "noise and sampling (e.g. an AUROC read from score bins)")


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pooled(value: PooledValuePublic) -> str:
    if value.pooled is None or value.bias is None:
        return _fmt(value.pooled)
    return f"{value.pooled:.4f} ±{value.bias:.4f}*"


def _interval(value: PooledValuePublic) -> str:
    if value.ci95_low is None or value.ci95_high is None:
        return "-"
    return f"{value.ci95_low:.4f} to {value.ci95_high:.4f}"


def _epsilon(value: PooledValuePublic) -> str:
    if value.epsilon is not None:
        return f"{value.epsilon:g}"
    private = [s.epsilon for s in value.sites if s.epsilon is not None]
    return f"{max(private):g}" if private else ("exact" if value.sites else "-")


def _coverage(standing: StandingPublic) -> str:
    """Which sites a model's figure covers and which accepted results wait for the next pool
    (empty when the board says nothing of it)."""
    parts = []
    if standing.covers and (standing.values[0].tee_pooled or standing.waiting):
        names = ", ".join(c.name for c in standing.covers)
        parts.append(f"covers {_plural(len(standing.covers), 'site')} ({names})")
    if standing.waiting:
        waits = ", ".join(w.name + (" (a new site)" if w.new_site else " (a newer result)")
                          for w in standing.waiting)
        parts.append(f"{_plural(len(standing.waiting), 'result')} "
                     f"wait{'s' if len(standing.waiting) == 1 else ''} for the next pool: {waits}")
    return "; ".join(parts)


def print_table(console: Console, board: PooledLeaderboard) -> None:
    label = next((m.label for m in board.metrics if m.key == board.metric), board.metric)
    rows = []
    notes: list[str] = []
    for s in board.standings:
        v = s.values[0]
        rank = "-" if s.rank is None else f"{s.rank}{'=' if s.tied else ''}"
        span = "-" if v.site_min is None else f"{_fmt(v.site_min)} to {_fmt(v.site_max)}"
        model = f"{s.model_name} {s.model_version} (#{s.model_id})"
        pooled = _pooled(v)
        if v.pooled is None and v.withheld_reason is not None:
            notes.append(f"({len(notes) + 1}) {model}: {v.withheld_reason}")
            pooled = f"withheld ({len(notes)})"
        sites = f"{v.n_sites} in TEE" if v.tee_pooled else str(v.n_sites)
        rows.append((rank, model + (" ‡" if s.mock_tee else ""), pooled, _interval(v),
                     sites, v.n_cases, _epsilon(v), span, "-" if v.i2 is None else f"{v.i2:.0%}"))
    table(f"leaderboard of benchmark {board.benchmark_id} ({board.plugin}): {label} pooled "
          f"over sites ({board.direction} is better)",
          ("rank", "model", "pooled", "95% CI", "sites", "cases", "ε", "site range", "I²"), rows,
          right=frozenset({"rank", "pooled", "95% CI", "sites", "cases", "ε", "site range",
                           "I²"}),
          console=console)
    for note in notes:
        console.print(note, markup=False)
    for s in board.standings:
        line = _coverage(s)
        if line:
            console.print(f"{s.model_name} {s.model_version} (#{s.model_id}): {line}",
                          markup=False)
    if any(s.n_waiting for s in board.standings):
        console.print(f"waiting results join the figure at the next pool: 'sealbench benchmark "
                      f"pool {board.benchmark_id}' (the authority)", markup=False)
    if any(s.values[0].tee_pooled for s in board.standings):
        console.print("in TEE: the sites' exact results pooled inside the benchmark's attested "
                      "aggregator, privacy noise drawn once for the pooled figure")
    if any(_epsilon(s.values[0]) == "exact" for s in board.standings):
        console.print("exact: published without privacy noise, by each data owner's consent "
                      "(--consent-exact-release); no privacy bound")
    if any(_epsilon(s.values[0]) not in ("-", "exact") for s in board.standings):
        console.print("ε: the privacy loss of the release behind the figure (smaller: more "
                      "private, more noise)")
    if any(s.values[0].pooled is not None and s.values[0].bias is not None
           for s in board.standings):
        console.print(BIAS_NOTE)
    if any(s.mock_tee for s in board.standings):
        console.print(f"‡ {MOCK_BADGE}: verified against a mock attestation issuer")
    console.print(f"Ranks: {board.rank_rule} ('=' marks a tie). Figures pooled from "
                  f"{board.scope}.")
    if board.withheld:
        # one line per reason (a benchmark that publishes its pooled release only withholds
        # every per-site result for the same reason)
        by_reason: dict[str, list[str]] = {}
        for w in board.withheld:
            by_reason.setdefault(w.reason, []).append(
                f"model {w.model_id} on dataset {w.dataset_id}")
        for reason, which in by_reason.items():
            console.print(f"{_plural(len(which), 'result')} not on the board: {reason} "
                          f"({', '.join(which)})", markup=False)


# -- a plug-in's columns -------------------------------------------------------------------------


def column_titles(plugin: Benchmark) -> tuple[str, ...]:
    """Titles of the plug-in's compact columns (``Dice WT``, ``AUROC``)."""
    shown = plugin.presentation
    return tuple(shown.label(ref) for ref in shown.columns)


def _text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def result_cells(plugin: Benchmark, summary: Mapping[str, Any]) -> tuple[str, ...]:
    """The compact columns' values of a registry result's summary."""
    parsed = summary_of(plugin, summary)
    figures = {} if parsed is None else {f.ref: f.value for f in plugin.figures(parsed)}
    return tuple(_text(figures.get(ref)) for ref in plugin.presentation.columns)


def case_columns(plugin: Benchmark) -> tuple[MetricRef, ...]:
    """The compact columns a per-case table shows: those of per-case metrics (a dataset-level
    metric has no per-case value)."""
    shown = plugin.presentation
    return tuple(ref for ref in shown.columns if not shown.metric(ref.metric).dataset_level)


def case_cells(plugin: Benchmark, case: CaseResult) -> tuple[str, ...]:
    """One private per-case row: the case id, ``scored`` or ``failed: <reason>``, then its
    values of :func:`case_columns` (from the summary of that case alone; blank if failed)."""
    columns = case_columns(plugin)
    if case.failed:
        reason = case.to_json().get("reason")
        return (case.case_id, f"failed: {reason or 'no reason given'}", *("",) * len(columns))
    # the hospital's own case on its own machine: exact, no release noise
    figures = {f.ref: f.value for f in plugin.figures(plugin.summarise([case], LocalExact()))}
    return (case.case_id, "scored", *(_text(figures.get(ref)) for ref in columns))


# -- what each step of a participant's walk prints (the commands and the demo alike) ----------


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def benchmark_created(console: Console, created: BenchmarkPublic) -> None:
    """``benchmark create``'s line."""
    console.print(f"benchmark {created.id} created: {created.name} {created.version} "
                  f"[{created.state}]; an admin approves it with "
                  f"'sealbench benchmark approve {created.id}'", markup=False)


def board_plan(console: Console, plugin: Benchmark, *, in_tee: bool | None,
               sites: int = 3, cases: int = 50, heading: bool = True) -> None:
    """What a benchmark's board will read at a typical start (``benchmark create``'s
    confirmation, the consent text): :func:`sealbench.benchmarks.planning.plan`'s lines."""
    from sealbench.benchmarks.planning import plan

    if heading:
        console.print("what the board will read (privacy noise included; 'sealbench benchmark "
                      "plan' for other sizes):", markup=False)
    for line in plan(plugin, sites=sites, cases=cases, in_tee=in_tee).lines():
        console.print(line, markup=False)


def consent_plan(console: Console, client: Any, bench: BenchmarkPublic, dataset: int) -> None:
    """What a hospital reads before it consents: the board's plan (:func:`board_plan`) at the
    benchmark's sites once it joins (those approved, plus its own) and its dataset's size.
    Says nothing when this machine lacks the benchmark's plug-in."""
    from sealbench.client.errors import ClientError
    from sealbench.client.extras import MissingExtraError
    from sealbench.client.plugins import plugin_for

    try:
        plugin = plugin_for(bench)
        cases = int(client.get_dataset(dataset).case_count)
    except (ClientError, MissingExtraError):
        return
    try:
        joined = {a.asset_id for a in client.list_associations("dataset", bench.id)
                  if a.status == "approved"}
    except ClientError:
        joined = set()
    console.print(f"before you consent, what the board will read once dataset {dataset} "
                  "joins:", markup=False)
    board_plan(console, plugin, in_tee=bench.aggregator_image_digest is not None,
               sites=len(joined - {dataset}) + 1, cases=cases, heading=False)


def exact_request(body: BaseModel, *, sized_member: str | None = None) -> str:
    """What the registry will receive, printed before it is sent (``dataset register``,
    ``result submit``); an attestation token (public, long, checked by the registry) by size."""
    shown = body.model_dump(mode="json", exclude_none=sized_member is None)
    if sized_member is not None:
        token = shown[sized_member]
        shown[sized_member] = (f"{token[:16]}… ({len(token)} characters: the enclave's "
                               "attestation token, verified by the registry)")
    return ("the registry will receive exactly this:\n"
            + json.dumps(shown, indent=2, ensure_ascii=False))


def dataset_registered(console: Console, created: DatasetPublic,
                       budget_group: str | None = None) -> None:
    """``dataset register``'s lines."""
    console.print(f"dataset {created.id} registered: {created.name}, "
                  f"{_plural(created.case_count, 'case')}, digest {created.digest}")
    group = "" if budget_group is None else f" (shared by budget group {budget_group})"
    console.print(f"privacy budget: epsilon {created.budget_epsilon:g} at delta "
                  f"{created.budget_delta:g}{group}")


def association(console: Console, kind: str, asset_id: int, benchmark: int,
                row: AssociationPublic, *, already: bool) -> None:
    """``dataset associate`` / ``model associate``'s line."""
    if already:  # asking again for a pending or approved link changes nothing: say so
        console.print(f"{kind} {asset_id} is already {row.status} in benchmark {benchmark}; "
                      "nothing changed")
        return
    tail = "" if row.status == "approved" else "; the benchmark's owner approves it"
    console.print(f"{kind} {asset_id} → benchmark {benchmark}: {row.status}{tail}")


def policy_synced(console: Console, kind: str, asset_id: int, synced: PolicySync) -> None:
    """``policy sync``'s table of the workloads granted and its summary line."""
    report = synced.report
    table(
        f"workloads allowed to use {kind} {asset_id}'s key",
        ("benchmark", "dataset", "model", "image"),
        ((g.benchmark_id, g.dataset_id, g.model_id, g.identity.image_digest[:19] + "…")
         for g in synced.grants),
        console=console,
    )
    console.print(f"policy synced: provider {report.provider}, key +{len(report.key.added)} "
                  f"-{len(report.key.removed)} workloads"
                  + ("" if report.changed else " (nothing to change)"))


def breakdown(record: RunRecord) -> str:
    """`` (infer 12.0 s, score 3.1 s; on CUDAExecutionProvider)``: the two or three longest
    steps of the enclave and the execution provider it said ran the model."""
    parts = []
    if record.step_seconds:
        longest = sorted(record.step_seconds.items(), key=lambda kv: -kv[1])[:3]
        parts.append(", ".join(f"{name} {seconds:.1f} s" for name, seconds in longest))
    if record.execution_provider is not None:
        parts.append(f"on {record.execution_provider}")
    return f" ({'; '.join(parts)})" if parts else ""


def run_outcomes(console: Console, records: Iterable[RunRecord]) -> None:
    """``run``'s line per finished run."""
    for record in records:
        if record.status == "succeeded":
            console.print(f"model {record.model_id}: run {record.run_id} succeeded in "
                          f"{record.wall_seconds or 0:.1f} s{breakdown(record)}; open it "
                          f"with 'sealbench result open {record.run_id}'")
        elif record.status == "failed":
            console.print(f"model {record.model_id}: run {record.run_id} failed "
                          f"({record.reason}): {record.error}", markup=False)


def opened_result(console: Console, run_id: str, record: RunRecord,
                  opened: OpenedResult) -> None:
    """``result open``'s account of a result and its private per-case table."""
    from sealbench.client.runs.result_open import UNVERIFIED

    if not opened.signature_verified:
        console.print(f"[bold red]{UNVERIFIED}[/]: nothing proves an enclave produced this "
                      "result (opened with --unverified)")
    agg = opened.aggregates
    console.print(f"run {run_id}: benchmark {record.benchmark_id}, dataset {record.dataset_id}, "
                  f"model {record.model_id}; {agg.n_cases} cases, "
                  f"{sum(c.failed for c in opened.cases)} failed")
    signed = (f"signed by {opened.claims.iss}, " if opened.signature_verified
              else f"{UNVERIFIED}, ")
    console.print(f"attestation: {signed}image {opened.claims.image_digest[:19]}"
                  "…, binds this summary and sealed result")
    held = opened.summary.withheld
    if held is not None and held.rule == "pooled":
        console.print("no per-site release: the benchmark publishes its pooled release only "
                      "(drawn inside the TEE over every current site); submitting this result "
                      "lets the next pool include it and charges no per-site release; the "
                      "per-case results below are yours")
    elif held is not None:
        why = (f"{held.n_cases} case(s), the benchmark's minimum is {held.minimum}"
               if held.rule == "cases" else "a histogram bin under the plug-in's minimum")
        console.print(f"public summary withheld by the enclave (small-cell rule: {why}): "
                      "submitting it files a withheld result, never ranked; the per-case "
                      "results below are yours")
    shown = opened.benchmark.presentation
    table(
        "per-case results (private to you)"
        + ("" if opened.signature_verified else f" ({UNVERIFIED})"),
        ("case", "outcome", *(shown.label(ref) for ref in case_columns(opened.benchmark))),
        (case_cells(opened.benchmark, case) for case in opened.cases),
        console=console,
    )


def submission_accepted(console: Console, submitted: Submission) -> None:
    """``result submit``'s account of an accepted result (and of the one it supersedes)."""
    result, record = submitted.result, submitted.record
    if submitted.already_submitted:
        console.print(f"run {record.run_id} is already result {result.id}, accepted "
                      f"{result.created_at:%Y-%m-%d %H:%M} UTC; nothing changed")
        return
    console.print(f"result {result.id} accepted: attestation verified (issuer "
                  f"{result.token_issuer}, image {result.image_digest[:19]}…)")
    latest = submitted.superseded
    if latest is not None:
        same = "same image" if latest.image_digest == result.image_digest else "another image"
        console.print(
            f"it supersedes result {latest.id} of {latest.created_at:%Y-%m-%d %H:%M} UTC "
            f"({same}) for dataset {record.dataset_id} and model {record.model_id} on the "
            "leaderboard"
        )


def receipt_kept(console: Console, result_id: int, receipt: Any, path: Path) -> None:
    """``result submit``'s line once the receipt is checked and kept."""
    console.print(f"receipt kept in {path}: event {receipt.event.seq} of the registry's log, "
                  f"proven in its checkpoint of {receipt.tree_size} events "
                  f"('sealbench audit prove {result_id}' shows it)")


def pool_outcomes(console: Console, outcomes: Iterable[Any]) -> None:
    """What ``sealbench benchmark pool`` prints: per model, its verified pooled release or why
    nothing was pooled, and each result the registry left out."""
    for o in outcomes:
        if hasattr(o, "release_id"):
            paid = ("its authorization run again: debited when first authorized, it yields the "
                    "same release" if o.debits is None
                    else f"{_plural(len(o.debits), 'privacy budget')} debited once on the "
                    "registry's log before any draw")
            console.print(f"model {o.model_id}: pooled release {o.release_id} over "
                          f"{_plural(o.n_sites, 'site')}, {_plural(o.n_cases, 'case')} inside the "
                          f"TEE; attestation verified; {paid}", markup=False)
        else:
            console.print(f"model {o.model_id}: {o.reason}", markup=False)
        for line in o.left_out:
            console.print(f"  left out: {line}", markup=False)
